#!/usr/bin/env bash
# Checkpoints are layout-independent: a checkpoint saved at dp = 4 by stage 05 (ZeRO-3)
# resumes at dp = 2 in stage 03 (ZeRO-1), and one saved at dp = 2 by stage 03 resumes
# at dp = 4 in stage 05, and each continues with the losses of an uninterrupted run.
#
#   A  stage 05, dp 4, steps 1..10, checkpoints at 5 and 10   (uninterrupted)
#   B  stage 03, dp 2, steps 1..10, checkpoints at 5 and 10   (uninterrupted)
#   C  stage 05, dp 2, steps 1..10                            (uninterrupted)
#   D  stage 03, dp 2, resumed from A's step 5: steps 6..10
#   E  stage 05, dp 4, resumed from B's step 5: steps 6..10
#   F  as D, but with lr 1% higher after the resume         (negative control)
# D is compared with A (the run it continues), with B and C as baselines; E with B,
# with A and C as baselines (cross_resume.py: steps 6..10 and the step-10 tensors).
# F must be rejected: it shows the comparison sees a change that small.
#
# The one-step SGD variant (optimizer=sgd, grad_clip=0: p -= lr g, no moments, so a
# gradient off by a constant factor moves the weights by that factor; AdamW's m / sqrt(v)
# would hide it): A, B and C again for 6 steps, D resumed from A's step 5 for the one
# step 6, compared on the step-6 weights (the floor of one step from the same bits:
# cross_resume.py); the same with the step 1.01x too large (the lr 1.01x, which under SGD
# is every gradient 1.01x) must be rejected.
#
# Usage: cross_resume.sh BIN03 BIN05 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
BIN03=$1 BIN05=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

# run BIN NP DIR [--set k=v...]: 10 fp32 steps of the tiny model, global batch 24.
run() {
  local bin=$1 np=$2 dir=$3
  shift 3
  "$MPIEXEC" -np "$np" --oversubscribe "$bin" $(tiny_args "$WORK/data" "$dir") --set steps=10 \
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

run "$BIN05" 4 "$WORK/A_05_dp4"
run "$BIN03" 2 "$WORK/B_03_dp2"
run "$BIN05" 2 "$WORK/C_05_dp2"
resume "$BIN03" 2 "$WORK/A_05_dp4" "$WORK/D_03_dp2_from_05_dp4"
resume "$BIN05" 4 "$WORK/B_03_dp2" "$WORK/E_05_dp4_from_03_dp2"
resume "$BIN03" 2 "$WORK/A_05_dp4" "$WORK/F_03_dp2_lr_plus_1pct" --set lr="$(scaled_lr 1.01)"
SGD=(--set steps=6 --set optimizer=sgd --set grad_clip=0)
run "$BIN05" 4 "$WORK/A_sgd_05_dp4" "${SGD[@]}"
run "$BIN03" 2 "$WORK/B_sgd_03_dp2" "${SGD[@]}"
run "$BIN05" 2 "$WORK/C_sgd_05_dp2" "${SGD[@]}"
resume "$BIN03" 2 "$WORK/A_sgd_05_dp4" "$WORK/D_sgd_03_dp2_from_05_dp4" "${SGD[@]}"
resume "$BIN03" 2 "$WORK/A_sgd_05_dp4" "$WORK/F_sgd_03_dp2_step_plus_1pct" "${SGD[@]}" --set lr="$(scaled_lr 1.01)"

# The checkpoints really cross layouts: written at one dp, continued at the other.
for pair in "A_05_dp4/step_00000005:4" "D_03_dp2_from_05_dp4/step_00000010:2" \
            "B_03_dp2/step_00000005:2" "E_05_dp4_from_03_dp2/step_00000010:4"; do
  ckpt=${pair%:*} want=${pair##*:}
  got=$(layout_dp "$WORK/$ckpt")
  [ "$got" = "$want" ] || { echo "FAIL: $ckpt was written at dp $got, expected $want"; exit 1; }
done

status=0
echo "== 05 dp 4 -> 03 dp 2"
/usr/bin/python3 "$ROOT/tests/zero/cross_resume.py" --from-step 6 --step 10 \
  --reference "$WORK/A_05_dp4" --baseline "$WORK/B_03_dp2" "$WORK/C_05_dp2" \
  --candidate "$WORK/D_03_dp2_from_05_dp4" || status=1
echo "== 03 dp 2 -> 05 dp 4"
/usr/bin/python3 "$ROOT/tests/zero/cross_resume.py" --from-step 6 --step 10 \
  --reference "$WORK/B_03_dp2" --baseline "$WORK/A_05_dp4" "$WORK/C_05_dp2" \
  --candidate "$WORK/E_05_dp4_from_03_dp2" || status=1
# expect_rejected WHAT CANDIDATE ARGS...: cross_resume.py must fail on a failed check.
expect_rejected() {
  local what=$1 out="$WORK/negative_control_$2.txt"
  shift 2
  echo "== negative control: $what must fail"
  if /usr/bin/python3 "$ROOT/tests/zero/cross_resume.py" "$@" > "$out" 2>&1; then
    echo "FAIL: $what passed the comparison"; cat "$out"; status=1
  elif ! grep -q ' FAIL$' "$out"; then
    # Rejected, but not by a failed check (a missing file, a crash): the control proves nothing.
    echo "FAIL: the negative control stopped without a failed check:"; cat "$out"; status=1
  else
    echo "rejected as expected ($(grep -c FAIL "$out") of $(grep -c -E 'PASS|FAIL' "$out") checks fail)"
  fi
}
expect_rejected "05 dp 4 -> 03 dp 2 with lr 1% higher" adamw --from-step 6 --step 10 \
  --reference "$WORK/A_05_dp4" --baseline "$WORK/B_03_dp2" "$WORK/C_05_dp2" \
  --candidate "$WORK/F_03_dp2_lr_plus_1pct"
echo "== SGD, one step after the resume: 05 dp 4 -> 03 dp 2"
/usr/bin/python3 "$ROOT/tests/zero/cross_resume.py" --from-step 6 --step 6 --kinds param --tensor-floor-eps 2 \
  --reference "$WORK/A_sgd_05_dp4" --baseline "$WORK/B_sgd_03_dp2" "$WORK/C_sgd_05_dp2" \
  --candidate "$WORK/D_sgd_03_dp2_from_05_dp4" || status=1
expect_rejected "the SGD step after the resume 1% too large" sgd --from-step 6 --step 6 --kinds param --tensor-floor-eps 2 \
  --reference "$WORK/A_sgd_05_dp4" --baseline "$WORK/B_sgd_03_dp2" "$WORK/C_sgd_05_dp2" \
  --candidate "$WORK/F_sgd_03_dp2_step_plus_1pct"
exit $status
