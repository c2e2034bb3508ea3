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
#      one checkpoint only, a file cut short, a manifest claiming a larger model;
#   6. --kinds param (or --kinds=param) prints param alone; -0 and +0 are equal (values compare as numbers);
#      fp64 values of 1e200 and -1e200 give max |a-b| 2e200 and rel 2, not inf or NaN.
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
mkdir -p "$WORK/no_saves" && cp "$WORK/fp32/metrics.jsonl" "$WORK/no_saves/"
expect empty_run_dir 2 "holds no checkpoint: it has no manifest.json of its own and no complete step_N" \
  "$WORK/no_saves" "$WORK/fp32/$s2"
# A step_N directory without its manifest is a damaged checkpoint, named so with a trailing
# slash too (as a shell completes it).
mkdir -p "$WORK/damaged" && cp -r "$WORK/fp32/$s2" "$WORK/damaged/" && rm "$WORK/damaged/$s2/manifest.json"
expect damaged_slash 2 "is incomplete or not a checkpoint" "$WORK/damaged/$s2/" "$WORK/fp32/$s2"
expect bad_kind 2 "--kinds: 'grads' is not a kind" "$WORK/fp32/$s2" "$WORK/fp32/$s2" --kinds param,grads
expect one_path 2 "two checkpoints are compared, 1 given" "$WORK/fp32/$s2"
# --summary: the kinds' lines and the verdict, no table (its header "tensor" absent), the same status.
expect summary 1 "the checkpoints differ" "$WORK/fp64/$s2" "$WORK/fp32/$s2" --summary
if grep -q "^  tensor " "$WORK/summary.out" || [ "$(grep -c "tensors equal" "$WORK/summary.out")" != 3 ]; then
  echo "FAIL [summary]: --summary printed a table, or not the 3 kinds' lines"; failures=$((failures + 1))
fi

# plant CKPT TENSOR ELEMENT VALUE|+ULPS: one element of param/TENSOR set (or moved by ULPS
# units in the last place), in the file's own type, and the tensor's checksum rewritten.
cat > "$WORK/plant.py" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[1])
import checkpoint_tensors as ct
ckpt, name, element, how = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
m = ct.manifest(ckpt)
row = next(r for r in m["tensors"] if r["name"] == "param/" + name)
size = ct.ELEMENT_BYTES[row["dtype"]]
value_code, bits_code = ("<f", "<I") if size == 4 else ("<d", "<Q")
with open(ckpt + "/param.bin", "r+b") as f:
    at = row["offset"] + size * element
    f.seek(at)
    raw = f.read(size)
    f.seek(at)
    if how.startswith("+"):
        f.write(struct.pack(bits_code, struct.unpack(bits_code, raw)[0] + int(how[1:])))
    else:
        f.write(struct.pack(value_code, float(how)))
    f.seek(row["offset"])
    row["checksum"] = ct.fnv1a64(f.read(size * row["shape"][0] * (row["shape"][1] if len(row["shape"]) > 1 else 1)))
json.dump(m, open(ckpt + "/manifest.json", "w"), indent=2)
PY
plant() { /usr/bin/python3 "$WORK/plant.py" "$ROOT/tests/checkpoint" "$@"; }

# 2. One element 10 ulps away.
cp -r "$WORK/fp32/$s2" "$WORK/planted"
plant "$WORK/planted" h.1.ln_2.bias 3 +10
expect planted 1 "param: [0-9]+ of [0-9]+ tensors equal; 1 of [0-9]+ elements differ" "$WORK/planted" "$WORK/fp32/$s2"
expect kinds_param 1 "param: 27 of" "$WORK/planted" "$WORK/fp32/$s2" --kinds param
expect kinds_equals 1 "param: 27 of" "$WORK/planted" "$WORK/fp32/$s2" --kinds=param
for out in kinds_param kinds_equals; do
  if grep -qE "^adam_(m|v):" "$WORK/$out.out"; then
    echo "FAIL: $out: --kinds param printed other kinds"; failures=$((failures + 1))
  fi
done

# Values compare as numbers: a bias of +0 (at step 0) stored as -0 is equal, though the
# bytes differ.
cp -r "$WORK/fp32_steps0/$s0" "$WORK/negative_zero"
plant "$WORK/negative_zero" h.0.ln_1.bias 5 -0.0
cmp -s "$WORK/negative_zero/param.bin" "$WORK/fp32_steps0/$s0/param.bin" &&
  { echo "FAIL: the -0 was not planted"; failures=$((failures + 1)); }
expect negative_zero 0 "every value equal" "$WORK/negative_zero" "$WORK/fp32_steps0/$s0"

# An fp64 checkpoint may hold values whose squares a double cannot: 1e200 against -1e200
# is a difference of 2e200, and a rel that is a number.
cp -r "$WORK/fp64/$s2" "$WORK/huge_a" && cp -r "$WORK/fp64/$s2" "$WORK/huge_b"
plant "$WORK/huge_a" wte 7 1e200
plant "$WORK/huge_b" wte 7 -1e200
expect huge 1 "param: 27 of [0-9]+ tensors equal; 1 of [0-9]+ elements differ; max \|a-b\| 2e\+200; \|\|A - B\|\| / \|\|B\|\| = 2$" \
  "$WORK/huge_a" "$WORK/huge_b"

# Damaged: a file 4 bytes short, and a manifest whose model is larger than its files.
cp -r "$WORK/fp32/$s2" "$WORK/short" && truncate -s -4 "$WORK/short/adam_v.bin"
expect short 2 "adam_v.bin holds [0-9]+ bytes, fewer than" "$WORK/short" "$WORK/fp32/$s2"
cp -r "$WORK/fp32/$s2" "$WORK/claims_more"
/usr/bin/python3 - "$WORK/claims_more/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["model"]["n_embd"] = 4096
json.dump(m, open(sys.argv[1], "w"))
PY
expect claims_more 2 "fewer than the [0-9]+ that the manifest's model" "$WORK/claims_more" "$WORK/claims_more"
expect empty_kind 2 "--kinds: an empty entry" "$WORK/fp32/$s2" "$WORK/fp32/$s2" --kinds param,

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
