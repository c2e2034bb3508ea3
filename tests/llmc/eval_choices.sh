#!/usr/bin/env bash
# Multiple-choice evals in llm.c's format (build/bin/eval_choices) against an independent
# scorer (choices_reference.py: llm.c's file and HellaSwag's completion-style scoring, with
# llmc_reference.py's GPT-2 in PyTorch).
#
# A random model (2 layers, width 32, vocabulary 200, max_seq_len 32) is imported from an
# llm.c model file; 40 random examples of 2 to 5 completions, some rows longer than the
# window (their context is cut), one completion exactly as long as the window. Then:
#   1. fp64: every completion's summed loss within 1e-9 of the float64 reference (the same
#      math in double agrees to round-off: the oracle's f64 bound, tests/oracle/README.md;
#      measured about 4e-16), the same predictions, the same acc and acc_norm printed;
#   2. fp32: within the oracle's fp32 bound, 4 x PyTorch float32's own error + 8 eps32;
#   3. the batch does not change a number: --batch 5, 12 and 64 write identical scores
#      (each row's arithmetic is the same whatever rows share its forward), and so does
#      --batch 134217729, more rows than the file has (sized by the file's: not 500 GiB
#      of buffers, nor more positions than an int counts); --limit 7 writes
#      the first 7 of them; a run directory evaluates its latest checkpoint;
#   4. bad input: each way an eval file can be wrong, a completion longer than the window,
#      a batch smaller than an example, an --out that exists (left as it was), unknown or
#      malformed options: exit 2, named.
# Negative control: the reference with the completion mask not shifted (the losses of the
# positions holding the completion, not of those predicting it) must fail the fp64 bound.
# Usage: eval_choices.sh EVAL_CHOICES LLMC_MODEL WORKDIR ROOT
set -euo pipefail
TOOL=$1 LLMC=$2 WORK=$3 ROOT=$4
export OMP_NUM_THREADS=1
MODEL_REF=(/usr/bin/python3 "$ROOT/tests/llmc/llmc_reference.py")
REF=(/usr/bin/python3 "$ROOT/tests/llmc/choices_reference.py")
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
source "$ROOT/tests/llmc/refused.sh"  # refused NAME NEEDLE CMD...

"${MODEL_REF[@]}" write m.bin --version 3 --seed 1 --layers 2 --embd 32 --heads 4 --vocab 200 --max-seq 32 ||
  { [ $? = 77 ] && exit 77; exit 1; }
"$LLMC" import m.bin run > /dev/null
"${REF[@]}" write e.bin --vocab 200 --seed 3 --examples 40 --window 32
"${REF[@]}" score m.bin e.bin > want.jsonl
"${REF[@]}" score m.bin e.bin --float32 > baseline32.jsonl
"${REF[@]}" score m.bin e.bin --unshifted > unshifted.jsonl

# scores NAME ARGS...: eval_choices on the checkpoint with --out NAME.jsonl; its output in NAME.log.
scores() {
  local name=$1
  shift
  rm -f "$name.jsonl"
  "$TOOL" run/step_00000000 e.bin --device cpu --out "$name.jsonl" "$@" > "$name.log" 2>&1 ||
    { fail "eval_choices $*"; cat "$name.log"; return 1; }
}
# compared NAME ARGS...: choices_reference.py compare, reported.
compared() {
  local name=$1
  shift
  if "${REF[@]}" compare "$@" > "compare_$name.log"; then echo "ok   $name: $(tail -1 "compare_$name.log")"
  else fail "$name:"; cat "compare_$name.log"; fi
}

echo "== fp64 against the float64 reference"
scores fp64 --precision fp64 --batch 12
compared fp64 fp64.jsonl want.jsonl --bound 1e-9
printed=$(sed -nE 's/.*acc ([0-9.]+) .*acc_norm ([0-9.]+) .*/\1 \2/p' fp64.log)
expected=$(sed -nE 's/.*reference acc ([0-9.]+) acc_norm ([0-9.]+).*/\1 \2/p' compare_fp64.log)
if [ -n "$printed" ] && [ "$printed" = "$expected" ]; then echo "ok   acc and acc_norm printed: $printed"
else fail "printed acc, acc_norm '$printed', the reference's '$expected'"; fi
# The printed loss is the completions' mean per token: the scores' sums over their tokens
# (printed to 6 decimals: within 5e-7).
loss_check=$(/usr/bin/python3 -c 'import json, re, sys
rows = [json.loads(l) for l in open("fp64.jsonl")]
want = sum(sum(r["loss_sum"]) for r in rows) / sum(sum(r["tokens"]) for r in rows)
got = float(re.search(r"loss ([0-9.]+) \(the completions", open("fp64.log").read()).group(1))
print("ok" if abs(got - want) <= 5e-7 else f"printed {got}, the scores give {want:.6f}")')
[ "$loss_check" = ok ] && echo "ok   the printed loss is the completions' mean per token" ||
  fail "the printed completions' loss: $loss_check"
grep -q "had context tokens left out" fp64.log || fail "no example had its context cut: the test lost its long rows"

echo "== negative control: the completion mask not shifted"
if "${REF[@]}" compare fp64.jsonl unshifted.jsonl --bound 1e-9 > control.log; then
  fail "the fp64 bound accepts the unshifted mask"
else echo "ok   rejected: $(head -1 control.log)"; fi

echo "== fp32 against the oracle's fp32 bound (options in the --name=VALUE form)"
scores fp32 --precision=fp32 --batch=12
compared fp32 fp32.jsonl want.jsonl --baseline baseline32.jsonl

echo "== batches, --limit, a run directory"
for b in 5 64 134217729; do  # the last: more rows than the file has (and than an int counts), sized by the file's
  scores "batch$b" --precision fp64 --batch "$b"
  if cmp -s "batch$b.jsonl" fp64.jsonl; then echo "ok   --batch $b: the same scores, bit for bit"
  else fail "--batch $b changes the scores"; fi
done
scores limit --precision fp64 --limit 7
if [ "$(wc -l < limit.jsonl)" = 7 ] && head -7 fp64.jsonl | cmp -s - limit.jsonl; then echo "ok   --limit 7: the first 7"
else fail "--limit 7 did not write the first 7 examples' scores"; fi
# Another model's weights as a later checkpoint of the same run: the run directory must
# evaluate that one, not step 0. Its manifest is made to say step 7, as its name does (a
# run directory refuses a checkpoint named after another step than its own).
"${MODEL_REF[@]}" write m2.bin --version 3 --seed 2 --layers 2 --embd 32 --heads 4 --vocab 200 --max-seq 32
"$LLMC" import m2.bin later > /dev/null && mkdir -p run2 && cp -r run/step_00000000 run2/ &&
  mv later/step_00000000 run2/step_00000007 && /usr/bin/python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
m["step"] = m["data_position"]["step"] = m["data_position"]["sequences"] = 7
json.dump(m, open(sys.argv[1], "w"))' run2/step_00000007/manifest.json
"${REF[@]}" score m2.bin e.bin > want_later.jsonl
rm -f rundir.jsonl
"$TOOL" run2 e.bin --device cpu --precision fp64 --out rundir.jsonl > rundir.log 2>&1 &&
  grep -q "run2/step_00000007" rundir.log && "${REF[@]}" compare rundir.jsonl want_later.jsonl --bound 1e-9 > /dev/null &&
  echo "ok   a run directory evaluates its latest checkpoint" || fail "the run directory 'run2'"

echo "== bad input"
"${REF[@]}" corrupt e.bin .  # magic.bin, version.bin, ...: e.bin made wrong in one way each
while IFS='|' read -r kind needle; do
  refused "$kind" "$needle" "$TOOL" run "$kind.bin" --device cpu
done <<'KINDS'
magic|'magic.bin': bad magic 20240520 (expected 20240522): not an eval file (it is a token shard)
version|'version.bin': unsupported version 2
count|the header declares 1000 examples, the file holds 40
too_many|the header declares 70000 examples; the format numbers them in 16 bits
longest|the header says the longest example is 2 bytes
start|'start.bin', example 0 (at byte 1024): starts with 7, not 65535
size|example 0 (at byte 1024): its size field says 4 bytes
truncated|the file ends inside it
trailing|examples the header declares, and more follow
label|is not below its
vocab|context token 0 (byte 1036) is 60000, not below vocab_size 200
no_context|no context tokens
one_completion|1 completion; a choice needs two at least
empty_completion|completion 0 is empty
long_completion|'long_completion.bin', example 0 (index 0): completion 0 has 100 tokens, more than the model's max_seq_len (block_size) 32
KINDS
refused small_batch "--batch 3: eval file 'e.bin', example 0 has 5 completions" "$TOOL" run e.bin --device cpu --batch 3
refused threads "--threads=100000: must be at most 8 per core" "$TOOL" run e.bin --device cpu --threads 100000
: > not_a_dir
refused out_dir "--out: cannot create directory 'not_a_dir'" "$TOOL" run e.bin --device cpu --out not_a_dir/x.jsonl
refused batch_zero "--batch: '0' is not a positive integer" "$TOOL" run e.bin --batch 0
refused limit_word "--limit: 'all' is not a positive integer" "$TOOL" run e.bin --limit all
refused option "unknown option '--bacth'" "$TOOL" run e.bin --bacth 4
refused out_empty "--out needs a file name (it was empty)" "$TOOL" run e.bin --device cpu --out ""
refused out_in_checkpoint "run/step_00000000 is a checkpoint directory" \
  "$TOOL" run e.bin --device cpu --out run/step_00000000/scores.jsonl
[ ! -e run/step_00000000/scores.jsonl ] || fail "the refused --out wrote into run/step_00000000"
refused twice "--batch is given twice" "$TOOL" run e.bin --device cpu --batch 8 --batch 16
refused operands "expected CHECKPOINT and EVAL.bin, got 1 argument: 'run'" "$TOOL" run
refused extra_operand "got 3 arguments: 'run' 'e.bin' 'more'" "$TOOL" run e.bin more --device cpu
refused option_last "unknown option '--bogus'" "$TOOL" run e.bin --bogus
refused option_equals "unknown option '--bacth'" "$TOOL" run e.bin --bacth=4
refused value_equals "--batch: '0' is not a positive integer" "$TOOL" run e.bin --batch=0
refused no_checkpoint "nowhere" "$TOOL" nowhere e.bin --device cpu
refused no_file "eval file 'missing.bin': no such file" "$TOOL" run missing.bin --device cpu
refused precision "precision: 'fp16' is not a precision" "$TOOL" run e.bin --precision fp16
cp want.jsonl kept.jsonl
refused out_exists "--out 'kept.jsonl' exists" "$TOOL" run e.bin --device cpu --out kept.jsonl
cmp -s want.jsonl kept.jsonl || fail "the refused --out changed kept.jsonl"
ln -s nowhere.jsonl dangling.jsonl  # a link to nothing is a name taken as well
refused out_dangling "--out 'dangling.jsonl' exists" "$TOOL" run e.bin --device cpu --out dangling.jsonl
[ -L dangling.jsonl ] && [ ! -e nowhere.jsonl ] || fail "the refused --out replaced the link or made its target"

if [ $failures -gt 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "eval_choices scores multiple-choice evals as the reference does"
