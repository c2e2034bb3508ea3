#!/usr/bin/env bash
# Stage 10's memory by kind is stage 06's formula (tp_budget.h) on each rank's B x T/cp
# rows, with ZeRO's shards over the dp x cp ranks that hold the same weights: parameters,
# gradients, optimizer state and activations, exact (scripts/check_tp_budget.py; its
# communication rows, the tp, cp and dp tables, must equal their formulas too). Runs at
# cp 2 and 4, with tp 2 (and sequence parallelism), ZeRO 0 to 3, both splits, fp32 and
# bf16, dp 2 beside cp 2; then the checker's negative controls (one byte, one call off).
# Usage: budget.sh TRAIN10 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN10=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
logs=()
i=0
for layout in "4 cp=2 tp=2" "4 cp=2 tp=2 zero=3 sequence_parallel=true" \
              "8 cp=2 tp=2 dp=2 zero=2 precision=bf16 cp_split=contiguous micro_batch_size=1" \
              "8 cp=4 tp=2 zero=1 precision=bf16 sequence_parallel=true"; do
  read -r np kvs <<< "$layout"
  i=$((i + 1))
  # shellcheck disable=SC2086  # the layout's keys, one word each
  one_step "run$i" "$np" "$TRAIN10" bucket_mb=0.02 $kvs || exit 1
  logs+=("$WORK/run$i.log")
done
/usr/bin/python3 "$ROOT/scripts/check_tp_budget.py" "${logs[@]}"
/usr/bin/python3 "$ROOT/scripts/check_tp_budget.py" --self-test "${logs[1]}"
echo PASS
