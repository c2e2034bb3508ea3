#!/usr/bin/env bash
# A rank stopped before it starts MPI (SIGSTOP, as a job scheduler's suspend, or a machine
# that never answers) held every other rank in MPI_Init for good: MPI's start has no
# timeout of its own. Now each waiting rank ends with exit 2 after comm_timeout_s (3 s
# here), naming the wait, and mpirun ends the job, the stopped rank too. The control:
# the same job with neither rank stopped trains.
# Usage: init_stopped_rank.sh TRAIN02 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
source "$(dirname "$0")/common.sh"
start_mpi_test "$WORK" "$PREPARE"
args=$(echo "$TRAIN" $(tiny_args "$WORK/data" "$WORK/run") --set steps=1 --set sample_tokens=0 \
  --set comm_timeout_s=3)

status=0 began=$SECONDS
# Rank 1's shell stops itself before it becomes the trainer: it never reaches MPI_Init.
timeout 60 "$MPIEXEC" --oversubscribe -np 1 $args : -np 1 bash -c "kill -STOP \$\$; exec $args" \
  > "$WORK/stopped.log" 2>&1 || status=$?
took=$((SECONDS - began))
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] && [ "$took" -lt 30 ] ||
  { echo "FAIL: a job with a stopped rank ended with status $status after $took s"; cat "$WORK/stopped.log"; exit 1; }
grep -q "train: error: rank 0: MPI_Init did not complete within 3 s (comm_timeout_s)" "$WORK/stopped.log" ||
  { echo "FAIL: the waiting rank did not name the wait"; cat "$WORK/stopped.log"; exit 1; }
echo "ok: a stopped rank ended the job after $took s: $(grep -m1 "MPI_Init did not" "$WORK/stopped.log")"

timeout 60 "$MPIEXEC" --oversubscribe -np 1 $args : -np 1 bash -c "exec $args" > "$WORK/control.log" 2>&1 ||
  { echo "FAIL (control): the job without a stopped rank failed"; tail -5 "$WORK/control.log"; exit 1; }
echo "PASS"
