#!/usr/bin/env bash
# Bad input gets a clear error: for each case the binary must exit with status 2 and
# its message must name the offending key, file or value. A case that crashes, exits
# 0 or 1, or prints a vague message fails the test.
# Usage: bad_input.sh TRAIN PREPARE WORKDIR ROOT
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4
source "$(dirname "$0")/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
D="$WORK/data"
failures=0 cases=0

# expect NAME SUBSTRING COMMAND...: exit status 2 and SUBSTRING in stderr.
expect() {
  local name=$1 needle=$2; shift 2
  cases=$((cases + 1))
  local status=0
  "$@" > "$WORK/out.txt" 2> "$WORK/err.txt" || status=$?
  if [ "$status" -ne 2 ]; then
    echo "FAIL [$name]: exit status $status, expected 2"; sed 's/^/    /' "$WORK/err.txt" | tail -5
    failures=$((failures + 1)); return
  fi
  if ! grep -qF -- "$needle" "$WORK/err.txt"; then
    echo "FAIL [$name]: message does not name '$needle':"; sed 's/^/    /' "$WORK/err.txt"
    failures=$((failures + 1)); return
  fi
  echo "ok   [$name]: $(head -1 "$WORK/err.txt")"
}
train() { "$TRAIN" $(tiny_args "$D" "$WORK/run") --set steps=2 --set sample_tokens=0 "$@"; }

# --- config
expect "unknown key"             n_layers      train --set n_layers=3
expect "wrong type"              n_layer       train --set n_layer=abc
expect "n_head not dividing"     n_head        train --set n_head=5
expect "seq_len > block_size"    seq_len       train --set seq_len=64
expect "batch not divisible"     "batch_size=4 is not a multiple of micro_batch_size=3 (" train --set micro_batch_size=3
expect "bad precision"           precision     train --set precision=fp16
expect "bad device"              device        train --set device=tpu
expect "unknown argument"        --frobnicate  train --frobnicate
expect "an axis stage 01 lacks"  "tp=2"        train --set tp=2
expect "pipeline on one device"  "pp=2"        train --set pp=2
expect "stage 02's all-reduce"   "allreduce=backend: stage 01_single_gpu does not read the key" train --set allreduce=backend
expect "bad optimizer"           optimizer     train --set optimizer=lion
expect "missing config file"     nope.json     "$TRAIN" --config "$WORK/nope.json"
printf '{"n_layer": 2,' > "$WORK/broken.json"
expect "malformed config JSON"   broken.json   "$TRAIN" --config "$WORK/broken.json"
printf '{"n_layer": 2, "lernrate": 0.1}' > "$WORK/typo.json"
expect "unknown key in file"     lernrate      "$TRAIN" --config "$WORK/typo.json"
printf '{"n_layer": "two"}' > "$WORK/type.json"
expect "wrong type in file"      n_layer       "$TRAIN" --config "$WORK/type.json"
printf '{"n_layer": 2, "n_embd": 32, "n_layer": 3}' > "$WORK/twice.json"
expect "key twice in file"       "'n_layer' is given twice" "$TRAIN" --config "$WORK/twice.json"
mkdir -p "$WORK/config_dir"
expect "config is a directory"   "is a directory" "$TRAIN" --config "$WORK/config_dir"
# Read up to 1 MiB: a path such as /dev/zero would be read until memory ran out.
head -c 1100000 /dev/zero | tr '\0' ' ' > "$WORK/huge.json"
expect "config over 1 MiB"       "config file '$WORK/huge.json' is over 1 MiB long" "$TRAIN" --config "$WORK/huge.json"
# Sizes refused before anything is allocated: weights larger than the machine, a
# micro-batch whose logits are (1.1 TB), and an activation with more rows than an int counts.
expect "model beyond memory"     "n_layer=100000000" train --set n_layer=100000000
# The position table alone can be the size: the message names block_size among the keys.
expect "positions beyond memory" "block_size=2000000000: " train --set block_size=2000000000
expect "rows beyond an int"      micro_batch_size train --set micro_batch_size=67108864 --set batch_size=67108864
expect "logits beyond memory"    "the logits of a micro-batch and their gradient need 1.1e+03 GB" train --set micro_batch_size=16777216 --set batch_size=16777216
expect "prompt outside vocab"    "prompt: it encodes to token 120, outside vocab_size=100" train --set vocab_size=100 --set sample_tokens=4 --set prompt=xyz
# The sample's tokenizer is checked before any training: a vocabulary it cannot decode
# would print garbage only at the end of the run.
make_vocab() { python3 "$ROOT/tests/tokenizer/reference_bpe.py" vocab "$1" 0 /dev/null "$WORK/$1.bin"; }
make_vocab identity && make_vocab identity_eot
expect "bytes for a large vocab" "tokenizer=bytes decodes the ids 0..255 only, but vocab_size=300" train --set vocab_size=300 --set sample_tokens=4
expect "tokenizer file missing"  "tokenizer file '$WORK/no_tok.bin': no such file" train --set sample_tokens=4 --set "tokenizer=$WORK/no_tok.bin"
head -c 500 "$D/train.bin" > "$WORK/short_tok.bin"
expect "tokenizer file short"    "short_tok.bin': 500 bytes, shorter than the 1024-byte header" train --set sample_tokens=4 --set "tokenizer=$WORK/short_tok.bin"
expect "tokenizer of 257 tokens" "has 257 tokens, but vocab_size=256" train --set sample_tokens=4 --set "tokenizer=$WORK/identity_eot.bin"
# A tokenizer file named is checked even by a run that samples nothing (a later resume that
# samples would meet it at the end of its training); the byte tokenizer, not named, is not.
expect "tokenizer, no sample"    "tokenizer file '$WORK/no_tok.bin': no such file" train --set sample_tokens=0 --set "tokenizer=$WORK/no_tok.bin"
expect "empty prompt, tiny vocab" "prompt is empty, so the sample would start from the tokenizer's start token 10 (the newline)" train --set vocab_size=8 --set sample_tokens=4 --set prompt=
expect "prompt not UTF-8"        "prompt is not valid UTF-8: byte 0xFE at offset 1" train --set sample_tokens=4 --set "tokenizer=$WORK/identity.bin" --set $'prompt=a\xfe'
# The multiple-choice eval's file is read and checked before any training (common/choices_file.h
# names every way it can be wrong; here one of each kind the trainer adds to the tool's).
write_eval() { python3 "$ROOT/tests/llmc/eval_file.py" one "$@"; }  # write_eval FILE CONTEXT COMPLETION...
write_eval "$WORK/eval_ok.bin" 1,2 3 4
write_eval "$WORK/eval_vocab.bin" 300 3 4
write_eval "$WORK/eval_long.bin" 1 "$(seq -s, 1 40)" 4
expect "eval file missing"       "eval_choices: eval file '$WORK/no_eval.bin': no such file" train --set "eval_choices=$WORK/no_eval.bin"
expect "eval file not llm.c's"   "eval_choices: eval file '$D/val.bin'" train --set "eval_choices=$D/val.bin"
expect "eval token beyond vocab" "context token 0 (byte 1036) is 300, not below vocab_size 256" train --set "eval_choices=$WORK/eval_vocab.bin"
expect "eval row beyond window"  "completion 0 has 40 tokens, more than the model's max_seq_len (block_size) 32" train --set "eval_choices=$WORK/eval_long.bin"
expect "eval limit negative"     "eval_choices_limit=-1: must be >= 0" train --set "eval_choices=$WORK/eval_ok.bin" --set eval_choices_limit=-1
expect "eval limit without file" "eval_choices_limit=3: eval_choices is empty" train --set eval_choices_limit=3
# Output files that cannot be written: refused before the training, naming the key.
printf 'x' > "$WORK/a_file"
expect "trace under a file"      "trace_file: cannot create directory" train --set "trace_file=$WORK/a_file/t.json"
if grep -q "^step" "$WORK/out.txt"; then echo "FAIL [trace under a file]: it trained before refusing"; failures=$((failures + 1)); fi
expect "metrics under a file"    "metrics_file: cannot create directory" train --set "metrics_file=$WORK/a_file/m.jsonl"
expect "metrics unwritable"      "metrics_file: cannot write" train --set metrics_file=/dev/full
# Output files inside a checkpoint directory of run_dir, which a save replaces whole and
# pruning deletes: refused (a step directory not there yet, and one reached through '..').
expect "metrics in a checkpoint" "metrics_file='$WORK/run/step_00000002/m.jsonl' lies inside $WORK/run/step_00000002" train --set "metrics_file=$WORK/run/step_00000002/m.jsonl"
expect "trace in a checkpoint"   "lies inside $WORK/run/step_00000001.tmp, a checkpoint directory" train --set "trace_file=$WORK/run/../run/step_00000001.tmp/t.json"
# And the files it reads, which pruning would delete under the run (copies that exist,
# in a run_dir of their own).
mkdir -p "$WORK/inrun/step_00000001" && cp "$D/train.bin" "$D/val.bin" "$WORK/eval_ok.bin" "$WORK/inrun/step_00000001/"
in_ck=$WORK/inrun/step_00000001
expect "train data in a checkpoint" "train_data='$in_ck/train.bin' lies inside $in_ck, a checkpoint directory" \
  train --set "run_dir=$WORK/inrun" --set "train_data=$in_ck/train.bin"
expect "val data in a checkpoint" "val_data='$in_ck/val.bin' lies inside $in_ck" \
  train --set "run_dir=$WORK/inrun" --set "val_data=$in_ck/val.bin"
expect "eval file in a checkpoint" "eval_choices='$in_ck/eval_ok.bin' lies inside $in_ck" \
  train --set "run_dir=$WORK/inrun" --set "eval_choices=$in_ck/eval_ok.bin"
cp "$WORK/identity.bin" "$in_ck/"
expect "tokenizer in a checkpoint" "tokenizer='$in_ck/identity.bin' lies inside $in_ck" \
  train --set "run_dir=$WORK/inrun" --set "tokenizer=$in_ck/identity.bin"
# A glob whose matches lie there, though its pattern names no step directory.
expect "train data glob into a checkpoint" "matches '$WORK/inrun/step_00000001/train.bin', which lies inside $in_ck" \
  train --set "run_dir=$WORK/inrun" --set "train_data=$WORK/inrun/*/train.bin"
# Control: a directory whose name only begins like a checkpoint's is no run's to prune.
mkdir -p "$WORK/inrun/step_data" && cp "$D/train.bin" "$WORK/inrun/step_data/"
cases=$((cases + 1))
if train --set "run_dir=$WORK/inrun" --set "train_data=$WORK/inrun/step_data/train.bin" --set steps=1 \
    --set val_batches=0 > "$WORK/out.txt" 2>&1; then echo "ok   [data in step_data, no checkpoint's name]: trains"
else echo "FAIL [data in step_data, no checkpoint's name]: refused"; tail -2 "$WORK/out.txt"; failures=$((failures + 1)); fi
# The metrics log and the trace as one file (stage 01's trace, or a rank's of stages 02+):
# the trace written at the end would replace the log.
expect "metrics is the trace"    "is the same file as trace_file" train --set "trace_file=$WORK/same.json" --set "metrics_file=$WORK/same.json"
expect "metrics a rank's trace"  "is a rank's trace of trace_file" train --set "trace_file=$WORK/t" --set "metrics_file=$WORK/t.rank0.json"
# threads=0 takes OpenMP's count, OMP_NUM_THREADS: the limit of `threads` holds there too
# (100000 threads crashed OpenMP).
expect "OMP_NUM_THREADS huge"    "OMP_NUM_THREADS=100000 (the threads taken when threads=0): must be at most 8 per core" \
  env OMP_NUM_THREADS=100000 "$TRAIN" $(tiny_args "$D" "$WORK/run") --set steps=2 --set threads=0
# Output files that name an input by mistake: refused, and the input left as it was.
cp "$D/val.bin" "$WORK/shard.bin"
expect "trace over a data shard" "trace_file: '$WORK/shard.bin' exists and is not a trace" train --set "trace_file=$WORK/shard.bin"
expect "metrics into a shard"    "metrics_file: '$WORK/shard.bin' exists and is not a metrics log" train --set "metrics_file=$WORK/shard.bin"
cases=$((cases + 1))
if cmp -s "$D/val.bin" "$WORK/shard.bin"; then echo "ok   [the shard named as an output]: unchanged"
else echo "FAIL [the shard named as an output]: it changed"; failures=$((failures + 1)); fi
# A FIFO as an output would hang the run before its first step, waiting for a reader (the
# timeout turns a hang into a failure); a lock file that is a link would be written
# through, its target overwritten.
mkfifo "$WORK/fifo"
train_timed() { timeout 60 "$TRAIN" $(tiny_args "$D" "$WORK/run") --set steps=2 --set sample_tokens=0 "$@"; }
expect "metrics into a FIFO"     "metrics_file: '$WORK/fifo' is a FIFO" train_timed --set "metrics_file=$WORK/fifo"
expect "trace into a FIFO"       "trace_file: '$WORK/fifo' is a FIFO" train_timed --set "trace_file=$WORK/fifo"
# A FIFO as the config waits for its writer, as `cat` would; a stop signal must end that
# wait at once (timeout's 124), not ask for a checkpoint of a step that never comes and
# go on waiting until killed (137).
cases=$((cases + 1)) && status=0
timeout -k 10 2 "$TRAIN" --config "$WORK/fifo" > "$WORK/out.txt" 2> "$WORK/err.txt" || status=$?
if [ "$status" -eq 124 ] && ! grep -q "stop requested" "$WORK/err.txt"; then echo "ok   [SIGTERM while --config waits]"
else echo "FAIL [SIGTERM while --config waits]: exit status $status, expected 124"; cat "$WORK/err.txt"
  failures=$((failures + 1)); fi
mkdir -p "$WORK/linked" && echo precious > "$WORK/precious.txt" && ln -s ../precious.txt "$WORK/linked/.lock"
expect "the lock file a link"    "the lock file '$WORK/linked/.lock' is a symbolic link" \
  "$TRAIN" $(tiny_args "$D" "$WORK/linked") --set steps=2 --set sample_tokens=0
cases=$((cases + 1))
if [ "$(cat "$WORK/precious.txt")" = precious ]; then echo "ok   [the lock link's target]: unchanged"
else echo "FAIL [the lock link's target]: overwritten"; failures=$((failures + 1)); fi
# Text keys go into the checkpoint manifest's JSON: UTF-8 only, refused before training.
expect "run_dir not UTF-8"       "run_dir is not valid UTF-8: byte 0xE9" train --set $'run_dir=/tmp/lat\xe9'
expect "NUL in a path (JSON)"    "train_data holds a NUL character" "$TRAIN" --config "$(printf '%s' '{"train_data": "a\u0000b"}' > "$WORK/nul.json"; echo "$WORK/nul.json")"

# --- data
expect "missing data file"       missing.bin   train --set "train_data=$WORK/missing.bin"
: > "$WORK/empty.bin"
expect "empty data file"         empty.bin     train --set "train_data=$WORK/empty.bin"
head -c 2000 "$D/train.bin" > "$WORK/truncated.bin"
expect "truncated shard"         truncated.bin train --set "train_data=$WORK/truncated.bin"
cp "$D/train.bin" "$WORK/magic.bin"; printf '\x00\x00\x00\x00' | dd of="$WORK/magic.bin" conv=notrunc status=none
expect "wrong magic"             magic.bin     train --set "train_data=$WORK/magic.bin"
expect "token outside vocab"     train.bin     train --set vocab_size=64
# Validation: more batches than the data has distinct windows (a huge count used to wrap
# around silently and run for ages), and batches asked of no data.
expect "validation beyond data"  "val_batches=1000 x micro_batch_size=2 = 2000 sequences" train --set val_batches=1000
expect "validation without data" "val_data is empty but val_batches=2" train --set val_data= --set val_batches=2
expect "no training data named"  'train_data="": is empty' train --set train_data=
expect "a missing val_data, named" \
  "val_data: data file '$WORK/no_val.bin' does not exist (val_batches=0 validates nothing" train --set "val_data=$WORK/no_val.bin" --set val_batches=0
# A validation shard of one window, fewer than a micro-batch (2): the advice is one that can
# be followed (a smaller micro-batch), not val_batches <= 0.
/usr/bin/python3 -c 'import struct, sys
sys.stdout.buffer.write(struct.pack("<256i", 20240520, 1, 40, *[0] * 253) + bytes(80))' > "$WORK/one_window.bin"
expect "val shard under a micro-batch" "lower micro_batch_size to 1, or set val_batches=0" train --set "val_data=$WORK/one_window.bin"
# A training glob that also matches the validation shard, and one file spelled two ways.
expect "train glob holds val"    "both name '$D/val.bin'" train --set "train_data=$D/*.bin"
expect "val is a train shard"    "training tokens" train --set "val_data=$D/./train.bin"
# The control: no validation data is fine when nothing is validated.
cases=$((cases + 1))
if train --set val_data= --set val_batches=0 > "$WORK/out.txt" 2>&1 && grep -q "val 0 tokens" "$WORK/out.txt"; then
  echo "ok   [no validation, no val_data]: trains"
else
  echo "FAIL [no validation, no val_data]: did not train"; tail -5 "$WORK/out.txt" | sed 's/^/    /'
  failures=$((failures + 1))
fi
expect "prepare: missing text"   no_such.txt   "$PREPARE" --out "$WORK/p" "$WORK/no_such.txt"

# --- checkpoints
"$TRAIN" $(tiny_args "$D" "$WORK/good") --set steps=2 --set sample_tokens=0 > /dev/null
ck="$WORK/good/step_00000002"
expect "resume path missing"     "resume=$WORK/no_ckpt: checkpoint $WORK/no_ckpt does not exist" train \
  --set "resume=$WORK/no_ckpt"
expect "resume=LATEST"           "resume=LATEST: no such checkpoint; for the newest checkpoint in run_dir write resume=latest" train --set resume=LATEST
cp -r "$ck" "$WORK/flipped"
printf '\x7f' | dd of="$WORK/flipped/param.bin" bs=1 seek=100 conv=notrunc status=none
expect "flipped byte"            wte           train --set "resume=$WORK/flipped"
cp -r "$ck" "$WORK/short"; truncate -s -4 "$WORK/short/adam_v.bin"
expect "truncated tensor file"   adam_v.bin    train --set "resume=$WORK/short"
expect "another model shape"     n_embd        train --set "resume=$ck" --set n_embd=64
# A save in progress (or cut short by a crash), named by hand: never read, even whole.
cp -r "$ck" "$WORK/good/step_00000003.tmp"
expect "resume of a .tmp save"   "step_00000003.tmp/ is a checkpoint being written" train \
  --set "resume=$WORK/good/step_00000003.tmp/"
cp -r "$ck" "$WORK/nomanifest"; rm "$WORK/nomanifest/manifest.json"
expect "missing manifest"        manifest.json train --set "resume=$WORK/nomanifest"
mkdir "$WORK/nomanifest/manifest.json"
expect "manifest a directory"    "manifest.json is not a regular file" train --set "resume=$WORK/nomanifest"
cp -r "$ck" "$WORK/negative"; sed -i 's/"step": 2,/"step": -3,/' "$WORK/negative/manifest.json"
expect "negative step"           "negative/manifest.json has step -3: a step count is an integer >= 0" train --set "resume=$WORK/negative"
expect "steps below the resume"  "steps=1 is below step 2" train --set "resume=$ck" --set steps=1
# A data position edited to 2^62, the most a checkpoint counts: steps past it are refused
# at start (the run's own next checkpoint would be one its loader refuses).
cp -r "$ck" "$WORK/far"; sed -i 's/"sequences": 8,/"sequences": 4611686018427387904,/' "$WORK/far/manifest.json"
expect "position near 2^62"      "would read past 2^62" train --set "resume=$WORK/far" --set steps=3
# A run directory inside a checkpoint, or inside a step_ entry of another run: that
# run's saves and pruning would delete it.
expect "run_dir in a checkpoint" "run_dir='$ck/inner' lies inside $ck, a checkpoint:" train --set "run_dir=$ck/inner"
expect "run_dir in a step entry" "lies inside $WORK/good/step_00000009.tmp, a checkpoint directory of another run" \
  train --set "run_dir=$WORK/good/step_00000009.tmp/inner"
# The control: a directory of another name that holds a manifest.json (a web project's,
# say) is no checkpoint, and a run_dir inside it trains.
mkdir -p "$WORK/webapp" && echo '{}' > "$WORK/webapp/manifest.json"
cases=$((cases + 1))
if train --set "run_dir=$WORK/webapp/run" > "$WORK/out.txt" 2>&1; then
  echo "ok   [run_dir beside another project's manifest.json]: trains"
else
  echo "FAIL [run_dir beside another project's manifest.json]: refused"; tail -3 "$WORK/out.txt" | sed 's/^/    /'
  failures=$((failures + 1))
fi
# A checkpoint directory named after another step than its manifest's: ranked by its
# name, it would be resumed in the place of a later step, or prune newer checkpoints.
mkdir -p "$WORK/misnamed" && cp -r "$ck" "$WORK/misnamed/step_00000009"
expect "misnamed, resume=latest" "$WORK/misnamed/step_00000009 holds the checkpoint of step 2" \
  train --set "run_dir=$WORK/misnamed" --set resume=latest --set steps=12
expect "misnamed, by its path"   "is named after step 9 but holds the checkpoint of step 2" \
  train --set "resume=$WORK/misnamed/step_00000009/" --set steps=12
# SGD keeps no moments: AdamW resumed from its checkpoint would start from zeros.
expect "resume, optimizer changed" "optimizer=sgd, but the checkpoint was trained with optimizer=adamw" \
  train --set "resume=$ck" --set steps=3 --set optimizer=sgd
# The data position counts sequences of seq_len tokens, in seed's order. Either changed
# would skip or repeat data (another batch_size reads on: trainer_resume_batch_change);
# at step 0 (nothing read yet, as for imported weights) they may change, and so may
# micro_batch_size and the optimizer; so may they in a run that trains no step (cp_sample_window samples
# with another seq_len).
expect "resume, seq_len changed" "seq_len=16, but the checkpoint was trained with seq_len=32" \
  train --set "resume=$ck" --set steps=3 --set seq_len=16
# A refused resume says nothing of itself first: not the note that steps 2 -> 3 changes the
# learning-rate schedule, which the same resume with seq_len=32 prints.
cases=$((cases + 1))
train --set "resume=$ck" --set steps=3 --set seq_len=16 > "$WORK/refused.txt" 2>&1 || true
if ! grep -q "but the checkpoint was trained with seq_len=32" "$WORK/refused.txt" ||
  grep -q "schedule changed" "$WORK/refused.txt"; then
  echo "FAIL [resume refused, no note first]: $(cat "$WORK/refused.txt")"
  failures=$((failures + 1))
elif ! { train --set "resume=$ck" --set steps=3 --set run_dir="$WORK/noted" > "$WORK/noted.txt" 2>&1 &&
         grep -q "schedule changed" "$WORK/noted.txt"; }; then
  echo "FAIL [resume refused, no note first]: the control, the same resume accepted, printed no note"
  failures=$((failures + 1))
else echo "ok   [resume refused, no note first]"; fi
expect "resume, seed changed"    "seed=7, but the checkpoint was trained with seed=1337" \
  train --set "resume=$ck" --set steps=3 --set seed=7
"$TRAIN" $(tiny_args "$D" "$WORK/zero") --set steps=0 --set sample_tokens=0 > /dev/null
cases=$((cases + 1))
if train --set "resume=$WORK/zero/step_00000000" --set run_dir="$WORK/from_zero" --set batch_size=8 --set seed=7 \
  --set seq_len=16 --set optimizer=sgd > "$WORK/out.txt" 2>&1 && train --set "resume=$ck" --set steps=3 --set micro_batch_size=1 \
  --set run_dir="$WORK/micro" > "$WORK/out2.txt" 2>&1; then
  echo "ok   [resume at step 0 with another batch, seed, seq_len and optimizer; another micro-batch]: trains"
else
  echo "FAIL [resume at step 0 with another batch, seed, seq_len or optimizer, or another micro-batch]: refused"
  tail -3 "$WORK/out.txt" "$WORK/out2.txt" | sed 's/^/    /'; failures=$((failures + 1))
fi
# A gradient that is not finite while the loss is (test_grad_scale 1e39 is inf in fp32:
# the loss is computed before the backward it scales) stops the step before its update:
# the weights would turn nan, be saved, and pruning (keep_checkpoints=1) would leave only
# that checkpoint. The run directory keeps step 2, which resumes.
"$TRAIN" $(tiny_args "$D" "$WORK/nan_grad") --set steps=2 --set sample_tokens=0 > /dev/null
expect "a gradient norm that is inf" "step 3: the gradient norm is" "$TRAIN" $(tiny_args "$D" "$WORK/nan_grad") \
  --set steps=6 --set sample_tokens=0 --set resume=latest --set checkpoint_every=1 --set keep_checkpoints=1 \
  --set test_grad_scale=1e39
cases=$((cases + 1))
if "$TRAIN" $(tiny_args "$D" "$WORK/nan_grad") --set steps=3 --set sample_tokens=0 --set resume=latest \
  > "$WORK/out.txt" 2>&1 && grep -q "resumed from $WORK/nan_grad/step_00000002" "$WORK/out.txt"; then
  echo "ok   [after the stopped step]: step 2 is still the newest checkpoint, and resumes"
else
  echo "FAIL [after the stopped step]: step 2 did not resume"; tail -3 "$WORK/out.txt" | sed 's/^/    /'
  failures=$((failures + 1))
fi
cp -r "$ck" "$WORK/counter"; sed -i 's/"sample_counter": [0-9]*/"sample_counter": -7/' "$WORK/counter/manifest.json"
expect "negative sample counter" "has sample_counter -7" train --set "resume=$WORK/counter"
# Stage 01 is one process: started by mpirun as one of several ranks it says so.
expect "stage 01 under mpirun"   "stage 01 trains in one process, but mpirun started it as one of 2 ranks" \
  env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$TRAIN" $(tiny_args "$D" "$WORK/mpi01") --set steps=1
# The other ranks say nothing (the first says it once for the job) and exit 2 too.
cases=$((cases + 1)) status=0
env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 "$TRAIN" $(tiny_args "$D" "$WORK/mpi01") --set steps=1 \
  > "$WORK/out.txt" 2> "$WORK/err.txt" || status=$?
if [ "$status" -eq 2 ] && [ ! -s "$WORK/err.txt" ]; then echo "ok   [stage 01 under mpirun, rank 1]: exit 2, silent"
else echo "FAIL [stage 01 under mpirun, rank 1]: exit $status, said: $(cat "$WORK/err.txt")"; failures=$((failures + 1)); fi

echo "$((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
