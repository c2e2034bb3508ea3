#!/usr/bin/env bash
# Bad input to stage 10: each case must exit with status 2 and a message naming the
# key, under mpirun as a user would run it.
# Usage: bad_input_cp.sh TRAIN10 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN10=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
failures=0
expect_refused "seq_len not in 2 cp chunks"   "seq_len=32 does not divide into 6 chunks"   3 "$TRAIN10" cp=3
expect_refused "contiguous: seq_len by cp"    "seq_len=30 does not divide into 4 chunks"   4 "$TRAIN10" cp=4 seq_len=30 cp_split=contiguous
expect_refused "unknown cp_split"             "cp_split=ring"                              2 "$TRAIN10" cp=2 cp_split=ring
expect_refused "cp x dp not the ranks"        "but the job has 3 ranks"                    3 "$TRAIN10" cp=2
expect_refused "cp x tp x dp not the ranks"   "dp=1 x tp=2 x pp=1 x cp=2"                  2 "$TRAIN10" cp=2 tp=2 dp=1
[ "$failures" -eq 0 ] && echo "all bad-input cases of stage 10 refused as they must be" || exit 1
