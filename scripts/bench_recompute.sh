#!/usr/bin/env bash
# Activation checkpointing in stage 11 on CPU ranks: for GPipe, 1F1B and interleaved 1F1B
# at pp = 2, the activation bytes each rank holds (the line every rank prints after its
# first step: its model chunks' activation slots and scratch) and the time of a
# step, with activation_checkpointing off and on; and the memory a block's activations
# take against the one rows x C output recompute keeps, from the model's shapes.
#
#   scripts/bench_recompute.sh     (uses build/, GPT_BUILD_DIR overrides; data/fortunes)
#
# Model: 8 layers, n_embd 256, 8 heads, seq_len 256; 8 micro-batches of 4 sequences a
# step, 6 steps (the first is left out of the timing). 2 ranks on 2 cores.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$GPT_ROOT"
train="$(abs_dir "$GPT_BUILD_DIR")/stages/11_4d/train"
[[ -x "$train" ]] || die "$train is missing: build first"
[[ -f data/fortunes/train.bin ]] || die "data/fortunes is missing: datasets/prepare_fortunes.sh data/fortunes build/bin/prepare"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--set n_layer=8 --set n_embd=256 --set n_head=8 --set block_size=256 --set seq_len=256 --set batch_size=32
       --set micro_batch_size=4 --set steps=6 --set val_batches=0 --set sample_tokens=0 --set checkpoint_at_end=false
       --set warmup_steps=1 --set pp=2)
run() {  # run NAME key=value...
  local name=$1 sets=()
  shift
  for kv in "$@"; do sets+=(--set "$kv"); done
  mpirun -np 2 --oversubscribe "$train" --config configs/small.json "${model[@]}" "${sets[@]}" \
    --set run_dir="$work/$name" > "$work/$name.log" 2>&1 || { tail -20 "$work/$name.log"; die "run $name failed"; }
}
for schedule in gpipe 1f1b interleaved; do
  v=1
  [ "$schedule" = interleaved ] && v=2
  for ac in false true; do
    run "$schedule-$ac" schedule=$schedule virtual_stages=$v activation_checkpointing=$ac
  done
done
/usr/bin/python3 - "$work" "$GPT_ROOT" <<'PY'
import json, re, sys
work = sys.argv[1]
sys.path.insert(0, f"{sys.argv[2]}/notebooks")
import gptruns
def ranks(name):  # per rank: (micro-batches in flight, activations MiB)
    out = {}
    for line in open(f"{work}/{name}.log"):
        m = re.match(r"rank (\d+) \(stage \d+ of \d+\): micro-batches in flight (\d+).*activations ([0-9.]+) MiB", line)
        if m:
            out[int(m.group(1))] = (int(m.group(2)), float(m.group(3)))
    return out
def step_ms(name):
    with open(f"{work}/{name}/metrics.jsonl") as f:
        rows = [json.loads(l) for l in f if l.strip()]
    ms = [r["ms"] for r in rows if r.get("kind") == "train"][1:]
    return sum(ms) / len(ms)
block, kept = gptruns.block_activation_bytes({"n_embd": 256, "n_head": 8, "micro_batch_size": 4, "seq_len": 256}, {})
print(f"one block, one micro-batch: {block / 2**20:.2f} MiB of activations; recompute keeps {kept / 2**20:.2f} MiB "
      f"({kept / block:.3f})")
print(f"{'schedule':12s} {'rank':>4s} {'in flight':>9s} {'act. MiB off':>12s} {'on':>8s} {'on/off':>7s} "
      f"{'step ms off':>11s} {'on':>8s} {'on/off':>7s}")
for schedule in ("gpipe", "1f1b", "interleaved"):
    off, on = ranks(f"{schedule}-false"), ranks(f"{schedule}-true")
    t_off, t_on = step_ms(f"{schedule}-false"), step_ms(f"{schedule}-true")
    for r in sorted(off):
        print(f"{schedule:12s} {r:4d} {off[r][0]:9d} {off[r][1]:12.2f} {on[r][1]:8.2f} {on[r][1] / off[r][1]:7.3f} "
              f"{t_off:11.1f} {t_on:8.1f} {t_on / t_off:7.3f}")
PY
