#!/usr/bin/env bash
# Activation checkpointing really drops the activations: for GPipe, interleaved 1F1B and
# 1F1B on pp x cp x tp (sequence parallel), and interleaved in bf16 (2-byte activations,
# 4-byte statistics), each rank's activation bytes (the line every
# rank prints after its first step) with activation_checkpointing=full and =selective
# must be lower than with none by exactly what the block's buffers predict
# (notebooks/gptruns.py: recompute_saved_bytes, counted from common/model_block.h's
# BlockActivations): slots x layers x what a slot's block no longer keeps (full: all but
# its output; selective: ln1, ln2 and fch_gelu; with interleaved chunks the blocks' sets
# are the block pool's, as many as the rank keeps in flight), less the one working set
# the rank's chunks share.
# Each rank's activation peak is printed in bytes (its memory line), so the two agree to
# the byte; a run that ignored the key would save 0 and fail.
# Usage: recompute_memory.sh TRAIN11 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN11=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# A model whose blocks' activations are MiB, not KiB: n_embd 128, 4 sequences of 64 tokens.
model=(n_layer=4 n_embd=128 block_size=64 seq_len=64 micro_batch_size=4 batch_size=16 steps=1 val_batches=0
       sample_tokens=0)  # each run keeps its checkpoint: its manifest gives the test the config
run() {  # run NAME NP key=value...
  local name=$1 np=$2 sets=() kv
  shift 2
  for kv in "${model[@]}" "$@"; do sets+=(--set "$kv"); done
  mkdir -p "$WORK/$name"  # what the trainer prints goes to its run directory, where gptruns reads it
  "$MPIEXEC" -np "$np" --oversubscribe "$TRAIN11" $(tiny_args "$WORK/data" "$WORK/$name") "${sets[@]}" \
    > "$WORK/$name/stdout.txt" 2>&1 || { echo "FAIL: run $name"; tail -20 "$WORK/$name/stdout.txt"; exit 1; }
}
cases=("gpipe 2 pp=2 schedule=gpipe" "interleaved 2 pp=2 virtual_stages=2" \
       "1f1b_4d 8 pp=2 cp=2 tp=2 sequence_parallel=true schedule=1f1b" \
       "interleaved_bf16 2 pp=2 virtual_stages=2 precision=bf16")
# The sanitizer pass (GPT_TEST_QUICK=1) runs the 4-D case alone (47 -> 17 s of CPU there):
# both recompute modes under cp, tp and sequence parallelism together, which no other test
# of that pass runs; the pipelines' recompute without cp runs there in four_d_exact_vs_09.
if quick_run; then
  cases=("${cases[2]}")
  echo "quick run (GPT_TEST_QUICK=1): the 4-D case alone, the others left to the default pass"
fi
for c in "${cases[@]}"; do
  read -r name np keys <<< "$c"
  read -r -a kv <<< "$keys"
  for mode in none selective full; do run "$name-$mode" "$np" "${kv[@]}" activation_checkpointing=$mode; done
done
GPT_NOTEBOOK_RUNS="$WORK" /usr/bin/python3 - "$ROOT" "${cases[@]}" <<'PY'
import sys
root, cases = sys.argv[1], sys.argv[2:]
sys.path.insert(0, f"{root}/notebooks")
import gptruns  # each run's resolved config and layout (checkpoint manifest), and what it printed
def ranks(run):  # {rank: (activation bytes, slots, block pool sets)}, from the lines every pipeline rank prints
    return {r: (line["activations_bytes"], line["slots"], line["block_sets"])
            for r, line in gptruns.pipeline_report(run)["ranks"].items()}
failures = 0
for case in cases:
    name = case.split()[0]
    off_run = gptruns.Run(f"{name}-none")
    assert off_run.config["activation_checkpointing"] == "none"
    off = ranks(off_run)
    for mode in ("selective", "full"):
        on_run = gptruns.Run(f"{name}-{mode}")
        config, layout = on_run.config, on_run.layout
        assert config["activation_checkpointing"] == mode
        p, v = layout["pp"], config["virtual_stages"]
        on = ranks(on_run)
        for rank in sorted(off):
            (a_off, slots, sets), (a_on, slots_on, _) = off[rank], on[rank]
            # Stage 11's chunks share one working set per rank, and with v > 1 one block pool.
            if (sets is None) != (v == 1):
                sys.exit(f"{name} rank {rank}: block pool of {sets} sets at v = {v}")
            predicted = gptruns.recompute_saved_bytes(config, layout, slots, config["n_layer"] // (p * v), chunks=1,
                                                      block_sets=sets)
            saved = a_off - a_on
            ok = slots == slots_on and predicted > 0 and saved == predicted
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name:12s} {mode:9s} rank {rank}: {slots} slots, {a_off} -> "
                  f"{a_on} bytes, saved {saved}, predicted {predicted}")
if failures:
    sys.exit(f"FAIL: {failures} ranks")
print("both recompute modes take off every rank exactly the activations the block's buffers predict")
PY
