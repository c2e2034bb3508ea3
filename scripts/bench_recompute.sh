#!/usr/bin/env bash
# Activation checkpointing in stage 11 on CPU ranks: for GPipe, 1F1B, interleaved 1F1B
# and ZB-H1 (which refuses full recompute) at pp = 2, the activation bytes each rank holds (the line every rank prints after its
# first step: its model chunks' activation slots and scratch) and the time of a
# step, with activation_checkpointing none, selective and full; and the memory a block's
# activations take against what each mode keeps, from the model's shapes.
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
       --set warmup_steps=1 --set pp=2)  # each run keeps its checkpoint: its manifest gives the shapes below
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
  for mode in none selective full; do
    run "$schedule-$mode" schedule=$schedule virtual_stages=$v activation_checkpointing=$mode
  done
done
for mode in none selective; do run "zb-h1-$mode" schedule=zb-h1 activation_checkpointing=$mode; done
GPT_NOTEBOOK_RUNS="$work" /usr/bin/python3 - "$work" "$GPT_ROOT" <<'PY'
import json, re, sys
work = sys.argv[1]
sys.path.insert(0, f"{sys.argv[2]}/notebooks")
import gptruns
def ranks(name):  # per rank: (micro-batches in flight, activations MiB)
    out = {}
    for line in open(f"{work}/{name}.log"):
        m = re.match(r"rank (\d+) \(pipeline rank \d+ of \d+\): (?:micro-batches|chunk activations) in flight (\d+)"
                     r".*activations ([0-9.]+) MiB", line)
        if m:
            out[int(m.group(1))] = (int(m.group(2)), float(m.group(3)))
    return out
def bubble(name):  # the mean measured bubble the run prints, in %
    for line in open(f"{work}/{name}.log"):
        m = re.search(r"pipeline bubble .*\| mean ([0-9.]+)%", line)
        if m:
            return float(m.group(1))
    return float("nan")
def step_ms(name):
    with open(f"{work}/{name}/metrics.jsonl") as f:
        rows = [json.loads(l) for l in f if l.strip()]
    ms = [r["ms"] for r in rows if r.get("kind") == "train"][1:]
    return sum(ms) / len(ms)
run = gptruns.Run("gpipe-none")  # the model's shape, from the run's checkpoint manifest
block, output, cheap = gptruns.block_activation_bytes(run.config, run.layout)
print(f"one block, one micro-batch: {block / 2**20:.2f} MiB of activations; full recompute keeps {output / 2**20:.2f} MiB "
      f"({output / block:.3f}), selective {(block - cheap) / 2**20:.2f} MiB ({(block - cheap) / block:.3f})")
print(f"{'schedule':12s} {'rank':>4s} {'in flight':>9s} {'act. MiB none':>13s} {'selective':>9s} {'full':>8s} "
      f"{'step ms none':>12s} {'selective':>9s} {'full':>8s}")
for schedule in ("gpipe", "1f1b", "interleaved", "zb-h1"):
    modes = ("none", "selective") if schedule == "zb-h1" else ("none", "selective", "full")  # zb-h1 refuses full
    mib = {mode: ranks(f"{schedule}-{mode}") for mode in modes}
    ms = {mode: step_ms(f"{schedule}-{mode}") for mode in modes}
    full_mib = lambda r: f"{mib['full'][r][1]:8.2f}" if "full" in mib else f"{'-':>8s}"
    full_ms = f"{ms['full']:8.1f}" if "full" in ms else f"{'-':>8s}"
    for r in sorted(mib["none"]):
        base, t = mib["none"][r][1], ms["none"]
        print(f"{schedule:12s} {r:4d} {mib['none'][r][0]:9d} {base:13.2f} {mib['selective'][r][1]:9.2f} "
              f"{full_mib(r)} {t:12.1f} {ms['selective']:9.1f} {full_ms}")
    shares = [f"memory selective {mib['selective'][0][1] / mib['none'][0][1]:.3f}"]
    if "full" in mib:
        shares.append(f"full {mib['full'][0][1] / mib['none'][0][1]:.3f}")
    shares.append(f"step time selective {ms['selective'] / ms['none']:.3f}")
    if "full" in ms:
        shares.append(f"full {ms['full'] / ms['none']:.3f}")
    bubbles = ", ".join(f"{mode} {bubble(f'{schedule}-{mode}'):.1f}%" for mode in modes)
    print(f"{'':12s} shares of none on rank 0: {', '.join(shares)}; mean bubble {bubbles}")
PY
exit
}
