#!/usr/bin/env bash
# The multiple-choice eval during training (the eval_choices key; common/choices_in_training.h)
# against build/bin/eval_choices on the checkpoint of the same step. Each stage reaches its
# whole model its own way (stage 01 and stages 02-04: the weights they hold; stage 05: the
# shards all-gathered; stages 06-11: gather_whole_model or gather_chunks to every rank),
# and every rank scores a share of the examples. On the CPU an example's scores depend on
# nothing else in its forward, so the counts logged at steps 5 and 10 must equal the
# tool's, exactly, in every layout: the examples scored, the right picks by summed loss
# (acc) and by mean loss per token (acc_norm). The logged loss per completion token is a
# sum over the ranks' shares, added in another order than the tool's file order: each
# order's sum of n positive terms is within n x 2^-53 (relative) of the exact sum, so the
# two within 2n x 2^-53 of each other, plus 2^-53 for each one's division by the tokens.
# A run with eval_choices_limit=1 on 2 ranks leaves one rank without examples (it scores
# nothing and still adds its zeros); the tool with --limit 1 is its reference. Precision: fp32, and bf16 (the tool rounds the checkpoint's fp32 master weights
# to bf16, which are the trainer's compute weights).
# The run names the examples whose context is cut to fit the window, as the tool does.
# Negative control: the line logged at step 5 against the step-10 checkpoint must differ
# beyond the bound (the comparison sees which weights were scored).
# The tool scores as many rows a forward as the run did (its --batch from the run's
# "eval_choices:" line), so on a GPU (CHOICES_DEVICE=cuda; skipped, 77, without one) the
# same GEMM shapes run and the same equalities are asked.
# Usage: choices_same.sh BIN01 PREPARE EVAL_CHOICES WORK ROOT MPIEXEC RUN...
#   RUN: NP:BIN[:key=value,...]  (NP 0: BIN runs as one process, without mpiexec)
set -euo pipefail
BIN01=$1 PREPARE=$2 TOOL=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
shift 6
DEVICE=${CHOICES_DEVICE:-cpu}
if [ "$DEVICE" = cuda ] && { ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; }; then
  echo "skipped: no GPU visible (nvidia-smi -L)"
  exit 77
fi
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# 30 random examples of 2 to 5 completions, some longer than the 32-token window (their
# context is cut); the standard library only (the GPU machine's Python may lack numpy).
/usr/bin/python3 "$ROOT/tests/llmc/eval_file.py" random "$WORK/e.bin" --vocab 256 --seed 5 --examples 30

# compare METRICS STEP SCORES.jsonl: the "choices" line of STEP against the tool's scores.
compare() {
  /usr/bin/python3 - "$@" << 'PY'
import json, sys
metrics, step, scores = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = [r for r in map(json.loads, open(metrics)) if r.get("kind") == "choices" and r["step"] == step]
assert len(lines) == 1, f"{len(lines)} choices lines at step {step}"
got = lines[0]
rows = [json.loads(line) for line in open(scores)]
want = {"examples": len(rows), "correct": sum(r["pred"] == r["label"] for r in rows),
        "correct_norm": sum(r["pred_norm"] == r["label"] for r in rows)}
loss_sum, tokens, terms = 0.0, 0, 0
for r in rows:
    for loss, n in zip(r["loss_sum"], r["tokens"]):
        loss_sum, tokens, terms = loss_sum + loss, tokens + n, terms + 1
loss = loss_sum / tokens
bound = (2 * terms + 2) * 2.0 ** -53
error = abs(got["loss"] - loss) / loss
bad = [f"{k} {got[k]} (tool {v})" for k, v in want.items() if got[k] != v]
if bad or error > bound:
    print(f"logged {', '.join(bad) or 'counts as the tool'}; loss {got['loss']!r} vs {loss!r}: "
          f"{error:.2e} (bound {bound:.2e})")
    sys.exit(1)
print(f"{got['examples']} examples, acc {got['acc']:.4f}, acc_norm {got['acc_norm']:.4f}, "
      f"loss error {error:.1e} <= {bound:.1e}")
PY
}

failures=0
for spec in "$@"; do
  IFS=: read -r np bin sets <<< "$spec"
  name="$(basename "$(dirname "$bin")")_np${np}_${sets//[,=]/_}"
  dir="$WORK/$name"
  extra=()
  for kv in ${sets//,/ }; do extra+=(--set "$kv"); done
  precision=fp32
  for kv in ${sets//,/ }; do [ "${kv%%=*}" = precision ] && precision=${kv#*=}; done
  launch=("$bin")
  [ "$np" = 0 ] || launch=("$MPIEXEC" -np "$np" --oversubscribe "$bin")
  if ! "${launch[@]}" $(tiny_args "$WORK/data" "$dir") --set device="$DEVICE" --set steps=10 --set val_every=5 \
      --set val_batches=0 --set checkpoint_every=5 --set keep_checkpoints=0 --set sample_tokens=0 \
      --set "eval_choices=$WORK/e.bin" "${extra[@]}" > "$dir.log" 2>&1; then
    echo "FAIL $name: the run failed"; tail -5 "$dir.log" | sed 's/^/    /'; failures=$((failures + 1)); continue
  fi
  limit=()
  for kv in ${sets//,/ }; do [ "${kv%%=*}" = eval_choices_limit ] && limit=(--limit "${kv#*=}"); done
  cut_run=$(sed -nE 's/^eval_choices: ([0-9]+) examples have context tokens left out.*/\1/p' "$dir.log")
  rows=$(sed -nE 's/^eval_choices: .* ([0-9]+) rows a forward.*/\1/p' "$dir.log" | head -1)
  [ -n "$rows" ] || { echo "FAIL $name: the run printed no eval_choices line"; failures=$((failures + 1)); continue; }
  for step in 5 10; do
    "$TOOL" "$dir/step_$(printf %08d $step)" "$WORK/e.bin" --device "$DEVICE" --precision "$precision" "${limit[@]}" \
      --batch "$rows" \
      --out "$dir/scores_$step.jsonl" > "$dir/eval_$step.log" 2>&1 || { echo "FAIL $name: eval_choices"; exit 1; }
    # The examples whose context is cut to fit the window: the run says so as the tool does.
    cut_tool=$(sed -nE 's/^([0-9]+) examples had context tokens left out.*/\1/p' "$dir/eval_$step.log")
    [ "$cut_run" = "$cut_tool" ] ||
      { echo "FAIL $name: the run says ${cut_run:-no} examples are cut, the tool ${cut_tool:-none}"
        failures=$((failures + 1)); }
    if result=$(compare "$dir/metrics.jsonl" $step "$dir/scores_$step.jsonl"); then
      echo "ok   $name step $step: $result"
    else echo "FAIL $name step $step: $result"; failures=$((failures + 1)); fi
  done
  # Control: step 5's line is not the scores of step 10's weights.
  if result=$(compare "$dir/metrics.jsonl" 5 "$dir/scores_10.jsonl"); then
    echo "FAIL control $name: step 5's line matches step 10's weights: $result"; failures=$((failures + 1))
  else echo "ok   control $name: step 5's line against step 10's weights: $result"; fi
done
[ "$failures" = 0 ] || { echo "FAIL: $failures"; exit 1; }
echo "every stage logs the multiple-choice eval that eval_choices computes from its checkpoints"
