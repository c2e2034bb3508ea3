#!/usr/bin/env bash
# A resume may change batch_size: the checkpoint records its data position as the
# training sequences its steps consumed (data_position.sequences), and the resumed run
# reads on from there, whatever its batch.
#
# Stage 01 trains 3 steps of 8 sequences (sequences 0..23) and saves. A step's logged loss
# is its forward's, on the weights before its update: for step 4, the checkpoint's. So:
#   R8a: batches of 8 from the checkpoint: step 4's loss l_a over sequences 24..31;
#   R8b: the same from a copy of the checkpoint that says 32 sequences: l_b over 32..39;
#   R16: batches of 16 (two micro-batches of 8) from the checkpoint: sequences 24..39,
#        its loss the mean of its micro-batches', l_a / 2 + l_b / 2, bit for bit (the same
#        micro-batches on the same weights, each computed as in R8a and R8b); its
#        checkpoint records 24 + 16 = 40 sequences.
# Negative control: R16 from a copy that says 48 sequences (step x the new batch, the
# position a step count would give) must not give that loss.
# The checkpoints record the training tokens; a resume on fewer of them says so (the
# sequences come in another order), the resumes on the same data do not.
# Then each later stage given (NP:TRAIN[:key=value...]) resumes the same checkpoint with
# batches of 16 on its layout and trains steps 4 and 5, as R16 does, and stage 01 does in
# float64 (precision=fp64, from the same fp32 checkpoint: the truth). compare_runs.py
# holds every stage's losses, gradient norms, and step-5 weights and AdamW moments to
# the bound it derives from R16's own distance from that truth (a layout regroups fp32
# sums, and makes rounding errors of R16's size). Step 4 is the checkpoint's weights on
# the sequences the position names; step 5 follows step 4's update, so it sees the
# optimizer state the stage resumed (moments and step count: a step count restarted at
# the resume makes that update about a third larger). The gradient norm is the check a
# wrong batch division fails: the runs clip at 1.0 (grad_clip's default) and the norms
# here are about 1.4, so a gradient twice too large is clipped to the same update and
# AdamW's losses and weights cannot tell (the control R16 with test_grad_scale=2 is
# rejected by its norms).
# AdamW also hides a gradient off by a constant in its step: so the same resume is made
# under SGD (a chain of its own, optimizer=sgd with grad_clip=0 from the first step, as
# a resume cannot change the optimizer) for one step, step 4's weights compared.
# Controls, each rejected: R16 at lr 1.001x; R16 with every gradient 2x; the SGD step at
# lr 1.01x.
#
# With GPT_TEST_QUICK=1 (the sanitizer pass of scripts/test.sh) the SGD chain and the
# controls, which run the same code again, are left to the default pass.
#
# Usage: resume_batch_change.sh TRAIN01 PREPARE WORKDIR ROOT MPIEXEC [NP:TRAIN[:key=value...]...]
set -euo pipefail
TRAIN01=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
shift 5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

# run NP BIN DIR key=value...: the tiny model on NP ranks (1: no launcher).
run() {
  local np=$1 bin=$2 dir=$3 sets=() kv
  shift 3
  for kv in "$@"; do sets+=(--set "$kv"); done
  local cmd=("$bin" $(tiny_args "$WORK/data" "$dir") --set sample_tokens=0 --set val_batches=0 "${sets[@]}")
  if [ "$np" = 1 ]; then "${cmd[@]}"; else "$MPIEXEC" -np "$np" --oversubscribe "${cmd[@]}"; fi > "$dir.log" 2>&1 ||
    { echo "FAIL: $bin $*"; tail -20 "$dir.log"; exit 1; }
}
ckpt="$WORK/first/step_00000003"
run 1 "$TRAIN01" "$WORK/first" steps=3 batch_size=8 micro_batch_size=8
# said_at SEQUENCES: a copy of the checkpoint whose data position says SEQUENCES.
said_at() {
  rm -rf "$WORK/at_$1" && cp -r "$ckpt" "$WORK/at_$1"
  /usr/bin/python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
m["data_position"]["sequences"] = int(sys.argv[2])
open(sys.argv[1], "w").write(json.dumps(m))' "$WORK/at_$1/manifest.json" "$1"
}
said_at 32
said_at 48
run 1 "$TRAIN01" "$WORK/r8a" "resume=$ckpt" steps=4 batch_size=8 micro_batch_size=8
run 1 "$TRAIN01" "$WORK/r8b" "resume=$WORK/at_32" steps=4 batch_size=8 micro_batch_size=8
run 1 "$TRAIN01" "$WORK/r16" "resume=$ckpt" steps=5 batch_size=16 micro_batch_size=8
run 1 "$TRAIN01" "$WORK/r16_64" "resume=$ckpt" steps=5 batch_size=16 micro_batch_size=8 precision=fp64
# The SGD chain: 3 steps of 8 sequences, then one resumed step of 16.
SGD=(optimizer=sgd grad_clip=0)
sgd_ckpt="$WORK/first_sgd/step_00000003"
if ! quick_run; then
  run 1 "$TRAIN01" "$WORK/r16_lr" "resume=$ckpt" steps=5 batch_size=16 micro_batch_size=8 lr="$(scaled_lr 1.001)"
  run 1 "$TRAIN01" "$WORK/r16_grad2" "resume=$ckpt" steps=5 batch_size=16 micro_batch_size=8 test_grad_scale=2
  run 1 "$TRAIN01" "$WORK/first_sgd" steps=3 batch_size=8 micro_batch_size=8 "${SGD[@]}"
  run 1 "$TRAIN01" "$WORK/s16" "resume=$sgd_ckpt" steps=4 batch_size=16 micro_batch_size=8 "${SGD[@]}"
  run 1 "$TRAIN01" "$WORK/s16_64" "resume=$sgd_ckpt" steps=4 batch_size=16 micro_batch_size=8 "${SGD[@]}" \
    precision=fp64
  run 1 "$TRAIN01" "$WORK/s16_lr" "resume=$sgd_ckpt" steps=4 batch_size=16 micro_batch_size=8 "${SGD[@]}" \
    lr="$(scaled_lr 1.01)"
fi
run 1 "$TRAIN01" "$WORK/neg48" "resume=$WORK/at_48" steps=4 batch_size=16 micro_batch_size=8
# Other training data (the same shard less its last 100 tokens): the shuffled order of
# the sequences depends on their count, so the resumed run says it reads another order.
/usr/bin/python3 -c 'import struct, sys
data = open(sys.argv[1], "rb").read()
header = list(struct.unpack("<256i", data[:1024]))
header[2] -= 100
open(sys.argv[2], "wb").write(struct.pack("<256i", *header) + data[1024:1024 + 2 * header[2]])' \
  "$WORK/data/train.bin" "$WORK/fewer.bin"
run 1 "$TRAIN01" "$WORK/fewer" "resume=$ckpt" steps=4 batch_size=8 micro_batch_size=8 "train_data=$WORK/fewer.bin"
later=() later_sgd=()
for spec in "$@"; do
  IFS=: read -r np bin rest <<< "$spec"
  keys=()
  [ -n "${rest:-}" ] && IFS=: read -r -a keys <<< "$rest"
  dir="$WORK/later_${#later[@]}_$(basename "$(dirname "$bin")")"
  run "$np" "$bin" "$dir" "resume=$ckpt" steps=5 batch_size=16 micro_batch_size=8 "${keys[@]}"
  quick_run ||
    run "$np" "$bin" "${dir}_sgd" "resume=$sgd_ckpt" steps=4 batch_size=16 micro_batch_size=8 "${keys[@]}" "${SGD[@]}"
  later+=("$dir") later_sgd+=("${dir}_sgd")
done

/usr/bin/python3 - "$WORK" "${later[@]}" <<'PY'
import json, os, sys
work, later = sys.argv[1], sys.argv[2:]
def train(run):
    with open(f"{run}/metrics.jsonl") as f:
        return {r["step"]: r["loss"] for r in map(json.loads, filter(str.strip, f)) if r.get("kind") == "train"}
def position(run, step):
    with open(f"{run}/step_{step:08d}/manifest.json") as f:
        return json.load(f)["data_position"]
def sequences(run, step):
    return position(run, step)["sequences"]
bad = []
def expect(what, ok):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        bad.append(what)
r8a, r8b, r16, neg = (train(f"{work}/{run}") for run in ("r8a", "r8b", "r16", "neg48"))
expect(f"each resumed run trained step 4 alone, R16 steps 4 and 5: {sorted(r8a)}, {sorted(r8b)}, {sorted(neg)}, "
       f"{sorted(r16)}", all(sorted(r) == [4] for r in (r8a, r8b, neg)) and sorted(r16) == [4, 5])
want = r8a[4] / 2 + r8b[4] / 2
expect(f"R16's loss {r16[4]!r} is l_a / 2 + l_b / 2 = {want!r}, bit for bit", r16[4] == want)
expect(f"the control, from sequence 48: {neg[4]!r}, not {want!r} ({abs(neg[4] - want) / want:.1e} off)",
       neg[4] != want)
recorded = (sequences(f"{work}/first", 3), sequences(f"{work}/r8a", 4), sequences(f"{work}/r8b", 4),
            sequences(f"{work}/r16", 5))
expect(f"the checkpoints record 24 sequences at step 3; R8a 32, R8b 40 at step 4; R16 56 at step 5: {recorded}",
       recorded == (24, 32, 40, 56))
with open(f"{work}/data/train.bin", "rb") as f:
    tokens = int.from_bytes(f.read(12)[8:], "little")  # the header's count
recorded = (position(f"{work}/first", 3).get("train_tokens"), position(f"{work}/fewer", 4).get("train_tokens"))
expect(f"the checkpoints record the training tokens they were cut from: {recorded}, want {(tokens, tokens - 100)}",
       recorded == (tokens, tokens - 100))
note = f"train_data '{work}/fewer.bin' holds {tokens - 100} tokens, but the checkpoint was trained on {tokens}"
said = [run for run in ("fewer", "r8a", "r16")
        if "tokens, but the checkpoint was trained on" in open(f"{work}/{run}.log").read()]
expect(f"only the resume on other data says it reads another order: {said}", said == ["fewer"] and
       note in open(f"{work}/fewer.log").read())
for run in later:
    expect(f"{os.path.basename(run)}: {sequences(run, 5)} sequences recorded at step 5", sequences(run, 5) == 56)
if bad:
    sys.exit(f"FAIL: {len(bad)} checks")
PY

COMPARE=(/usr/bin/python3 "$ROOT/tests/stages/compare_runs.py")
status=0
echo "== AdamW: every stage's steps 4 and 5 against R16, the bound from R16's distance to float64"
"${COMPARE[@]}" --step 5 --truth "$WORK/r16_64" --reference "$WORK/r16" --candidate "${later[@]}" || status=1
if quick_run; then
  [ "$status" = 0 ] || { echo "FAIL: the comparison above"; exit 1; }
  echo "quick run (GPT_TEST_QUICK=1): the SGD chain and the controls are left to the default pass"
  exit 0
fi
echo "== SGD: every stage's step 4 weights against R16's"
"${COMPARE[@]}" --step 4 --kinds param --truth "$WORK/s16_64" --reference "$WORK/s16" --candidate "${later_sgd[@]}" ||
  status=1
echo "== controls: R16 at lr 1.001x, R16 with every gradient 2x, the SGD step at lr 1.01x, each rejected"
"${COMPARE[@]}" --expect-reject --step 5 --truth "$WORK/r16_64" --reference "$WORK/r16" --candidate "$WORK/r16_lr" ||
  status=1
"${COMPARE[@]}" --expect-reject --step 5 --truth "$WORK/r16_64" --reference "$WORK/r16" \
  --candidate "$WORK/r16_grad2" || status=1
"${COMPARE[@]}" --expect-reject --weights-only --step 4 --kinds param --truth "$WORK/s16_64" --reference "$WORK/s16" \
  --candidate "$WORK/s16_lr" || status=1
[ "$status" = 0 ] || { echo "FAIL: a comparison or a control above"; exit 1; }
echo "a resume with another batch_size reads on where the checkpoint stopped"
