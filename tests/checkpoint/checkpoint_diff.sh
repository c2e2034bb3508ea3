#!/usr/bin/env bash
# build/bin/checkpoint_diff against an independent reading of the same files
# (tests/checkpoint/checkpoint_tensors.py):
#   1. a checkpoint against itself: every value equal, exit 0; two run directories
#      compare their latest checkpoints;
#   2. against a copy with one element of param/h.1.ln_2.bias 10 ulps away (checksum
#      rewritten, so it loads): exit 1, exactly that tensor with 1 differing element, and
#      its max |a-b| as Python computes it from the two files; every other tensor equal;
#   3. stage 01 after 2 AdamW steps against its initial weights: for every kind, the differing
#      count, max |a-b| and ||A - B|| / ||B|| the tool prints equal Python's to the 6
#      digits printed. Control: ||A - B|| / ||A|| differs from it by more than that, so
#      the printed figure is measured against B, as documented;
#   4. the fp64 run's step 0 against the fp32 run's: every value equal, exit 0 (fp32
#      widens exactly: two precisions compare), and the fp64 run's step 2 against the fp32
#      run's differs;
#   5. exit 2, naming the problem: two model shapes, a missing checkpoint, a bad --kinds,
#      one checkpoint only.
# Usage: checkpoint_diff.sh DIFF TRAIN01 PREPARE WORKDIR ROOT
set -euo pipefail
DIFF=$1 TRAIN01=$2 PREPARE=$3 WORK=$4 ROOT=$5
source "$ROOT/tests/trainer/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
run() {  # run RUN_DIR key=value...: stage 01 on the tiny model, a checkpoint every step
  local dir=$1 sets=()
  shift
  for kv in "$@"; do sets+=(--set "$kv"); done
  "$TRAIN01" $(tiny_args "$WORK/data" "$dir") --set steps=2 --set sample_tokens=0 --set val_batches=0 \
    --set val_every=0 --set checkpoint_every=1 --set keep_checkpoints=0 "${sets[@]}" > "$dir.log" 2>&1 ||
    { echo "FAIL: stage 01 $*"; tail -5 "$dir.log"; exit 1; }
}
run "$WORK/fp32"
run "$WORK/fp64" precision=fp64
run "$WORK/fp32_steps0" steps=0
run "$WORK/fp64_steps0" steps=0 precision=fp64
run "$WORK/wide" n_embd=48

failures=0
# expect NAME STATUS PATTERN ARGS...: checkpoint_diff ARGS exits STATUS, printing PATTERN.
expect() {
  local name=$1 want=$2 pattern=$3 status=0
  shift 3
  "$DIFF" "$@" > "$WORK/$name.out" 2>&1 || status=$?
  if [ "$status" = "$want" ] && grep -qE -- "$pattern" "$WORK/$name.out"; then
    echo "ok   $name: exit $status, $(grep -m1 -oE -- "$pattern" "$WORK/$name.out")"
  else
    echo "FAIL: $name: exit $status (expected $want), /$pattern/ in:"; sed 's/^/    /' "$WORK/$name.out" | head -20
    failures=$((failures + 1))
  fi
}
s0=step_00000000 s2=step_00000002
expect itself 0 "every value equal" "$WORK/fp32/$s2" "$WORK/fp32/$s2"
# A run directory stands for its latest checkpoint (step 2, not step 1).
expect run_dirs 1 "B = $WORK/fp32/$s2 " "$WORK/fp64" "$WORK/fp32"
expect precisions_step0 0 "param: [0-9]+ of [0-9]+ tensors equal; 0 of" "$WORK/fp64_steps0/$s0" "$WORK/fp32_steps0/$s0"
expect precisions_step2 1 "the checkpoints differ" "$WORK/fp64/$s2" "$WORK/fp32/$s2"
expect shapes 2 "two model shapes: n_embd is 48 in" "$WORK/wide/$s2" "$WORK/fp32/$s2"
expect missing 2 "does not exist" "$WORK/fp32/step_00000099" "$WORK/fp32/$s2"
expect bad_kind 2 "--kinds: 'grads' is not a kind" "$WORK/fp32/$s2" "$WORK/fp32/$s2" --kinds param,grads
expect one_path 2 "two checkpoints are compared, 1 given" "$WORK/fp32/$s2"

# 2. One planted element, its checksum rewritten.
cp -r "$WORK/fp32/$s2" "$WORK/planted"
/usr/bin/python3 - "$ROOT/tests/checkpoint" "$WORK/planted" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[1])
import checkpoint_tensors as ct
ckpt = sys.argv[2]
m = ct.manifest(ckpt)
row = next(r for r in m["tensors"] if r["name"] == "param/h.1.ln_2.bias")
with open(ckpt + "/param.bin", "r+b") as f:
    at = row["offset"] + 4 * 3  # element 3
    f.seek(at)
    bits = struct.unpack("<I", f.read(4))[0]
    f.seek(at)
    f.write(struct.pack("<I", bits + 10))
    f.seek(row["offset"])
    row["checksum"] = ct.fnv1a64(f.read(4 * row["shape"][0]))
json.dump(m, open(ckpt + "/manifest.json", "w"), indent=2)
PY
expect planted 1 "param: [0-9]+ of [0-9]+ tensors equal; 1 of [0-9]+ elements differ" "$WORK/planted" "$WORK/fp32/$s2"

# 2 and 3: the printed figures against Python's.
status=0
"$DIFF" "$WORK/fp32/$s2" "$WORK/fp32_steps0/$s0" > "$WORK/steps.out" || status=$?
[ $status = 1 ] || { echo "FAIL: steps 2 against 0: exit $status, expected 1"; failures=$((failures + 1)); }
/usr/bin/python3 - "$ROOT/tests/checkpoint" "$WORK" <<'PY' || failures=$((failures + 1))
import math, re, sys
sys.path.insert(0, sys.argv[1])
import checkpoint_tensors as ct
work = sys.argv[2]
bad = []

def printed(out, kind):
    m = re.search(rf"^{kind}: (\d+) of \d+ tensors equal; (\d+) of \d+ elements differ; max \|a-b\| (\S+); "
                  rf"\|\|A - B\|\| / \|\|B\|\| = (\S+)$", open(out).read(), re.M)
    if not m:
        sys.exit(f"FAIL: no summary line of {kind} in {out}")
    return int(m[2]), float(m[3]), float(m[4])

def close6(x, y):  # equal to the 6 significant digits %.6g prints
    return abs(x - y) <= 5e-6 * abs(y)

# The planted copy: its rows show only the planted tensor, with one element differing.
rows = [line.split() for line in open(work + "/planted.out") if line.startswith("  param/")]
differing = [r for r in rows if r[-3] != "0"]
a = ct.values(work + "/planted", "param")
b = ct.values(work + "/fp32/step_00000002", "param")
want = max(abs(x - y) for x, y in zip(a, b))
if ([r[0] for r in differing] != ["param/h.1.ln_2.bias"] or differing[0][-3] != "1"
        or not close6(float(differing[0][-2]), want)):
    bad.append(f"planted: rows {differing}, Python's max |a-b| {want:.6g}")
else:
    print(f"ok   planted: only param/h.1.ln_2.bias differs, 1 element, max |a-b| {want:.6g} as Python's")

for kind in ("param", "adam_m", "adam_v"):
    a = ct.values(work + "/fp32/step_00000002", kind)
    b = ct.values(work + "/fp32_steps0/step_00000000", kind)
    differ = sum(x != y for x, y in zip(a, b))
    max_abs = max(abs(x - y) for x, y in zip(a, b))
    dist = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    ref_b, ref_a = math.sqrt(sum(y * y for y in b)), math.sqrt(sum(x * x for x in a))
    rel = dist / ref_b if ref_b else (0.0 if dist == 0 else math.inf)
    got = printed(work + "/steps.out", kind)
    ok = got[0] == differ and close6(got[1], max_abs) and (close6(got[2], rel) if math.isfinite(rel) else got[2] == rel)
    print(f"{'ok  ' if ok else 'FAIL'} {kind}: printed {got}, Python's ({differ}, {max_abs:.6g}, {rel:.6g})")
    if not ok:
        bad.append(kind)
    # The control: against A's norm the figure would be another (param only: the moments
    # are zero at step 0, where ||B|| is 0 and rel infinite).
    if kind == "param" and close6(got[2], dist / ref_a):
        bad.append("control: ||A - B|| / ||A|| cannot be told from ||A - B|| / ||B|| here")
if bad:
    sys.exit("FAIL: " + "; ".join(bad))
PY
[ $failures = 0 ] || { echo "FAIL: $failures check(s)"; exit 1; }
echo PASS
