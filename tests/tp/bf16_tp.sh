#!/usr/bin/env bash
# bf16 mode (emulated on the CPU: every activation rounded to bf16, fp32 master weights)
# of stage 06 at tp = 2, with and without sequence parallelism, against stage 01 in fp32.
#
# Tolerance: stage 01's own bf16 run differs from its fp32 run by D = the largest relative
# loss difference over the 10 steps: that is what bf16 rounding does to this model. A
# tensor-parallel bf16 run rounds the same activations (its partial sums are rounded
# before they are reduced, a few more roundings of the same size), so it must stay within
# 3 D of fp32 (2^-16 at least, should D come out 0). Negative control: the same run with
# lr 1.05x must be rejected.
# Usage: bf16_tp.sh TRAIN01 TRAIN06 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN01=$1 TRAIN06=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
run() {
  local np=$1 bin=$2 dir=$3 sets=()
  shift 3
  for kv in "$@"; do sets+=(--set "$kv"); done
  local cmd=("$bin" $(tiny_args "$WORK/data" "$dir") --set steps=10 --set sample_tokens=0 --set val_batches=0 "${sets[@]}")
  if [ "$np" = 1 ]; then "${cmd[@]}"; else "$MPIEXEC" -np "$np" --oversubscribe "${cmd[@]}"; fi > "$dir.log" 2>&1 ||
    { echo "FAIL: $bin $*"; tail -20 "$dir.log"; exit 1; }
}
run 1 "$TRAIN01" "$WORK/fp32"
run 1 "$TRAIN01" "$WORK/bf16_01" precision=bf16
run 2 "$TRAIN06" "$WORK/bf16_tp2" precision=bf16 tp=2
run 2 "$TRAIN06" "$WORK/bf16_tp2_sp" precision=bf16 tp=2 sequence_parallel=true
lr=$(/usr/bin/python3 -c "import json; print(json.load(open('$ROOT/configs/tiny.json'))['lr'] * 1.05)")
run 2 "$TRAIN06" "$WORK/neg_lr" precision=bf16 tp=2 lr="$lr"
/usr/bin/python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def losses(run):
    with open(f"{work}/{run}/metrics.jsonl") as f:
        return [r["loss"] for r in map(json.loads, filter(str.strip, f)) if r.get("kind") == "train"]
ref = losses("fp32")
def dev(run):
    got = losses(run)
    if len(got) != len(ref):
        sys.exit(f"FAIL: {run} has {len(got)} steps, fp32 {len(ref)}")
    return max(abs(a - b) / abs(b) for a, b in zip(got, ref))
D = dev("bf16_01")
tol = max(3 * D, 2.0**-16)
print(f"stage 01 bf16 vs fp32: D = {D:.3e}; tolerance {tol:.3e} relative")
bad = []
for run, must_pass in (("bf16_tp2", True), ("bf16_tp2_sp", True), ("neg_lr", False)):
    e = dev(run)
    ok = e <= tol
    print(f"  {run:12s} {e:.3e} {'within' if ok else 'beyond'} ({'as it must be' if ok == must_pass else 'WRONG'})")
    if ok != must_pass:
        bad.append(run)
if bad:
    sys.exit("FAIL: " + ", ".join(bad))
PY
