#!/usr/bin/env bash
# A stop signal checkpoints the step and ends the run with status 3; resume=latest goes on
# bit for bit (stop_signal.py says what is checked).
# Usage: stop_signal.sh TRAIN01 TRAIN02 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN01=$1 TRAIN02=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
/usr/bin/python3 "$ROOT/tests/trainer/stop_signal.py" --train01 "$TRAIN01" --train02 "$TRAIN02" \
  --mpiexec "$MPIEXEC" --data "$WORK/data" --work "$WORK" --root "$ROOT"
