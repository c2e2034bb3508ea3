#!/usr/bin/env bash
# Resume is exact: 10 steps straight, against 5 steps + checkpoint + resume + 5 steps,
# on CPU fp32, give identical per-step losses and identical parameters and AdamW
# moments, bit for bit (the checkpoint files are compared byte by byte).
# KEYS=precision=fp64: the state is kept in fp64 files (every row's dtype is checked),
# and a second control resumes from a copy of the checkpoint rounded to fp32: it must
# differ, or the comparison could not see a state that lost its low bits on the way.
# No one-step SGD variant: it would guard against a gradient off by a constant factor,
# which AdamW's update hides, but the moments compared bit for bit here would show it.
# Usage: resume_bitwise.sh TRAIN PREPARE WORKDIR ROOT
#   LAUNCH="mpirun -np 2 --oversubscribe" in the environment runs a multi-rank stage;
#   KEYS="key=value ..." adds its layout keys (applied after the defaults above).
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
read -r -a launch <<< "${LAUNCH:-}"
TRAIN_CMD=("${launch[@]}" "$TRAIN")
source "$(dirname "$0")/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
D="$WORK/data"
common=(--set steps=10 --set val_every=0 --set sample_tokens=0 --set precision=fp32)
for kv in ${KEYS:-}; do common+=(--set "$kv"); done

# A: 10 steps in one go, writing a checkpoint at step 5 and at the end (all kept).
"${TRAIN_CMD[@]}" $(tiny_args "$D" "$WORK/straight") "${common[@]}" --set checkpoint_every=5 \
  --set keep_checkpoints=0 > "$WORK/straight.log"
# B: a new process and run directory that starts from A's step-5 checkpoint (only that
# directory is copied over) and trains steps 6-10 — with 2 threads where A had 1: the
# kernels reduce in an order independent of the thread count, so that changes no bit.
mkdir -p "$WORK/split"
cp -r "$WORK/straight/step_00000005" "$WORK/split/"
"${TRAIN_CMD[@]}" $(tiny_args "$D" "$WORK/split") "${common[@]}" --set resume=latest --set threads=2 > "$WORK/resumed.log"

grep -q "resumed from" "$WORK/resumed.log" || { echo "FAIL: the second half did not resume"; exit 1; }
dtype=fp32
[[ " ${KEYS:-} " == *" precision=fp64 "* ]] && dtype=fp64
/usr/bin/python3 - "$WORK/straight/step_00000005/manifest.json" "$dtype" <<'PY' || exit 1
import json, sys
types = {row["dtype"] for row in json.load(open(sys.argv[1]))["tensors"]}
if types != {sys.argv[2]}:
    sys.exit(f"FAIL: the checkpoint's tensors are {sorted(types)}, not all {sys.argv[2]}")
print(f"ok: every tensor of the checkpoint is {sys.argv[2]}")
PY
losses() { grep '"kind":"train"' "$1" | sed -E 's/.*"loss":([^,]*),.*"step":([0-9]+).*/\2 \1/' | sort -n; }
losses "$WORK/straight/metrics.jsonl" | awk '$1 > 5' > "$WORK/a.txt"
losses "$WORK/split/metrics.jsonl" > "$WORK/b.txt"
[ "$(wc -l < "$WORK/b.txt")" -eq 5 ] || { echo "FAIL: the resumed run logged $(wc -l < "$WORK/b.txt") steps, expected 5"; exit 1; }
if ! diff "$WORK/a.txt" "$WORK/b.txt"; then echo "FAIL: losses of steps 6-10 differ"; exit 1; fi
for f in param.bin adam_m.bin adam_v.bin; do
  cmp "$WORK/straight/step_00000010/$f" "$WORK/split/step_00000010/$f" ||
    { echo "FAIL: $f differs after resume"; exit 1; }
done
# Negative control: the same resume with the learning rate 1e-6 larger (a few float ulps:
# the update runs in float) must differ, in the losses or in the final tensors, or the comparison above could not see a
# resume that drifts.
mkdir -p "$WORK/control"
cp -r "$WORK/straight/step_00000005" "$WORK/control/"
lr=$(scaled_lr "(1 + 1e-6)")
"${TRAIN_CMD[@]}" $(tiny_args "$D" "$WORK/control") "${common[@]}" --set resume=latest --set "lr=$lr" > "$WORK/control.log"
losses "$WORK/control/metrics.jsonl" > "$WORK/c.txt"
if diff -q "$WORK/a.txt" "$WORK/c.txt" > /dev/null && cmp -s "$WORK/straight/step_00000010/param.bin" "$WORK/control/step_00000010/param.bin"; then
  echo "FAIL: negative control: a resume with lr 1e-6 larger gives the same losses and weights"; exit 1
fi
echo "ok: negative control: a resume with lr 1e-6 larger differs"
if [ "$dtype" = fp64 ]; then
  mkdir -p "$WORK/rounded"
  /usr/bin/python3 - "$ROOT/tests/checkpoint" "$WORK/straight/step_00000005" "$WORK/rounded/step_00000005" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import checkpoint_tensors
checkpoint_tensors.write_fp32_copy(sys.argv[2], sys.argv[3])
PY
  "${TRAIN_CMD[@]}" $(tiny_args "$D" "$WORK/rounded") "${common[@]}" --set resume=latest > "$WORK/rounded.log"
  losses "$WORK/rounded/metrics.jsonl" > "$WORK/r.txt"
  if diff -q "$WORK/a.txt" "$WORK/r.txt" > /dev/null ||
     cmp -s "$WORK/straight/step_00000010/param.bin" "$WORK/rounded/step_00000010/param.bin"; then
    echo "FAIL: negative control: a resume from the checkpoint rounded to fp32 gives the same losses or weights"
    exit 1
  fi
  echo "ok: negative control: a resume from the checkpoint rounded to fp32 differs, in the losses and the weights"
fi
echo "PASS: steps 6-10 and final parameters and moments are identical after resume"
cat "$WORK/a.txt"
