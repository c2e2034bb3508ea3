#!/usr/bin/env bash
# Activation checkpointing in stage 11 on CPU ranks: for GPipe, 1F1B, interleaved 1F1B
# and ZB-H1 (which refuses full recompute) at pp = 2, the activation bytes each rank holds (the line every rank prints after its
# first step: its model chunks' activation slots and scratch) and the time of a
# step, with activation_checkpointing none, selective and full; and the memory a block's
# activations take against what each mode keeps, from the model's shapes. The table is
# scripts/bench_recompute.py's, on the run reader of notebooks/gptruns.py.
#
#   scripts/bench_recompute.sh     (uses build/, GPT_BUILD_DIR overrides; data/fortunes)
#
# Model: 8 layers, n_embd 256, 8 heads, seq_len 256; 8 micro-batches of 4 sequences a
# step, 6 steps (the first is left out of the timing). 2 ranks on 2 cores.
set -euo pipefail
# One block, read whole before it runs (as bench_pipeline.sh): bash reads a plain script as it
# goes, so an edit to this file during a run would otherwise run a mix of old and new text.
{
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
takes_no_arguments "$@"
cd "$GPT_ROOT"
train="$(abs_dir "$GPT_BUILD_DIR")/stages/11_4d/train"
require_built_and_fortunes "$train"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--set n_layer=8 --set n_embd=256 --set n_head=8 --set block_size=256 --set seq_len=256 --set batch_size=32
       --set micro_batch_size=4 --set steps=6 --set val_batches=0 --set sample_tokens=0
       --set warmup_steps=1 --set pp=2 --set device=cpu)  # each run keeps its checkpoint: its manifest gives the shapes below
run() {  # run NAME key=value...
  local name=$1 sets=()
  shift
  for kv in "$@"; do sets+=(--set "$kv"); done
  mkdir -p "$work/$name"  # the run directory, with what the trainer printed in stdout.txt (as notebooks/ reads it)
  mpirun -np 2 --oversubscribe "$train" --config configs/small.json "${model[@]}" "${sets[@]}" \
    --set run_dir="$work/$name" > "$work/$name/stdout.txt" 2>&1 ||
    { tail -20 "$work/$name/stdout.txt"; die "run $name failed"; }
}
for schedule in gpipe 1f1b interleaved; do
  v=1
  [ "$schedule" = interleaved ] && v=2
  for mode in none selective full; do
    run "$schedule-$mode" schedule=$schedule virtual_stages=$v activation_checkpointing=$mode
  done
done
for mode in none selective; do run "zb-h1-$mode" schedule=zb-h1 activation_checkpointing=$mode; done
/usr/bin/python3 scripts/bench_recompute.py "$work"  # the table, from the runs
exit
}
