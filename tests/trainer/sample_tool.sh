#!/usr/bin/env bash
# build/bin/sample draws from a checkpoint what the run that wrote it drew. A run saves its
# last checkpoint before its end-of-run sample, and the tool starts from the keys the run
# recorded and from its sampling counter, so on the CPU the text and the log-probability
# in the run's metrics must come back to the last bit: stage 01 in fp32 and in bf16 (the
# compute weights rounded from the saved masters, as the run rounded them), and stage 11
# on 2 ranks at pp = 2 (the checkpoint of a pipeline; the run sampled from weights it
# gathered). Controls that must differ: another seed; the weights of an earlier step; the
# second of two samples (the counter goes on). And what it refuses, with the key named.
# Usage: sample_tool.sh SAMPLE TRAIN01 PREPARE WORK ROOT [TRAIN11 MPIEXEC]
set -euo pipefail
SAMPLE=$1 TRAIN01=$2 PREPARE=$3 WORK=$4 ROOT=$5 TRAIN11=${6:-} MPIEXEC=${7:-}
source "$(dirname "$0")/common.sh"
PY=/usr/bin/python3
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"

# The run's sample, as one line: its text (JSON-quoted) and its log-probability.
logged() {  # logged METRICS
  "$PY" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"sample\"" in l]
print(json.dumps(rows[-1]["text"]), repr(float(rows[-1]["log_prob"])))' "$1"
}
# The tool's sample in the same form: the text between the header and the closing line.
drawn() {  # drawn OUTPUT_FILE
  "$PY" -c 'import sys
out = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
body = out.split(") ----\n", 1)[1]
text, rest = body.split("\n----\nlog_prob ", 1)
import json
print(json.dumps(text), repr(float(rest.split()[0])))' "$1"
}
# check NAME EXPECTED GOT: equal, or a failure.
same() {
  if [[ "$2" == "$3" ]]; then echo "ok   $1"; else fail "$1: the run logged $2, the tool drew $3"; fi
}
differs() {
  if [[ "$2" != "$3" ]]; then echo "ok   $1"; else fail "$1: the control drew the same: $3"; fi
}

common=(--set steps=20 --set checkpoint_every=10 --set keep_checkpoints=0 --set "prompt=The quick"
  --set sample_tokens=24)
for precision in fp32 bf16; do
  run="$WORK/run_$precision"
  "$TRAIN01" $(tiny_args "$WORK/data" "$run") "${common[@]}" --set "precision=$precision" > "$run.log" 2>&1 ||
    { tail -5 "$run.log"; fail "stage 01 ($precision) did not train"; continue; }
  "$SAMPLE" "$run" > "$WORK/tool_$precision.txt"
  want=$(logged "$run/metrics.jsonl")
  same "stage 01 $precision: the final checkpoint samples the run's text and log-probability" "$want" \
    "$(drawn "$WORK/tool_$precision.txt")"
done

run="$WORK/run_fp32"
want=$(logged "$run/metrics.jsonl")
"$SAMPLE" "$run" --set seed=7 > "$WORK/seed7.txt"
differs "control: another seed draws another sample" "$want" "$(drawn "$WORK/seed7.txt")"
"$SAMPLE" "$run/step_00000010" > "$WORK/step10.txt"
differs "control: the weights of step 10 give another sample" "$want" "$(drawn "$WORK/step10.txt")"
"$SAMPLE" "$run" --samples 2 > "$WORK/two.txt"
"$PY" - "$WORK/two.txt" "$WORK/first.txt" "$WORK/second.txt" << 'EOF'
import sys
out = open(sys.argv[1], "rb").read()
head, first, second = out.split(b"---- sample", 2)
open(sys.argv[2], "wb").write(head + b"---- sample" + first)
open(sys.argv[3], "wb").write(head + b"---- sample" + second)
EOF
same "--samples 2: the first is the run's" "$want" "$(drawn "$WORK/first.txt")"
differs "--samples 2: the second goes on from the counter" "$want" "$(drawn "$WORK/second.txt")"
# The counter is read from the checkpoint: a copy whose manifest records 24 draws (one per
# token of the first sample) draws the second sample first.
cp -r "$run/step_00000020" "$WORK/counted"
"$PY" -c 'import json, sys
m = json.load(open(sys.argv[1])); m["sample_counter"] = 24; json.dump(m, open(sys.argv[1], "w"))' \
  "$WORK/counted/manifest.json"
"$SAMPLE" "$WORK/counted" > "$WORK/counted.txt"
same "a checkpoint's sampling counter is where the draws start" "$(drawn "$WORK/second.txt")" \
  "$(drawn "$WORK/counted.txt")"

# Refusals: exit 2, the key named.
refused() {  # refused NAME NEEDLE ARGS...
  local name=$1 needle=$2 status=0
  shift 2
  "$SAMPLE" "$@" > "$WORK/refused.txt" 2>&1 || status=$?
  if ((status == 2)) && grep -qF -- "$needle" "$WORK/refused.txt"; then
    echo "ok   refused: $name"
  else
    fail "$name: status $status, wanted 2 and '$needle' in: $(cat "$WORK/refused.txt")"
  fi
}
refused "a model key" "sample does not read n_layer" "$run" --set n_layer=3
refused "an unknown key" "did you mean 'top_k'" "$run" --set top_kk=3
refused "a window past block_size" "seq_len=33" "$run" --set seq_len=33
refused "a temperature of 0" "temperature" "$run" --set temperature=0
refused "nothing to sample" "sample_tokens=0" "$run" --set sample_tokens=0
refused "no checkpoint" "does not exist" "$WORK/no_such_run"
refused "sample_tokens=0 given here" "sample_tokens=0: nothing to sample: give" "$run" --set sample_tokens=0
# A byte tokenizer on a vocabulary larger than the bytes: told to name the vocabulary's file.
"$TRAIN01" $(tiny_args "$WORK/data" "$WORK/run_v300") --set steps=1 --set vocab_size=300 --set sample_tokens=0 \
  > "$WORK/run_v300.log" 2>&1 || fail "stage 01 at vocab_size 300 did not train"
refused "bytes on 300 tokens" "vocab_size=300: give --set tokenizer=FILE, the file of the checkpoint's vocabulary" "$WORK/run_v300" \
  --set sample_tokens=4
# A checkpoint that records no config (written before manifests did): the defaults, its
# window cut to its block_size (32, where the default seq_len is 64).
cp -r "$run/step_00000020" "$WORK/no_config"
"$PY" -c 'import json, sys
m = json.load(open(sys.argv[1])); del m["config"]; json.dump(m, open(sys.argv[1], "w"))' "$WORK/no_config/manifest.json"
if "$SAMPLE" "$WORK/no_config" > "$WORK/no_config.txt" 2>&1 && grep -q "| window 32 |" "$WORK/no_config.txt"; then
  echo "ok   a checkpoint without a recorded config samples with the defaults, its window its block_size"
else
  fail "a checkpoint without a recorded config: $(head -3 "$WORK/no_config.txt")"
fi
# A tokenizer file the run named by a path that is not found from here: named, with the fix.
"$PY" "$ROOT/tests/tokenizer/reference_bpe.py" vocab identity 0 /dev/null "$WORK/identity.bin"
"$TRAIN01" $(tiny_args "$WORK/data" "$WORK/run_tok") --set steps=2 --set "tokenizer=$WORK/identity.bin" \
  > "$WORK/run_tok.log" 2>&1 || fail "stage 01 with a tokenizer file did not train"
mv "$WORK/identity.bin" "$WORK/moved.bin"
refused "the run's tokenizer file, moved" "give --set tokenizer=FILE" "$WORK/run_tok"
"$SAMPLE" "$WORK/run_tok" --set "tokenizer=$WORK/moved.bin" > /dev/null ||
  fail "the moved tokenizer given by --set was not taken"

# A pipeline's checkpoint (stage 11, pp = 2 on 2 ranks): the same promise.
if [[ -n "$TRAIN11" ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
  run="$WORK/run_pp2"
  "$MPIEXEC" -np 2 --oversubscribe "$TRAIN11" $(tiny_args "$WORK/data" "$run") "${common[@]}" --set pp=2 \
    > "$run.log" 2>&1 || { tail -5 "$run.log"; fail "stage 11 at pp = 2 did not train"; }
  require_layout "$run" 2 pp=2
  "$SAMPLE" "$run" > "$WORK/tool_pp2.txt"
  same "stage 11 at pp = 2: the final checkpoint samples the run's text and log-probability" \
    "$(logged "$run/metrics.jsonl")" "$(drawn "$WORK/tool_pp2.txt")"
fi

((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "all sample tool checks passed"
