#!/usr/bin/env bash
# A run whose weights stop being numbers stops with exit 2, naming the step and what is
# not a number, and never checkpoints them: the checkpoints before it stay, and resume.
#   1. stage 01, resumed at lr 1e39 (finite in double, infinite in fp32) with a checkpoint
#      every step and keep_checkpoints=1: step 2's update makes the weights infinite; its
#      save is refused (naming param/ and the tensor), so step 1's checkpoint is not pruned,
#      and resume=latest from it trains on. In the run directory of another run, the refused
#      save sets nothing of that run aside.
#   2. stage 01 at lr 1e20: the weights stay finite but their forward overflows; the
#      validation loss is NaN, and the run stops there, with no checkpoint (exit 0 before).
#   3. stage 03 on 2 ranks (every rank saves its own shard of the weights): as 1 and as 2.
#   4. the multiple-choice eval of weights that give NaN losses (the checkpoint of a run
#      at lr 1e20 without validation, finite and saved): build/bin/eval_choices and the
#      trainer's eval both stop, exit 2, where they printed an accuracy over NaN before.
#      Control: the eval of a healthy checkpoint exits 0.
# Usage: diverged.sh TRAIN01 TRAIN03 EVAL_CHOICES PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN01=$1 TRAIN03=$2 EVAL=$3 PREPARE=$4 WORK=$5 ROOT=$6 MPIEXEC=$7
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

# train NAME [NP] key=value...: a tiny run into $WORK/NAME (NP ranks of stage 03, or stage
# 01 alone); its output in $WORK/NAME.log, its exit status in $status.
train() {
  local name=$1 cmd=("$TRAIN01") sets=() kv
  shift
  if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
    cmd=("$MPIEXEC" -np "$1" --oversubscribe "$TRAIN03")
    shift
  fi
  # weight_decay=0: these runs diverge by their lr alone, and lr * weight_decay >= 1 is
  # refused before training (the decay by itself would flip every decayed weight).
  for kv in weight_decay=0 "$@"; do sets+=(--set "$kv"); done
  status=0
  "${cmd[@]}" $(tiny_args "$WORK/data" "$WORK/$name") --set sample_tokens=0 --set val_every=0 \
    "${sets[@]}" > "$WORK/$name.log" 2>&1 || status=$?
}
# expect NAME STATUS NEEDLE: the last run of NAME exited STATUS and said NEEDLE.
expect() {
  if [ "$status" != "$2" ] || ! grep -qF -- "$3" "$WORK/$1.log"; then
    fail "$1: exit status $status (expected $2), '$3' $(grep -qF -- "$3" "$WORK/$1.log" && echo said || echo not said)"
    tail -4 "$WORK/$1.log" | sed 's/^/    /'
  else
    echo "ok   $1: exit $status, $(grep -F -m1 -- "$3" "$WORK/$1.log" | cut -c1-160)"
  fi
}
checkpoints() { (cd "$WORK/$1" && ls -d step_* 2> /dev/null | paste -sd ' ') || true; }

# 1 and 3a: an update to infinity is not saved, and the checkpoint before it is kept.
for np in "" 2; do
  name=inf${np:+_np$np}
  train "$name" $np steps=1
  train "$name" $np resume=latest steps=5 lr=1e39 checkpoint_every=1 keep_checkpoints=1
  expect "$name" 2 "step 2: param/"
  grep -qF "the run has diverged" "$WORK/$name.log" || fail "$name: the error does not say the run diverged"
  [ "$(checkpoints "$name")" = "step_00000001" ] ||
    fail "$name: checkpoints after the refused save: '$(checkpoints "$name")', expected step_00000001 alone"
  train "$name" $np resume=latest steps=2
  expect "$name" 0 "resumed from"
done

# 1 and 3a again, in the run directory of another run that got further (step 3): the
# diverged run's first save would set that run's checkpoints aside; refused, it leaves the
# directory as it found it, and resume=latest still continues the other run.
for np in "" 2; do
  name=inf_over${np:+_np$np}
  train "$name" $np steps=3
  train "$name" $np steps=5 lr=1e39 checkpoint_every=1
  expect "$name" 2 "step 1: param/"
  [ "$(cd "$WORK/$name" && ls | paste -sd ' ')" = "metrics.jsonl step_00000003" ] ||
    fail "$name: the run directory after the refused save: $(cd "$WORK/$name" && ls | paste -sd ' ')"
done

# 2 and 3b: a NaN validation loss stops the run before its checkpoint.
for np in "" 2; do
  name=val_nan${np:+_np$np}
  train "$name" $np steps=1 lr=1e20 val_batches=2
  expect "$name" 2 "step 1: the validation loss is"
  [ -z "$(checkpoints "$name")" ] || fail "$name: a checkpoint was written: $(checkpoints "$name")"
done

# 4. The multiple-choice eval: a file of 6 examples of 3 completions each.
/usr/bin/python3 - "$WORK/choices.bin" "$ROOT/tests/llmc" << 'PY'
import random, sys
sys.path.insert(0, sys.argv[2])
from eval_file import encode
rng = random.Random(5)
tokens = lambda n: [rng.randrange(256) for _ in range(n)]
examples = [(i, rng.randrange(3), tokens(5), [tokens(3) for _ in range(3)]) for i in range(6)]
open(sys.argv[1], "wb").write(encode(examples))
PY
train huge steps=1 lr=1e20 val_batches=0
[ "$status" = 0 ] || fail "huge: the run at lr 1e20 without validation exited $status"
train healthy steps=1
for run in huge healthy; do
  status=0
  "$EVAL" "$WORK/$run" "$WORK/choices.bin" --device cpu --threads 1 > "$WORK/eval_$run.log" 2>&1 || status=$?
  if [ $run = huge ]; then expect eval_huge 2 "the summed loss is"; else expect eval_healthy 0 "acc "; fi
done
train huge resume=latest steps=1 eval_choices="$WORK/choices.bin" checkpoint_at_end=false val_batches=0
expect huge 2 "the multiple-choice eval of"

if ((failures > 0)); then
  echo "$failures failure(s); logs in $WORK"
  exit 1
fi
echo "PASS"
