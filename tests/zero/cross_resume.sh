#!/usr/bin/env bash
# Checkpoints are layout-independent: a checkpoint saved at dp = 4 by stage 05 (ZeRO-3)
# resumes at dp = 2 in stage 03 (ZeRO-1), and one saved at dp = 2 by stage 03 resumes
# at dp = 4 in stage 05, and each continues as an uninterrupted run would.
#
#   T  stage 01 in float64, steps 1..10                         (the ground truth)
#   A  stage 05, dp 4, steps 1..10, checkpoints at 5 and 10   (uninterrupted)
#   B  stage 03, dp 2, steps 1..10, checkpoints at 5 and 10   (uninterrupted)
#   C  stage 05, dp 2, steps 1..10                            (uninterrupted)
#   D  stage 03, dp 2, resumed from A's step 5: steps 6..10
#   E  stage 05, dp 4, resumed from B's step 5: steps 6..10
#   F  as D, but with lr 1% higher after the resume         (negative control)
# D and E are compared with T over steps 6..10 (losses, gradient norms) and on the step-10
# weights and moments, within compare_runs.py's bound: 8 times the largest distance from T
# of the uninterrupted fp32 runs A, B and C up to that step (compare_runs.py --from-step:
# a resumed run starts from the writer's fp32 state, which carries that run's rounding so
# far, then reorders its sums as its own layout does). A resume that drops the moments,
# restarts the learning-rate schedule, or replays the wrong sequences moves the loss in
# its second or third digit. F must be rejected: the comparison sees a change that small.
#
# The one-step SGD variant (optimizer=sgd, grad_clip=0: p -= lr g, no moments, so a
# gradient off by a constant factor moves the weights by that factor; AdamW's m / sqrt(v)
# would hide it): T, A, B and C again for 6 steps, D resumed from A's step 5 for the one
# step 6, compared on the step-6 weights; the same with the step 1.01x too large (the lr
# 1.01x, which under SGD is every gradient 1.01x) must be rejected.
#
# With GPT_TEST_QUICK=1 (the sanitizer pass of scripts/test.sh) the resumes run and are
# compared; the SGD variant and the controls, which run the same code again, are left to
# the default pass.
#
# Usage: cross_resume.sh BIN01 BIN03 BIN05 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
BIN01=$1 BIN03=$2 BIN05=$3 PREPARE=$4 WORK=$5 ROOT=$6 MPIEXEC=$7
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
COMPARE=(/usr/bin/python3 "$ROOT/tests/stages/compare_runs.py")

# run BIN NP DIR [--set k=v...]: 10 steps of the tiny model, global batch 24 (one rank:
# no launcher).
run() {
  local bin=$1 np=$2 dir=$3 launch=()
  shift 3
  ((np == 1)) || launch=("$MPIEXEC" -np "$np" --oversubscribe)
  "${launch[@]}" "$bin" $(tiny_args "$WORK/data" "$dir") --set steps=10 \
    --set batch_size=24 --set micro_batch_size=$((24 / np)) --set val_every=0 --set val_batches=0 \
    --set sample_tokens=0 --set bucket_mb=0.02 --set checkpoint_every=5 --set keep_checkpoints=0 \
    "$@" > "$dir.log" 2>&1 || { echo "FAIL: run $bin -np $np -> $dir"; tail -20 "$dir.log"; exit 1; }
}

# layout_dp CHECKPOINT: the dp its manifest says it was written with.
layout_dp() {
  /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/manifest.json"))["layout"]["dp"])' "$1"
}

# resume BIN NP FROM DIR [--set k=v...]: DIR starts as a fresh run dir holding FROM's
# step-5 checkpoint.
resume() {
  local bin=$1 np=$2 from=$3 dir=$4
  shift 4
  mkdir -p "$dir"
  cp -r "$from/step_00000005" "$dir/"
  run "$bin" "$np" "$dir" --set resume=latest "$@"
  grep -q "resumed from $dir/step_00000005 at step 5" "$dir.log" \
    || { echo "FAIL: $dir did not resume from step 5"; head -5 "$dir.log"; exit 1; }
}

run "$BIN01" 1 "$WORK/T_01_fp64" --set precision=fp64
run "$BIN05" 4 "$WORK/A_05_dp4"
run "$BIN03" 2 "$WORK/B_03_dp2"
run "$BIN05" 2 "$WORK/C_05_dp2"
resume "$BIN03" 2 "$WORK/A_05_dp4" "$WORK/D_03_dp2_from_05_dp4"
resume "$BIN05" 4 "$WORK/B_03_dp2" "$WORK/E_05_dp4_from_03_dp2"
SGD=(--set steps=6 --set optimizer=sgd --set grad_clip=0)
if ! quick_run; then
  resume "$BIN03" 2 "$WORK/A_05_dp4" "$WORK/F_03_dp2_lr_plus_1pct" --set lr="$(scaled_lr 1.01)"
  run "$BIN01" 1 "$WORK/T_sgd_01_fp64" "${SGD[@]}" --set precision=fp64
  run "$BIN05" 4 "$WORK/A_sgd_05_dp4" "${SGD[@]}"
  run "$BIN03" 2 "$WORK/B_sgd_03_dp2" "${SGD[@]}"
  run "$BIN05" 2 "$WORK/C_sgd_05_dp2" "${SGD[@]}"
  resume "$BIN03" 2 "$WORK/A_sgd_05_dp4" "$WORK/D_sgd_03_dp2_from_05_dp4" "${SGD[@]}"
  resume "$BIN03" 2 "$WORK/A_sgd_05_dp4" "$WORK/F_sgd_03_dp2_step_plus_1pct" "${SGD[@]}" --set lr="$(scaled_lr 1.01)"
fi

# The checkpoints really cross layouts: written at one dp, continued at the other.
for pair in "A_05_dp4/step_00000005:4" "D_03_dp2_from_05_dp4/step_00000010:2" \
            "B_03_dp2/step_00000005:2" "E_05_dp4_from_03_dp2/step_00000010:4"; do
  ckpt=${pair%:*} want=${pair##*:}
  got=$(layout_dp "$WORK/$ckpt")
  [ "$got" = "$want" ] || { echo "FAIL: $ckpt was written at dp $got, expected $want"; exit 1; }
done

status=0
ADAMW=(--from-step 6 --step 10 --truth "$WORK/T_01_fp64")
echo "== 05 dp 4 -> 03 dp 2"
"${COMPARE[@]}" "${ADAMW[@]}" --reference "$WORK/A_05_dp4" --ensemble "$WORK/B_03_dp2" "$WORK/C_05_dp2" \
  --candidate "$WORK/D_03_dp2_from_05_dp4" || status=1
echo "== 03 dp 2 -> 05 dp 4"
"${COMPARE[@]}" "${ADAMW[@]}" --reference "$WORK/B_03_dp2" --ensemble "$WORK/A_05_dp4" "$WORK/C_05_dp2" \
  --candidate "$WORK/E_05_dp4_from_03_dp2" || status=1
if quick_run; then
  echo "quick run (GPT_TEST_QUICK=1): the SGD variant and the controls are left to the default pass"
  exit $status
fi
echo "== negative control: 05 dp 4 -> 03 dp 2 with lr 1% higher must be rejected"
"${COMPARE[@]}" --expect-reject "${ADAMW[@]}" --reference "$WORK/A_05_dp4" \
  --ensemble "$WORK/B_03_dp2" "$WORK/C_05_dp2" --candidate "$WORK/F_03_dp2_lr_plus_1pct" || status=1
SGD_CMP=(--from-step 6 --step 6 --kinds param --truth "$WORK/T_sgd_01_fp64" --reference "$WORK/A_sgd_05_dp4"
         --ensemble "$WORK/B_sgd_03_dp2" "$WORK/C_sgd_05_dp2")
echo "== SGD, one step after the resume: 05 dp 4 -> 03 dp 2"
"${COMPARE[@]}" "${SGD_CMP[@]}" --candidate "$WORK/D_sgd_03_dp2_from_05_dp4" || status=1
echo "== negative control: the SGD step after the resume 1% too large must be rejected"
# (the weights alone: the logged gradient norm is the same, the step is not)
"${COMPARE[@]}" --expect-reject --weights-only "${SGD_CMP[@]}" --candidate "$WORK/F_sgd_03_dp2_step_plus_1pct" ||
  status=1
exit $status
