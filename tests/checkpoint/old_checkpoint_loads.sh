#!/usr/bin/env bash
# A checkpoint written before the current manifest keys existed still loads: the fixture
# fixtures/v1_stage01_tiny is stage 01's step-2 checkpoint of a 1-layer, 8-wide model,
# written by the code of before rank-local layouts (its manifest has no tp, pp, cp,
# virtual_stages, optimizer keys). Stage 01 resumes from it into a run directory of its
# own (steps=2: nothing to train, so the end checkpoint is a copy in the current format)
# and writes its final checkpoint: the tensor files must come back byte for byte.
# Negative control: the same resume from a copy with one byte of param.bin changed is
# refused (the checksum names the tensor).
# Usage: old_checkpoint_loads.sh TRAIN PREPARE WORKDIR ROOT
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4
source "$ROOT/tests/trainer/common.sh"
FIXTURE="$ROOT/tests/checkpoint/fixtures/v1_stage01_tiny"
rm -rf "$WORK" && mkdir -p "$WORK/old/step_00000002"
make_corpus "$WORK" "$PREPARE"
cp "$FIXTURE"/* "$WORK/old/step_00000002/"
shape=(--set n_layer=1 --set n_embd=8 --set n_head=2 --set block_size=8 --set seq_len=8 --set steps=2
       --set sample_tokens=0 --set val_batches=0)
"$TRAIN" $(tiny_args "$WORK/data" "$WORK/run") "${shape[@]}" --set resume="$WORK/old/step_00000002" \
  > "$WORK/resume.log" 2>&1 ||
  { echo "FAIL: the old checkpoint did not load"; cat "$WORK/resume.log"; exit 1; }
grep -q "resumed from .*step_00000002 at step 2" "$WORK/resume.log" || { echo "FAIL: no resume"; cat "$WORK/resume.log"; exit 1; }
# the current code wrote the checkpoint again (its manifest has the new keys) ...
grep -q '"optimizer"' "$WORK/run/step_00000002/manifest.json" || { echo "FAIL: the checkpoint was not written again"; exit 1; }
grep -q '"optimizer"' "$FIXTURE/manifest.json" && { echo "FAIL: the fixture is not of the old format"; exit 1; }
# ... with the same tensors
for f in param.bin adam_m.bin adam_v.bin; do
  cmp "$FIXTURE/$f" "$WORK/run/step_00000002/$f" || { echo "FAIL: $f changed through load and save"; exit 1; }
done
echo "ok: the old checkpoint loads and saves back byte for byte"

mkdir -p "$WORK/bad/step_00000002" && cp "$FIXTURE"/* "$WORK/bad/step_00000002/"
printf '\x7f' | dd of="$WORK/bad/step_00000002/param.bin" bs=1 seek=100 conv=notrunc status=none
status=0
"$TRAIN" $(tiny_args "$WORK/data" "$WORK/bad") "${shape[@]}" --set resume=latest > "$WORK/bad.log" 2>&1 || status=$?
[ "$status" -eq 2 ] && grep -q "checksum" "$WORK/bad.log" ||
  { echo "FAIL: a damaged copy was not refused (exit $status)"; cat "$WORK/bad.log"; exit 1; }
echo "ok: a damaged copy is refused: $(grep -m1 checksum "$WORK/bad.log")"
echo PASS
