#!/usr/bin/env bash
# Stage 11's validation: each pipeline evaluates its cp ranks' chunks of every sequence,
# stage by stage, and averages over the cp group.
#   1. Before any step (steps=0), the validation loss has stage 10's bits on the same cp
#      and tp layout (the same ops on the same tokens, the pipeline only moves them):
#      stage 11 at pp 2 x cp 2 and at pp 2 x cp 2 x dp 2 (zero 3, 2 chunks per rank)
#      against stage 10 at cp 2; at pp 2 x cp 2 x tp 2 (sequence parallel) against stage
#      10 at cp 2 x tp 2.
#   2. Validation must not change training: stage 11 at pp 2 x cp 2 x dp 2 with zero 3
#      and activation checkpointing, validating every 3 of 6 steps, trains bit for bit
#      like the same run that never validates (compare_runs.py --exact).
# Negative controls: stage 10 with another seed must give another validation loss, and
# the run with lr 0.1% higher must be rejected by the exact comparison.
# Usage: validation.sh TRAIN10 TRAIN11 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN10=$1 TRAIN11=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
run() {  # run NAME BIN NP key=value...
  local name=$1 bin=$2 np=$3 sets=() kv
  shift 3
  for kv in n_layer=4 batch_size=8 micro_batch_size=2 sample_tokens=0 "$@"; do sets+=(--set "$kv"); done
  "$MPIEXEC" -np "$np" --oversubscribe "$bin" $(tiny_args "$WORK/data" "$WORK/$name") "${sets[@]}" \
    > "$WORK/$name.log" 2>&1 || { echo "FAIL: run $name"; tail -20 "$WORK/$name.log"; exit 1; }
}
eval0=(steps=0 val_batches=4)
run s10 "$TRAIN10" 2 "${eval0[@]}" cp=2
run s10_seed "$TRAIN10" 2 "${eval0[@]}" cp=2 seed=7
run s10_tp "$TRAIN10" 4 "${eval0[@]}" cp=2 tp=2 sequence_parallel=true
run s11 "$TRAIN11" 4 "${eval0[@]}" pp=2 cp=2
run s11_dp "$TRAIN11" 8 "${eval0[@]}" pp=2 cp=2 zero=3 virtual_stages=2
run s11_tp "$TRAIN11" 8 "${eval0[@]}" pp=2 cp=2 tp=2 sequence_parallel=true
train=(steps=6 checkpoint_every=0 pp=2 cp=2 zero=3 activation_checkpointing=full)
run noval "$TRAIN11" 8 "${train[@]}" val_batches=0 val_every=0
run val "$TRAIN11" 8 "${train[@]}" val_batches=2 val_every=3
lr=$(scaled_lr "1.001")
run val_lr "$TRAIN11" 8 "${train[@]}" val_batches=2 val_every=3 lr="$lr"

failures=0
/usr/bin/python3 - "$WORK" "$ROOT" <<'PY' || failures=$((failures + 1))
import sys
work = sys.argv[1]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, f"{sys.argv[2]}/tests/stages")
from val_loss import val_loss as logged_val_loss
def val_loss(name):
    return logged_val_loss(f"{work}/{name}")
errors = []
for cand, ref in (("s11", "s10"), ("s11_dp", "s10"), ("s11_tp", "s10_tp")):
    a, b = val_loss(cand), val_loss(ref)
    print(f"{cand:7s} {a!r} vs {ref:7s} {b!r}: {'the same bits' if a == b else 'DIFFERENT'}")
    if a != b:
        errors.append(cand)
a, b = val_loss("s10_seed"), val_loss("s10")
print(f"control: stage 10 with seed 7 {a!r} vs {b!r}: {'differs, as it must' if a != b else 'EQUAL'}")
if a == b:
    errors.append("control")
if errors:
    sys.exit("FAIL: " + ", ".join(errors))
PY
COMPARE=(/usr/bin/python3 "$ROOT/tests/stages/compare_runs.py" --exact --step 6 --reference "$WORK/noval")
echo "== validating every 3 steps against never validating"
"${COMPARE[@]}" --candidate "$WORK/val" || failures=$((failures + 1))
echo "== negative control: lr 0.1% higher must be rejected"
"${COMPARE[@]}" --candidate "$WORK/val_lr" --expect-reject || failures=$((failures + 1))
[ "$failures" = 0 ] || { echo "FAIL: $failures checks"; exit 1; }
echo "stage 11 validates as stage 10 does, and validating changes no bit of its training"
