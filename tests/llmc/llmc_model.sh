#!/usr/bin/env bash
# llm.c's model files start runs here, and runs go back to them (build/bin/llmc_model).
#
# llmc_reference.py, which knows llm.c's file and nanoGPT's GPT-2 but not this project's
# layout, writes small model files with random weights (versions 1 and 3: fp32, 5: bf16)
# and computes their float64 loss on a one-window validation shard. Then:
#   1. each file imports into a step-0 checkpoint whose every tensor equals the file's,
#      bit for bit (wte's padding rows zero, even where the file's hold noise);
#   2. stage 01 in fp64, resuming that checkpoint, evaluates the window's loss within
#      1e-9 of the reference: both are the same math in double, which agree to round-off
#      (the oracle's f64 bound, tests/oracle/README.md; measured here about 1e-16);
#   3. stage 06 on 2 ranks (tp = 2) in fp32 evaluates it within 4 e01 + 8 eps32, e01
#      stage 01's own fp32 error: the oracle's fp32 bound (tests/oracle/README.md), with
#      stage 01 in fp32 as the baseline where the oracle has PyTorch in fp32;
#   4. export gives back the imported file byte for byte (version 3 and, with --bf16, 5),
#      given the checkpoint or its run directory;
#      version 3's weights exported with --bf16 give version 5's file (the rounding);
#      version 1's export, imported again, gives the same checkpoint tensors;
#   5. bad input: a truncated file, an unknown version, n_head not dividing n_embd, a
#      vocabulary past uint16's 65536, a token shard given as a model, a weight that is
#      NaN, a RUN_DIR that holds a step-0 checkpoint, a later one, or a running job's lock,
#      an export over an existing file or its temporary name, an export of a save in
#      progress (.tmp), an export or import into a checkpoint directory, a resume with
#      another model shape:
#      each exit 2, named; the refused imports and exports write nothing.
# Negative control: a file whose attention projections are stored transposed (what an
# importer that transposed them would make of the right file) must fail both the tensor
# check and the fp64 loss bound.
# Usage: llmc_model.sh LLMC_MODEL TRAIN01 TRAIN06 WORKDIR ROOT MPIEXEC
set -euo pipefail
TOOL=$1 TRAIN01=$2 TRAIN06=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
REF=(/usr/bin/python3 "$ROOT/tests/llmc/llmc_reference.py")
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
source "$ROOT/tests/llmc/refused.sh"  # refused NAME NEEDLE CMD...

SHAPE=(--layers 2 --embd 32 --heads 4 --vocab 200 --max-seq 32)
KEYS=(--set n_layer=2 --set n_embd=32 --set n_head=4 --set vocab_size=200 --set block_size=32 --set seq_len=32)
"${REF[@]}" shards data --vocab 200 --seq 32 --seed 2 || { [ $? = 77 ] && exit 77; exit 1; }
"${REF[@]}" write m3.bin --version 3 --seed 1 "${SHAPE[@]}"
"${REF[@]}" write m3noise.bin --version 3 --seed 1 --padding-noise "${SHAPE[@]}"
"${REF[@]}" write m1.bin --version 1 --seed 1 "${SHAPE[@]}"
"${REF[@]}" write m5.bin --version 5 --seed 1 "${SHAPE[@]}"
"${REF[@]}" write m3t.bin --version 3 --seed 1 --transpose-attproj "${SHAPE[@]}"

# evaluate NP TRAIN RUN_DIR CHECKPOINT key=value...: the validation loss at step 0 of a
# run that resumes CHECKPOINT and trains nothing.
evaluate() {
  local np=$1 bin=$2 dir=$3 ckpt=$4 sets=() kv
  shift 4
  for kv in "$@"; do sets+=(--set "$kv"); done
  local cmd=("$bin" --config "$ROOT/configs/tiny.json" --set device=cpu --set threads=1 "${KEYS[@]}"
             --set micro_batch_size=1 --set batch_size=1 --set val_batches=1 --set steps=0 --set sample_tokens=0
             --set train_data=data/train.bin --set val_data=data/val.bin --set run_dir="$dir" --set resume="$ckpt"
             "${sets[@]}")
  if [ "$np" = 1 ]; then "${cmd[@]}"; else "$MPIEXEC" -np "$np" --oversubscribe "${cmd[@]}"; fi > "$dir.log" 2>&1 ||
    { echo "FAIL: $bin resuming $ckpt"; tail -5 "$dir.log"; exit 1; }
  sed -nE 's/.*"kind":"val","step":0,"val_loss":([^,}]*).*/\1/p' "$dir/metrics.jsonl"
}
# within ERR BOUND: true when |ERR| <= BOUND.
within() { awk -v e="$1" -v b="$2" 'BEGIN { exit !(e <= b) }'; }
rel() { awk -v a="$1" -v b="$2" 'BEGIN { d = (a - b) / b; printf "%.3e\n", d < 0 ? -d : d }'; }

echo "== import, tensor by tensor, and the fp64 loss"
ref=$("${REF[@]}" loss m3.bin data/val.bin)
for v in 3 3noise 1 5; do
  "$TOOL" import "m$v.bin" "run$v" > "import$v.log" || { fail "import of m$v.bin"; cat "import$v.log"; continue; }
  "${REF[@]}" check "m$v.bin" "run$v/step_00000000" || fail "m$v.bin's tensors"
  want=$("${REF[@]}" loss "m$v.bin" data/val.bin)  # 1 (fewer rows drawn) and 5 (bf16) are other models
  got=$(evaluate 1 "$TRAIN01" "eval$v" "run$v/step_00000000" precision=fp64)
  err=$(rel "$got" "$want")
  if within "$err" 1e-9; then echo "ok   version $v: loss $got, reference $want, error $err"
  else fail "version $v: loss $got, reference $want, error $err beyond 1e-9"; fi
done
cmp -s run3/step_00000000/param.bin run3noise/step_00000000/param.bin || fail "the padding noise reached the weights"
# An import reads no training data: the default train_data, where it runs from a directory
# that has one, is not recorded as the data position's (it would say the tokens were read).
mkdir -p data/fortunes && cp data/train.bin data/fortunes/train.bin
"$TOOL" import m3.bin run_here > /dev/null || fail "import beside a default train_data"
if grep -q '"train_tokens"' run_here/step_00000000/manifest.json; then
  fail "the import recorded the token count of the train_data in its directory"
else echo "ok   an import records no train_data's token count"; fi
rm -rf data/fortunes

echo "== negative control: the attention projections transposed"
"$TOOL" import m3t.bin run3t > /dev/null
if "${REF[@]}" check m3.bin run3t/step_00000000 > control_check.log; then fail "the tensor check accepts a transpose"
else echo "ok   rejected by the tensor check: $(cat control_check.log)"; fi
got=$(evaluate 1 "$TRAIN01" eval3t run3t/step_00000000 precision=fp64)
err=$(rel "$got" "$ref")
if within "$err" 1e-9; then fail "the loss bound accepts a transpose ($err)"
else echo "ok   rejected by the loss bound: error $err"; fi

echo "== another layout: stage 06 at tp = 2, fp32"
got01=$(evaluate 1 "$TRAIN01" eval3_fp32 run3/step_00000000 precision=fp32)
got06=$(evaluate 2 "$TRAIN06" eval3_tp2 run3/step_00000000 precision=fp32 tp=2)
e01=$(rel "$got01" "$ref") e06=$(rel "$got06" "$ref")
bound=$(awk -v e="$e01" 'BEGIN { printf "%.3e\n", 4 * e + 8 * 2^-23 }')
if within "$e06" "$bound"; then echo "ok   stage 06 tp 2: error $e06 (stage 01 fp32: $e01), bound $bound"
else fail "stage 06 tp 2: error $e06 beyond $bound (stage 01 fp32: $e01)"; fi

echo "== export"
# exported NAME CMD...: CMD (export, and for version 1 a new import) must succeed and the
# files it compares must be equal.
exported() {
  local name=$1
  shift
  if "$@" > export.log 2>&1; then echo "ok   $name"; else fail "$name"; cat export.log; fi
}
exported "version 3 comes back byte for byte" \
  bash -c '"$0" export run3/step_00000000 back3.bin && cmp back3.bin m3.bin' "$TOOL"
# A run directory exports its latest checkpoint: a copy of run3 trained one step on from
# the import holds step 0 and step 1; its export is step 1's, not the import's.
cp -r run3 run3two
"$TRAIN01" --config "$ROOT/configs/tiny.json" --set device=cpu --set threads=1 "${KEYS[@]}" \
  --set micro_batch_size=1 --set batch_size=1 --set val_batches=0 --set steps=1 --set sample_tokens=0 \
  --set train_data=data/train.bin --set val_data=data/val.bin --set run_dir=run3two \
  --set resume=run3two/step_00000000 > run3two.log 2>&1 || { fail "training run3two a step"; tail -5 run3two.log; }
exported "a run directory exports its latest checkpoint (step 1 of two)" \
  bash -c '"$0" export run3two back3_latest.bin && "$0" export run3two/step_00000001 back3_step1.bin &&
           cmp back3_latest.bin back3_step1.bin && ! cmp -s back3_latest.bin m3.bin' "$TOOL"
exported "version 5 comes back byte for byte (--bf16)" \
  bash -c '"$0" export run5/step_00000000 back5.bin --bf16 && cmp back5.bin m5.bin' "$TOOL"
exported "version 3 exported with --bf16 is version 5's file (the same seed: the rounding of the same values)" \
  bash -c '"$0" export run3/step_00000000 back35.bin --bf16 && cmp back35.bin m5.bin' "$TOOL"
exported "version 1 comes back through version 3, the same tensors" \
  bash -c '"$0" export run1/step_00000000 back1.bin && "$0" import back1.bin run1again &&
           cmp run1/step_00000000/param.bin run1again/step_00000000/param.bin' "$TOOL"

echo "== bad input"
# patch FILE INDEX VALUE: header word INDEX of a copy of m3.bin set to VALUE.
patch() { cp m3.bin "$1" && /usr/bin/python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f: f.seek(4 * int(sys.argv[2])); f.write(struct.pack('<i', int(sys.argv[3])))
" "$1" "$2" "$3"; }
head -c 100000 m3.bin > truncated.bin
refused truncated "the file is truncated" "$TOOL" import truncated.bin bad1
patch version4.bin 1 4
refused version "version 4" "$TOOL" import version4.bin bad2
patch heads5.bin 5 5
refused heads "does not divide n_embd" "$TOOL" import heads5.bin bad3
refused shard "a token shard" "$TOOL" import data/train.bin bad4
patch nan.bin 256 2143289344  # the first weight (wte's first value, after the header) a quiet NaN
refused nan "tensor wte holds NaN at element 0" "$TOOL" import nan.bin bad6
refused run_dir "already holds" "$TOOL" import m3.bin run3
"${REF[@]}" write vocab70000.bin --version 3 --seed 1 --layers 1 --embd 8 --heads 2 --vocab 70000 --max-seq 8
refused big_vocab "vocab_size=70000 is more than 65536" "$TOOL" import vocab70000.bin bad7
[ ! -e bad7 ] || fail "the refused import of vocab70000.bin made bad7"
# A run directory with a later checkpoint, and one a running job holds (this shell stands
# for the job: flock(1) on the lock file the trainers take): refused, nothing written there.
mkdir -p later && cp -r run3/step_00000000 later/step_00000000 && rm -rf later_run
python3_set_step() { /usr/bin/python3 -c 'import json, sys
m = json.load(open(sys.argv[1])); m["step"] = m["data_position"]["step"] = 4; m["data_position"]["sequences"] = 4
json.dump(m, open(sys.argv[1], "w"))' "$1"; }
mv later/step_00000000 later/step_00000004 && python3_set_step later/step_00000004/manifest.json
refused later_checkpoints "holds checkpoints already" "$TOOL" import m3.bin later
[ ! -e later/step_00000000 ] || fail "the refused import wrote later/step_00000000"
mkdir -p busy && exec {held}> busy/.lock && flock -n "$held"
refused busy "is in use by another job" "$TOOL" import m3.bin busy
exec {held}>&-
[ ! -e busy/step_00000000 ] || fail "the import into a locked run directory wrote busy/step_00000000"
# A save in progress (step_N.tmp, here a whole copy) is read by no tool: export refuses it.
cp -r run3/step_00000000 saving.tmp
refused export_of_tmp "saving.tmp is a checkpoint being written" "$TOOL" export saving.tmp from_tmp.bin
[ ! -e from_tmp.bin ] || fail "the refused export of saving.tmp wrote from_tmp.bin"
cp m3.bin m3.copy
refused export_over "exists" "$TOOL" export run3/step_00000000 m3.bin
refused export_nameless "name a file to write" "$TOOL" export run3/step_00000000 ""
cmp -s m3.bin m3.copy && [ ! -e m3.bin.tmp ] || fail "the refused export touched m3.bin or left m3.bin.tmp"
# Into a checkpoint directory, which its run's pruning or next save deletes whole: refused.
refused export_into_checkpoint "run3/step_00000000 is a checkpoint directory" \
  "$TOOL" export run3/step_00000000 run3/step_00000000/model.bin
[ ! -e run3/step_00000000/model.bin ] || fail "the refused export wrote into run3/step_00000000"
refused import_into_checkpoint "step_00000000 is a checkpoint directory" "$TOOL" import m3.bin run3/step_00000000/inner
[ ! -e run3/step_00000000/inner ] || fail "the refused import made run3/step_00000000/inner"
ln -s nowhere.bin dangling.bin  # a link to nothing is a name taken as well
refused export_dangling "'dangling.bin' exists" "$TOOL" export run3/step_00000000 dangling.bin
[ -L dangling.bin ] && [ ! -e nowhere.bin ] || fail "the refused export replaced the link or made its target"
: > kept.bin.tmp
refused export_tmp "kept.bin.tmp: File exists" "$TOOL" export run3/step_00000000 kept.bin
[ ! -s kept.bin.tmp ] && [ ! -e kept.bin ] || fail "the refused export touched kept.bin.tmp or wrote kept.bin"
refused shape "n_layer is 2" "$TRAIN01" --config "$ROOT/configs/tiny.json" --set device=cpu "${KEYS[@]}" \
  --set n_layer=3 --set steps=0 --set sample_tokens=0 --set train_data=data/train.bin \
  --set val_data=data/val.bin --set run_dir=bad5 --set resume=run3/step_00000000 --set micro_batch_size=1 \
  --set batch_size=1 --set val_batches=1
for d in bad1 bad2 bad3 bad4 bad6; do [ ! -e "$d" ] || fail "the refused import into $d wrote it"; done

if [ $failures -gt 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "llm.c model files import, evaluate and export as they must"
