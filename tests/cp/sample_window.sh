#!/usr/bin/env bash
# Stage 10 samples with the whole sequence as its window, as stage 01 does: from the same
# checkpoint (steps=0: no training, so both hold the same weights bit for bit), the
# lead rank's sample, drawn on one device from the gathered whole model, must be the
# same text, byte for byte, at cp = 2 (zigzag and contiguous splits) as in stage 01.
# The sample (64 tokens) is longer than seq_len / cp (16), so a sampler given the rank's
# part of the sequence as its window conditions on fewer tokens and writes another text.
# Control: stage 01 sampling with a window of 16 (seq_len=16) must write another text
# than with 32, or the comparison could not see the window.
# Usage: sample_window.sh TRAIN01 TRAIN10 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN01=$1 TRAIN10=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
D="$WORK/data"
quiet=(--set val_batches=0 --set val_every=0)
# 40 steps give a model whose next-token distribution depends on its context.
"$TRAIN01" $(tiny_args "$D" "$WORK/trained") "${quiet[@]}" --set steps=40 --set sample_tokens=0 > "$WORK/trained.log"
ckpt="$WORK/trained/step_00000040"
sample=(--set steps=0 --set sample_tokens=64 --set "resume=$ckpt" --set checkpoint_at_end=false)
text() { sed -n '/^---- sample/,/^----$/p' "$1"; }

"$TRAIN01" $(tiny_args "$D" "$WORK/s01") "${quiet[@]}" "${sample[@]}" > "$WORK/s01.log"
text "$WORK/s01.log" > "$WORK/s01.txt"
[ "$(wc -l < "$WORK/s01.txt")" -ge 3 ] || { echo "FAIL: stage 01 printed no sample"; cat "$WORK/s01.log"; exit 1; }
"$TRAIN01" $(tiny_args "$D" "$WORK/s01_short") "${quiet[@]}" "${sample[@]}" --set seq_len=16 > "$WORK/s01_short.log"
text "$WORK/s01_short.log" > "$WORK/s01_short.txt"
! cmp -s "$WORK/s01.txt" "$WORK/s01_short.txt" ||
  { echo "FAIL: control: a window of 16 samples the same text as 32, so the comparison cannot see the window"; exit 1; }
echo "ok: control: a window of 16 writes another text"
for split in zigzag contiguous; do
  "$MPIEXEC" -np 2 --oversubscribe "$TRAIN10" $(tiny_args "$D" "$WORK/s10_$split") "${quiet[@]}" "${sample[@]}" \
    --set cp=2 --set "cp_split=$split" > "$WORK/s10_$split.log" 2>&1
  text "$WORK/s10_$split.log" > "$WORK/s10_$split.txt"
  cmp -s "$WORK/s01.txt" "$WORK/s10_$split.txt" ||
    { echo "FAIL: stage 10 ($split) samples another text than stage 01 from the same weights"; diff "$WORK/s01.txt" "$WORK/s10_$split.txt"; exit 1; }
  echo "ok: cp=2 $split: the same sample as stage 01"
done
echo "PASS"
