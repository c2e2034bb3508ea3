#!/usr/bin/env bash
# Every stage's validation loss is stage 01's: before any step (steps=0), on the same
# val_batches = 3 micro-batches of 2 sequences, judged against stage 01 in float64 as the
# training comparisons are (compare_runs.py: within K = 8 times the fp32 reference's own
# distance from float64, with a floor of 2 fp32 ulps of the value). The layouts:
#   - data parallelism with a share of the batches that does not divide: dp 2 and dp 4
#     take the 3 batches in rounds of dp, a rank with no batch left in the last round
#     evaluating one it must not count (stages 02 and 05, whose ZeRO-3 forward gathers
#     its weights without a backward);
#   - tensor parallelism (06 at tp 2), a pipeline (08 at pp 2 x dp 2);
#   - context parallelism, whose ranks each evaluate part of every sequence and average
#     over the cp group (10 at cp 2 zigzag and contiguous, cp 2 x dp 2; 11 at pp 2 x cp 2).
# The training comparisons cannot see these: they run without validation.
# Negative control: stage 01 over 4 batches instead of 3 (the loss a rank counting one
# batch too many would report) must fall outside the bound.
# Usage: validation_vs_01.sh S01 S02 S05 S06 S08 S10 S11 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
S01=$1 S02=$2 S05=$3 S06=$4 S08=$5 S10=$6 S11=$7 PREPARE=$8 WORK=$9 ROOT=${10} MPIEXEC=${11}
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
run() {  # run NAME BIN NP key=value...  (NP 0: one process, no launcher)
  local name=$1 bin=$2 np=$3 sets=() kv launcher=()
  shift 3
  for kv in steps=0 batch_size=24 micro_batch_size=2 val_batches=3 sample_tokens=0 "$@"; do sets+=(--set "$kv"); done
  [ "$np" = 0 ] || launcher=("$MPIEXEC" -np "$np" --oversubscribe)
  "${launcher[@]}" "$bin" $(tiny_args "$WORK/data" "$WORK/$name") "${sets[@]}" \
    > "$WORK/$name.log" 2>&1 || { echo "FAIL: run $name"; tail -20 "$WORK/$name.log"; exit 1; }
}
run truth "$S01" 0 precision=fp64
run ref "$S01" 0
run control_4_batches "$S01" 0 val_batches=4
run s02_dp2 "$S02" 2
run s02_dp4 "$S02" 4
run s05_dp2 "$S05" 2
run s06_tp2 "$S06" 2 tp=2
run s08_pp2_dp2 "$S08" 4 pp=2
run s10_cp2_zigzag "$S10" 2 cp=2 cp_split=zigzag
run s10_cp2_contiguous "$S10" 2 cp=2 cp_split=contiguous
run s10_cp2_dp2 "$S10" 4 cp=2
run s11_pp2_cp2 "$S11" 4 pp=2 cp=2

/usr/bin/python3 - "$WORK" "$ROOT" <<'PY'
import sys
work = sys.argv[1]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, f"{sys.argv[2]}/tests/stages")
from val_loss import val_loss as logged_val_loss
K, EPS32 = 8, 2.0 ** -23  # compare_runs.py's factor and fp32 epsilon
def val_loss(name):
    return logged_val_loss(f"{work}/{name}")
truth, ref = val_loss("truth"), val_loss("ref")
e_ref = abs(ref - truth)
bound = K * max(e_ref, 2 * EPS32 * abs(truth))
print(f"float64 truth {truth!r}; fp32 stage 01 {ref!r}: e_ref {e_ref:.3e}, bound {bound:.3e}")
failures = []
for name in ("s02_dp2", "s02_dp4", "s05_dp2", "s06_tp2", "s08_pp2_dp2", "s10_cp2_zigzag",
             "s10_cp2_contiguous", "s10_cp2_dp2", "s11_pp2_cp2"):
    err = abs(val_loss(name) - truth)
    ok = err <= bound
    print(f"{name:20s} error {err:.3e}  {err / bound:8.3f} of the bound  {'PASS' if ok else 'FAIL'}")
    if not ok:
        failures.append(name)
err = abs(val_loss("control_4_batches") - truth)
print(f"control: 4 batches   error {err:.3e}  {err / bound:8.3f} of the bound  "
      f"{'rejected, as it must be' if err > bound else 'ACCEPTED'}")
if err <= bound:
    failures.append("control")
if failures:
    sys.exit("FAIL: " + ", ".join(failures))
print("every stage validates as stage 01 does")
PY
