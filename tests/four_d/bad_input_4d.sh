#!/usr/bin/env bash
# Bad input to stage 11: each case must exit with status 2 and a message naming the
# key, under mpirun as a user would run it; and activation_checkpointing given to a
# stage that does not implement it (stage 10) is refused the same way.
# Usage: bad_input_4d.sh TRAIN11 TRAIN10 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN11=$1 TRAIN10=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
failures=0
expect_refused "full recompute with zb-h1"   "activation_checkpointing=full with schedule=zb-h1" 2 "$TRAIN11" pp=2 schedule=zb-h1 activation_checkpointing=full
expect_refused "an unknown recompute mode"   "activation_checkpointing: 'true' is not a mode (expected none, selective or full)" 2 "$TRAIN11" pp=2 activation_checkpointing=true
expect_refused "a stage without recompute"   "activation_checkpointing=full: stage 10_context_parallel" 2 "$TRAIN10" cp=2 activation_checkpointing=full
expect_refused "dp x pp x cp x tp"           "dp=1 x tp=2 x pp=2 x cp=2"                   4 "$TRAIN11" dp=1 pp=2 cp=2 tp=2
expect_refused "seq_len not in 2 cp chunks"  "seq_len=32 does not divide into 6 chunks"    3 "$TRAIN11" cp=3
expect_refused "n_layer below pp x v"        "n_layer"                                     4 "$TRAIN11" pp=2 cp=2 virtual_stages=2 n_layer=3
expect_refused "virtual_stages without pp"   "virtual_stages=2"                            2 "$TRAIN11" cp=2 virtual_stages=2
[ "$failures" -eq 0 ] && echo "all bad-input cases of stage 11 refused as they must be" || exit 1
