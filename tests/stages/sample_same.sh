#!/usr/bin/env bash
# The sample at the end of a run goes through the stage's own path to it (stages 02-04:
# the model's compute weights; stage 05: the shards gathered with gather_all; stages
# 06-11: the local buffers gathered with gather_whole_model, or gather_chunks), into a
# sampler of the stage's storage type (CachedDecoder<bf16> in bf16 mode, as stage 01's;
# stages 10 and 11 keep fp32 buffers of bf16 values). Each stage trains 5 steps on one
# rank, saves, and samples; stage 01 then resumes that checkpoint with nothing left to
# train and samples from it (the checkpoint keeps the sample counter: the same draws).
# The two samples must agree to the bit, in fp32 and in bf16: the same text, and the same
# log-probability (the metrics' log_prob, a sum over the drawn tokens of a figure that
# every bit of the logits moves, where the text moves only when a draw falls the other
# way). The comparison is with the stage's own weights, not with stage 01's run: stages
# 04 and 05 on one rank add a step's micro-batch gradients in another order than stage 01
# (each micro-batch's into a zeroed buffer, then into the shard; stage 01's backward adds
# into the accumulated buffer) and train other last bits under accumulation, as tiny.json
# has (stage04_vs_03 and stage05_vs_04 hold that layout, 1:12, to the float64 run's bound).
# On two ranks the same for stage 05 (every rank gathers the shards).
# Negative controls, against stage 01's own sample: its checkpoint of a run at lr 2x
# samples another text, and of a run at lr 1.001x another log-probability, so the
# comparison sees the weights the sampler is given to their last bits.
# With GPT_TEST_QUICK=1 (the sanitizer pass of scripts/test.sh) the controls, which run
# stage 01's code again, are left to the default pass.
# Usage: sample_same.sh BIN01 PREPARE WORK ROOT MPIEXEC STAGE_BIN...
set -euo pipefail
BIN01=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
shift 5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

# sample LAUNCH... -- DIR [key=value...]: a run to step 5 that saves and samples 32
# tokens; prints the sample's log-probability (repr: every bit) and text on one line.
sample() {
  local launch=() dir kv sets=()
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  dir=$2
  shift 2
  for kv in "$@"; do sets+=(--set "$kv"); done
  "${launch[@]}" $(tiny_args "$WORK/data" "$dir") --set steps=5 --set val_batches=0 --set sample_tokens=32 \
    "${sets[@]}" > "$dir.log" 2>&1 || { echo "FAIL: $* (log $dir.log)"; tail "$dir.log"; exit 1; }
  /usr/bin/python3 -c "
import json, sys
samples = [r for r in map(json.loads, open(sys.argv[1])) if r.get('kind') == 'sample']
assert len(samples) == 1, samples
print(repr(samples[0]['log_prob']), repr(samples[0]['text']))" "$dir/metrics.jsonl"
}
# by_stage01 DIR PRECISION: stage 01's sample from DIR's step-5 checkpoint.
by_stage01() {
  sample "$BIN01" -- "$1_by01" precision="$2" resume="$1/step_00000005" checkpoint_at_end=false
}

BIN05=""
for bin in "$@"; do [ "$(basename "$(dirname "$bin")")" = 05_zero3 ] && BIN05=$bin; done
failures=0
# same NAME GOT WANT: one comparison's verdict.
same() {
  if [ "$2" = "$3" ]; then echo "ok   $1: stage 01's sample of its weights"
  else echo "FAIL $1: sampled $2, stage 01 from its checkpoint $3"; failures=$((failures + 1)); fi
}
for precision in fp32 bf16; do
  for bin in "$@"; do
    name=$(basename "$(dirname "$bin")")
    got=$(sample "$MPIEXEC" -np 1 "$bin" -- "$WORK/${name}_$precision" precision=$precision)
    same "$name $precision" "$got" "$(by_stage01 "$WORK/${name}_$precision" $precision)"
  done
  if [ -n "$BIN05" ]; then
    got=$(sample "$MPIEXEC" -np 2 --oversubscribe "$BIN05" -- "$WORK/dp2_05_$precision" precision=$precision)
    same "05_zero3 at dp 2 $precision" "$got" "$(by_stage01 "$WORK/dp2_05_$precision" $precision)"
  fi
  quick_run && continue
  sample "$BIN01" -- "$WORK/s01_$precision" precision=$precision > /dev/null
  want=$(by_stage01 "$WORK/s01_$precision" $precision)  # the controls differ from it in their lr alone
  sample "$BIN01" -- "$WORK/s01_${precision}_lr2" precision=$precision lr="$(scaled_lr 2)" > /dev/null
  other=$(by_stage01 "$WORK/s01_${precision}_lr2" $precision)
  if [ "${other#* }" != "${want#* }" ]; then echo "ok   control $precision: lr 2x samples another text"
  else echo "FAIL control $precision: lr 2x samples the same text: the comparison cannot see the weights"
    failures=$((failures + 1)); fi
  sample "$BIN01" -- "$WORK/s01_${precision}_lr1.001" precision=$precision lr="$(scaled_lr 1.001)" > /dev/null
  near=$(by_stage01 "$WORK/s01_${precision}_lr1.001" $precision)
  if [ "${near%% *}" != "${want%% *}" ]; then
    echo "ok   control $precision: lr 1.001x samples another log-probability (${near%% *}, stage 01 ${want%% *})"
  else echo "FAIL control $precision: lr 1.001x samples the same log-probability ${want%% *}"
    failures=$((failures + 1)); fi
done
[ "$failures" = 0 ] || { echo "FAIL: $failures"; exit 1; }
echo "every stage samples what stage 01 samples from its weights"
