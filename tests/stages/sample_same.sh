#!/usr/bin/env bash
# The sample at the end of a run goes through the stage's own path to it (stages 02-04:
# the model's compute weights; stage 05: the shards gathered with gather_all; stages
# 06-11: the local buffers gathered with gather_whole_model, or gather_chunks), into a
# sampler of the stage's storage type (CachedDecoder<bf16> in bf16 mode, as stage 01's;
# stages 10 and 11 keep fp32 buffers of bf16 values). On one rank every stage computes stage 01's
# bits, so its sample must be stage 01's, text for text, in fp32 and in bf16.
# Negative control: stage 01 with the learning rate 2x samples another text, so the
# comparison sees the weights the sampler is given. On two ranks, stage 05 must sample
# stage 02's text (the same bits at dp 2), through every rank's gather of the shards.
# Usage: sample_same.sh BIN01 PREPARE WORK ROOT MPIEXEC STAGE_BIN...
set -euo pipefail
BIN01=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
shift 5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

# sample LAUNCH... -- DIR [key=value...]: a 5-step run that samples 32 tokens; prints its text.
sample() {
  local launch=() dir kv sets=()
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  dir=$2
  shift 2
  for kv in "$@"; do sets+=(--set "$kv"); done
  "${launch[@]}" $(tiny_args "$WORK/data" "$dir") --set steps=5 --set val_batches=0 --set sample_tokens=32 \
    --set checkpoint_at_end=false "${sets[@]}" > "$dir.log" 2>&1 ||
    { echo "FAIL: $* (log $dir.log)"; tail "$dir.log"; exit 1; }
  /usr/bin/python3 -c "
import json, sys
texts = [r['text'] for r in map(json.loads, open(sys.argv[1])) if r.get('kind') == 'sample']
assert len(texts) == 1, texts
print(texts[0])" "$dir/metrics.jsonl"
}

BIN02="" BIN05=""
for bin in "$@"; do
  case "$(basename "$(dirname "$bin")")" in 02_ddp) BIN02=$bin ;; 05_zero3) BIN05=$bin ;; esac
done
failures=0
for precision in fp32 bf16; do
  want=$(sample "$BIN01" -- "$WORK/s01_$precision" precision=$precision)
  for bin in "$@"; do
    name=$(basename "$(dirname "$bin")")
    got=$(sample "$MPIEXEC" -np 1 "$bin" -- "$WORK/${name}_$precision" precision=$precision)
    if [ "$got" = "$want" ]; then echo "ok   $name $precision: stage 01's sample"
    else echo "FAIL $name $precision: sampled '$got', stage 01 '$want'"; failures=$((failures + 1)); fi
  done
  # Several ranks: stage 05 at dp 2 trains stage 02's bits at dp 2 (ZeRO only moves work
  # at that layout: stage05_vs_04 and the others compare them bit for bit), so its
  # sample, from the shards gathered on every rank, must be stage 02's.
  if [ -n "$BIN02" ] && [ -n "$BIN05" ]; then
    want2=$(sample "$MPIEXEC" -np 2 --oversubscribe "$BIN02" -- "$WORK/dp2_02_$precision" precision=$precision)
    got2=$(sample "$MPIEXEC" -np 2 --oversubscribe "$BIN05" -- "$WORK/dp2_05_$precision" precision=$precision)
    if [ "$got2" = "$want2" ]; then echo "ok   05_zero3 at dp 2 $precision: stage 02's sample at dp 2"
    else echo "FAIL 05_zero3 at dp 2 $precision: sampled '$got2', stage 02 '$want2'"; failures=$((failures + 1)); fi
  fi
  other=$(sample "$BIN01" -- "$WORK/s01_${precision}_lr2" precision=$precision lr="$(scaled_lr 2)")
  if [ "$other" != "$want" ]; then echo "ok   control $precision: lr 2x samples another text"
  else echo "FAIL control $precision: lr 2x samples the same text: the comparison cannot see the weights"
    failures=$((failures + 1)); fi
done
[ "$failures" = 0 ] || { echo "FAIL: $failures"; exit 1; }
echo "every stage samples stage 01's text"
