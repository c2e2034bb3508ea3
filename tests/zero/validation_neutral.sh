#!/usr/bin/env bash
# Validation must not change training. A validation pass is a forward without a
# backward, and ZeRO-3's store (stage 05) keeps units gathered between passes and
# prefetches the next one, so an evaluation in the middle of a run changes which units
# are kept and which gathers are in flight when training resumes. Whatever it leaves
# behind must be the current weights: stage 05 at dp 2 validating every 3 steps must
# train bit for bit like the same run that never validates.
#
#   A<k>  stage 05, dp 2, grad_accum k, no validation            (reference)
#   B<k>  the same, validating every 3 steps on 2 batches        (candidate)
#   V     stage 04, dp 2, grad_accum 1, validating like B1: its validation losses equal
#         B1's (the evaluation passes of 05 see the weights 04 keeps whole)
#   N     as B1 with lr 0.1% higher                              (negative control)
# for k = 1, 2. Losses, gradient norms and the step-12 weights and moments are compared
# with compare_runs.py --exact; N must be rejected against A1, and its validation
# losses must differ from V's.
#
# Usage: validation_neutral.sh BIN04 BIN05 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
BIN04=$1 BIN05=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

STEPS=12
# run BIN DIR MICRO_BATCH [--set k=v...]: 12 fp32 steps of a 3-layer tiny model at dp 2,
# global batch 24, no validation unless the extra settings ask for it.
run() {
  local bin=$1 dir=$2 micro=$3
  shift 3
  "$MPIEXEC" -np 2 --oversubscribe "$bin" $(tiny_args "$WORK/data" "$dir") --set n_layer=3 \
    --set steps=$STEPS --set batch_size=24 --set micro_batch_size="$micro" --set val_every=0 \
    --set val_batches=0 --set sample_tokens=0 --set bucket_mb=0.02 --set checkpoint_at_end=true \
    "$@" > "$dir.log" 2>&1 || { echo "FAIL: run $bin -> $dir"; tail -20 "$dir.log"; exit 1; }
}
VAL=(--set val_every=3 --set val_batches=2)

run "$BIN05" "$WORK/A1_05_noval" 12
run "$BIN05" "$WORK/B1_05_val" 12 "${VAL[@]}"
run "$BIN05" "$WORK/A2_05_accum2_noval" 6
run "$BIN05" "$WORK/B2_05_accum2_val" 6 "${VAL[@]}"
run "$BIN04" "$WORK/V_04_val" 12 "${VAL[@]}"
run "$BIN05" "$WORK/N_05_val_lr_plus_0.1pct" 12 "${VAL[@]}" --set lr="$(scaled_lr 1.001)"

# val_losses DIR: "step loss" per validation line of the run's metrics.
val_losses() {
  /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1] + "/metrics.jsonl"):
    r = json.loads(line)
    if r.get("kind") == "val":
        print(r["step"], repr(r["val_loss"]))' "$1"
}

status=0
# The candidates really validated, after steps 3, 6 and 9 and at the end.
for dir in B1_05_val B2_05_accum2_val V_04_val; do
  steps=$(val_losses "$WORK/$dir" | cut -d' ' -f1 | tr '\n' ' ')
  [ "$steps" = "3 6 9 12 " ] || { echo "FAIL: $dir validated after steps '$steps', expected '3 6 9 12 '"; status=1; }
done
for dir in A1_05_noval A2_05_accum2_noval; do
  [ -z "$(val_losses "$WORK/$dir")" ] || { echo "FAIL: $dir validated"; status=1; }
done

for pair in A1_05_noval:B1_05_val A2_05_accum2_noval:B2_05_accum2_val; do
  ref=$WORK/${pair%:*} cand=$WORK/${pair#*:} k=${pair:1:1}
  echo "== grad_accum $k: $(basename "$cand") against $(basename "$ref"), bit for bit"
  /usr/bin/python3 "$ROOT/tests/stages/compare_runs.py" --exact --step $STEPS \
    --reference "$ref" --candidate "$cand" || status=1
done

echo "== validation losses: stage 05 against stage 04, bit for bit"
if [ "$(val_losses "$WORK/B1_05_val")" = "$(val_losses "$WORK/V_04_val")" ]; then
  val_losses "$WORK/B1_05_val" | sed 's/^/    step /'
else
  echo "FAIL: stage 05's validation losses differ from stage 04's"
  paste <(val_losses "$WORK/B1_05_val") <(val_losses "$WORK/V_04_val")
  status=1
fi

echo "== negative control: lr 0.1% higher must be rejected"
/usr/bin/python3 "$ROOT/tests/stages/compare_runs.py" --exact --step $STEPS --expect-reject \
  --reference "$WORK/A1_05_noval" --candidate "$WORK/N_05_val_lr_plus_0.1pct" > "$WORK/negative_control.txt" \
  || { echo "FAIL: a run with lr 0.1% higher passed the comparison"; cat "$WORK/negative_control.txt"; status=1; }
tail -1 "$WORK/negative_control.txt"
# Read first, so that a failed read fails the test instead of counting as "different".
neg_val=$(val_losses "$WORK/N_05_val_lr_plus_0.1pct")
ref_val=$(val_losses "$WORK/V_04_val")
[ -n "$neg_val" ] && [ -n "$ref_val" ] || { echo "FAIL: a run logged no validation losses"; exit 1; }
if [ "$neg_val" = "$ref_val" ]; then
  echo "FAIL: the validation losses of a run with lr 0.1% higher equal stage 04's"; status=1
else
  echo "validation losses of the lr 0.1% run differ from stage 04's, as they must"
fi
exit $status
