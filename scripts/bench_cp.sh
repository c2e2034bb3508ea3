#!/usr/bin/env bash
# Stage 10 at cp = 4, T = 1024 on CPU ranks: the attention time of each rank with the
# zigzag split against the contiguous one (scripts/bench_cp.py: slowest rank, mean,
# imbalance), the split's own work balance (visible query-key pairs per rank), and the
# activation memory per rank at cp = 4 against cp = 1 (the memory ledger).
#
#   scripts/bench_cp.sh            (uses build/, GPT_BUILD_DIR overrides; data/fortunes)
#
# Model: 4 layers, n_embd 64, 4 heads, block_size 1024, one sequence of 1024 tokens per
# step, 8 steps (the first is left out of the timing).
set -euo pipefail
# One block, read whole before it runs (as bench_pipeline.sh): bash reads a plain script as it
# goes, so an edit to this file during a run would otherwise run a mix of old and new text.
{
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
takes_no_arguments "$@"
cd "$GPT_ROOT"
train="$(abs_dir "$GPT_BUILD_DIR")/stages/10_context_parallel/train"
require_built_and_fortunes "$train"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--set n_layer=4 --set n_embd=64 --set n_head=4 --set block_size=1024 --set seq_len=1024 --set batch_size=1
       --set micro_batch_size=1 --set steps=8 --set val_batches=0 --set sample_tokens=0 --set checkpoint_at_end=false
       --set warmup_steps=1 --set device=cpu)
run() {  # run NAME NP key=value...
  local name=$1 np=$2 sets=()
  shift 2
  for kv in "$@"; do sets+=(--set "$kv"); done
  mpirun -np "$np" --oversubscribe "$train" --config configs/small.json "${model[@]}" "${sets[@]}" \
    --set run_dir="$work/$name" --set trace_file="$work/$name/trace" > "$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; die "run $name failed"; }
}
run cp1 1 cp=1
run zigzag 4 cp=4 cp_split=zigzag
run contiguous 4 cp=4 cp_split=contiguous
for split in zigzag contiguous; do
  grep -m1 "attention work" "$work/$split.log" | sed "s/^/$split: /"
  /usr/bin/python3 scripts/bench_cp.py "$split" "$work/$split"/trace.rank*.json
done
GPT_NOTEBOOK_RUNS="$work" /usr/bin/python3 - "$GPT_ROOT/notebooks" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import gptruns  # the run reader the notebooks use: rank 0's memory ledger, from its last train line
a1, a4 = gptruns.Run("cp1").mem()["activations"], gptruns.Run("zigzag").mem()["activations"]
print(f"activations per rank: cp=1 {a1} bytes, cp=4 {a4} bytes: {a4 / a1:.3f} of cp=1's (target at most 0.3)")
PY
exit
}
