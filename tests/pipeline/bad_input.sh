#!/usr/bin/env bash
# Bad input to the pipeline stages: each case must exit with status 2 and a message
# naming the key, under mpirun as a user would run it; and the pipeline's keys given to
# a stage without pipelines.
# With TRAIN07 and TRAIN08 given, TRAIN is stage 09: its chunk and schedule keys too.
# Usage: bad_input.sh TRAIN_PIPELINE TRAIN06 PREPARE WORKDIR ROOT MPIEXEC [TRAIN07 TRAIN08]
set -euo pipefail
TRAIN=$1 TRAIN06=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6 TRAIN07=${7:-} TRAIN08=${8:-}
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
failures=0

expect_refused "n_layer below pp"             "n_layer=2 is less than pp=3"          3 "$TRAIN" pp=3
expect_refused "pp x dp not the ranks"        "but the job has 3 ranks"              3 "$TRAIN" pp=2
expect_refused "dp x pp x tp not the ranks"   "dp=2 x tp=1 x pp=2"                   2 "$TRAIN" pp=2 dp=2
expect_refused "micro-batches beyond the tags" "more than the pipeline's message tags" 2 "$TRAIN" pp=2 batch_size=16384 micro_batch_size=1
expect_refused "tp not dividing n_head"       "tp=3 does not divide n_head=4"        6 "$TRAIN" pp=2 tp=3
expect_refused "stage 06 refuses pp"          "pp=2: stage 06_tensor_parallel"       2 "$TRAIN06" pp=2
if [ -n "$TRAIN07" ]; then
  expect_refused "n_layer below pp x v"      "n_layer=2 is less than pp=2 x virtual_stages=2" 2 "$TRAIN" pp=2 virtual_stages=2
  expect_refused "chunks without a pipeline" "virtual_stages=2: model chunks interleave"      1 "$TRAIN" virtual_stages=2
  expect_refused "more chunks than layers"   "virtual_stages=3: must be between 1 and n_layer=2" 1 "$TRAIN" \
    virtual_stages=3
  expect_refused "a huge virtual_stages"     "virtual_stages=1073741824: must be between 1 and n_layer=2" 2 "$TRAIN" \
    pp=2 virtual_stages=1073741824
  expect_refused "unknown schedule"          "schedule=zigzag"                                2 "$TRAIN" pp=2 schedule=zigzag
  expect_refused "chunks under 1F1B"         "schedule=1f1b runs one model chunk per rank"   2 "$TRAIN" pp=2 n_layer=4 virtual_stages=2 schedule=1f1b
  expect_refused "stage 08 refuses chunks"   "virtual_stages=2: stage 08_pipeline_1f1b"       2 "$TRAIN08" pp=2 n_layer=4 virtual_stages=2
  expect_refused "stage 07 refuses schedule" "schedule=1f1b: stage 07_pipeline_gpipe"         2 "$TRAIN07" pp=2 schedule=1f1b
fi

[ "$failures" -eq 0 ] && echo "all bad-input cases of $(basename "$(dirname "$TRAIN")") refused as they must be" || exit 1
