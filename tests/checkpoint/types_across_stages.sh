#!/usr/bin/env bash
# A checkpoint loads into a run that keeps its state in the other type, in any stage.
# First, the fp64 run starts where the fp32 runs start: stage 01's step-0 checkpoints
# (steps=0) in fp64 and fp32 hold the same initial weights, the fp64 ones each the fp32
# value widened (a fp64 truth that began from unrounded normals would sit half an fp32
# ulp from every run it judges before either has computed anything).
# Stage 01 in fp64 trains 2 steps with AdamW: its checkpoint holds fp64. Then each of
#   stage 01 in fp32, stage 05 (ZeRO-3, 2 ranks) and stage 06 (tp = 2, 2 ranks)
# resumes it with steps=2 into a run directory of its own: nothing is left to train, so
# the checkpoint each writes holds what it loaded. Every value of the three kinds must be
# the fp64 value rounded to the nearest float (Python's array("f") conversion), bit for
# bit: the flat shards of ZeRO and the rank-local blocks of tensor parallelism convert
# as the whole buffer does. And stage 01 in fp64 resuming stage 01's fp32 checkpoint
# must hold each value widened, bit for bit, in fp64 files.
# Controls: rounding toward zero gives another float for some value (so the comparison
# tells rounding to nearest from truncation), and the fp64 checkpoint itself is not
# equal to its rounding (so the fp32 copies could not have been written unchanged).
# Usage: types_across_stages.sh TRAIN01 TRAIN05 TRAIN06 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN01=$1 TRAIN05=$2 TRAIN06=$3 PREPARE=$4 WORK=$5 ROOT=$6 MPIEXEC=$7
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
run() {  # run NP TRAIN RUN_DIR key=value...
  local np=$1 bin=$2 dir=$3 sets=()
  shift 3
  for kv in "$@"; do sets+=(--set "$kv"); done
  local cmd=("$bin" $(tiny_args "$WORK/data" "$dir") --set steps=2 --set sample_tokens=0 --set val_batches=0
             --set val_every=0 "${sets[@]}")
  if [ "$np" = 1 ]; then "${cmd[@]}"; else "$MPIEXEC" -np "$np" --oversubscribe "${cmd[@]}"; fi > "$dir.log" 2>&1 ||
    { echo "FAIL: $bin $*"; tail -20 "$dir.log"; exit 1; }
  grep -q "resumed from" "$dir.log" || [[ " $* " != *" resume="* ]] || { echo "FAIL: $dir did not resume"; exit 1; }
}
run 1 "$TRAIN01" "$WORK/init64" precision=fp64 steps=0
run 1 "$TRAIN01" "$WORK/init32" precision=fp32 steps=0
run 1 "$TRAIN01" "$WORK/fp64" precision=fp64
run 1 "$TRAIN01" "$WORK/fp32" precision=fp32
ckpt64="$WORK/fp64/step_00000002" ckpt32="$WORK/fp32/step_00000002"
run 1 "$TRAIN01" "$WORK/s01_from64" precision=fp32 "resume=$ckpt64"
run 2 "$TRAIN05" "$WORK/s05_from64" precision=fp32 "resume=$ckpt64"
run 2 "$TRAIN06" "$WORK/s06_from64" precision=fp32 tp=2 "resume=$ckpt64"
run 1 "$TRAIN01" "$WORK/s01_from32" precision=fp64 "resume=$ckpt32"

/usr/bin/python3 - "$ROOT/tests/checkpoint" "$WORK" <<'PY'
import array, math, struct, sys
sys.path.insert(0, sys.argv[1])
import checkpoint_tensors as ct
work = sys.argv[2]
step = "/step_00000002"
bad = []

def toward_zero(x):
    """x rounded to a float toward zero: the control's other conversion."""
    f = struct.unpack("<f", struct.pack("<f", x))[0]
    if abs(f) > abs(x):
        bits = struct.unpack("<I", struct.pack("<f", f))[0] - 1
        f = struct.unpack("<f", struct.pack("<I", bits))[0]
    return f

init64 = ct.values(work + "/init64/step_00000000", "param")
init32 = ct.values(work + "/init32/step_00000000", "param")
same = init64.typecode == "d" and init64.tobytes() == array.array("d", init32).tobytes()
print(f"  init64      param   {'each value the fp32 initial one widened' if same else 'DIFFERS from the fp32 start'}")
if not same:
    bad.append("the fp64 run's initial weights")

for kind in ("param", "adam_m", "adam_v"):
    exact = ct.values(work + "/fp64" + step, kind)
    nearest = array.array("f", exact)
    if ct.dtype_of(work + "/fp64" + step, kind) != "fp64":
        bad.append(f"the fp64 run's {kind} is not fp64")
    if all(float(r) == x for r, x in zip(nearest, exact)):
        bad.append(f"control: every {kind} value of the fp64 run is a float: rounding cannot show")
    if array.array("f", map(toward_zero, exact)) == nearest:
        bad.append(f"control: no {kind} value rounds up: truncation would pass")
    for run in ("s01_from64", "s05_from64", "s06_from64"):
        got = ct.values(work + "/" + run + step, kind)
        same = got.typecode == "f" and got.tobytes() == nearest.tobytes()
        print(f"  {run:11s} {kind:7s} {'each value the fp64 one rounded to nearest' if same else 'DIFFERS'}")
        if not same:
            bad.append(f"{run} {kind}")
    widened = ct.values(work + "/s01_from32" + step, kind)
    want = array.array("d", ct.values(work + "/fp32" + step, kind))
    same = widened.typecode == "d" and widened.tobytes() == want.tobytes()
    print(f"  s01_from32  {kind:7s} {'each value the fp32 one widened, in fp64' if same else 'DIFFERS'}")
    if not same:
        bad.append(f"s01_from32 {kind}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad))
print("PASS: fp64 -> fp32 in stages 01, 05 and 06 rounds to nearest; fp32 -> fp64 widens")
PY
