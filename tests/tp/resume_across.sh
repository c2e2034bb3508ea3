#!/usr/bin/env bash
# Checkpoints cross between layouts: a checkpoint of stage 01 (one writer) and one of
# stage 03 (dp = 2 shards) resume in a later stage on LATER_NP ranks (stage 06 at tp = 2,
# stage 10 at cp = 2: the key=value arguments), and the later stage's resumes in stage 03
# and in stage 01 (one process reading every shard's tensors whole); each resumed run
# continues the uninterrupted run of its own stage.
#
# Tolerance: two uninterrupted runs of different layouts (stage S, the checkpoint's writer,
# and stage R, which resumes it) differ only by rounding, by d = max over steps of
# |loss_S - loss_R| / loss_R. A resumed run differs from R's uninterrupted run only because
# its first 3 steps were rounded S's way, so its losses at steps 4-6 must lie within
# max(4 d, 2 eps32) relative. The final tensors too (parameters and both AdamW moments,
# which AdamW's update alone would not show scaled together): each kind within
# max(4 d_kind, 2 eps32) normwise of R's uninterrupted run, d_kind the two uninterrupted
# runs' distance. Every bound is capped at 1e-4, so that a far-off later stage cannot
# loosen its own check. Why 4: the resumed run carries S's rounding of steps 1-3 into R's
# steps 4-6, so it should sit about d from R's run, as S's own run does; across the seven
# tests that use this script (tp, cp, pipelines 07-09, 4D, 4D resharded) the largest
# ratio of a resumed run's distance to its d was 1.17 (losses, weights and moments alike),
# and 4 leaves 3.4x room for another rounding's luck. The lr 1.01x control lies 800-2800x
# beyond d (weights, losses), so the margin cannot hide it.
# Negative control: the same resume with the learning rate 1.01x must be rejected.
#
# The one-step SGD variant (optimizer=sgd, grad_clip=0: p -= lr g, no moments, so a
# gradient off by a constant factor moves the weights by that factor, which AdamW's
# m / sqrt(v) would hide): stage 01 and the later stage run 4 steps, and each resumes the
# other's step-3 checkpoint for the one step 4. Its weights must lie within
# max(4 d_param, 2 eps32) normwise of its own stage's uninterrupted run, d_param the two
# uninterrupted runs' distance at step 4; the later stage's step 1.01x too large (lr
# 1.01x: under SGD, every gradient 1.01x) must be beyond it.
# Usage: resume_across.sh TRAIN01 TRAIN03 TRAIN_LATER PREPARE WORKDIR ROOT MPIEXEC key=value...
#   COMMON="key=value ..." in the environment applies to every run (a model shape);
#   LATER_NP (default 2) is the later stage's rank count.
set -euo pipefail
TRAIN01=$1 TRAIN03=$2 TRAIN_LATER=$3 PREPARE=$4 WORK=$5 ROOT=$6 MPIEXEC=$7
shift 7
LAYOUT=("$@")  # the later stage's layout on LATER_NP ranks, e.g. tp=2
LATER_NP=${LATER_NP:-2}
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

# run NP BIN DIR key=value...: 6 steps of the tiny model (a checkpoint every 3).
run() {
  local np=$1 bin=$2 dir=$3 sets=()
  shift 3
  for kv in ${COMMON:-} "$@"; do sets+=(--set "$kv"); done
  local cmd=("$bin" $(tiny_args "$WORK/data" "$dir") --set steps=6 --set checkpoint_every=3 --set sample_tokens=0
             --set val_batches=0 "${sets[@]}")
  if [ "$np" = 1 ]; then "${cmd[@]}"; else "$MPIEXEC" -np "$np" --oversubscribe "${cmd[@]}"; fi > "$dir.log" 2>&1 ||
    { echo "FAIL: $bin $*"; tail -20 "$dir.log"; exit 1; }
}
ckpt() { echo "$WORK/$1/step_00000003"; }

run 1 "$TRAIN01" "$WORK/u01"
run 2 "$TRAIN03" "$WORK/u03"
run "$LATER_NP" "$TRAIN_LATER" "$WORK/ulater" "${LAYOUT[@]}"
run "$LATER_NP" "$TRAIN_LATER" "$WORK/later_from01" "${LAYOUT[@]}" resume="$(ckpt u01)"
run "$LATER_NP" "$TRAIN_LATER" "$WORK/later_from03" "${LAYOUT[@]}" resume="$(ckpt u03)"
run 2 "$TRAIN03" "$WORK/r03_from_later" resume="$(ckpt ulater)"
run 1 "$TRAIN01" "$WORK/r01_from_later" resume="$(ckpt ulater)"
lr=$(scaled_lr "1.01")
run "$LATER_NP" "$TRAIN_LATER" "$WORK/neg_lr" "${LAYOUT[@]}" resume="$(ckpt u03)" lr="$lr"
SGD=(steps=4 optimizer=sgd grad_clip=0)
run 1 "$TRAIN01" "$WORK/u01_sgd" "${SGD[@]}"
run "$LATER_NP" "$TRAIN_LATER" "$WORK/ulater_sgd" "${LAYOUT[@]}" "${SGD[@]}"
run "$LATER_NP" "$TRAIN_LATER" "$WORK/later_from01_sgd" "${LAYOUT[@]}" "${SGD[@]}" resume="$(ckpt u01_sgd)"
run 1 "$TRAIN01" "$WORK/r01_from_later_sgd" "${SGD[@]}" resume="$(ckpt ulater_sgd)"
run "$LATER_NP" "$TRAIN_LATER" "$WORK/neg_sgd" "${LAYOUT[@]}" "${SGD[@]}" resume="$(ckpt u01_sgd)" lr="$lr"

/usr/bin/python3 - "$WORK" <<'PY'
import functools, json, sys
work = sys.argv[1]
def losses(run):
    with open(f"{work}/{run}/metrics.jsonl") as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return {r["step"]: r["loss"] for r in rows if r.get("kind") == "train"}
import numpy as np
EPS32, CAP, KINDS = 2.0**-23, 1e-4, ("param", "adam_m", "adam_v")
@functools.lru_cache(maxsize=None)  # read once: several checks compare the same runs
def tensors(run, kind, step=6):
    return np.fromfile(f"{work}/{run}/step_{step:08d}/{kind}.bin", dtype="<f4").astype(np.float64)
def distance(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)
u = {s: losses(f"u{s}") for s in ("01", "03", "later")}
@functools.lru_cache(maxsize=None)
def tolerances(src, own):
    """The bounds for a run of stage `own` resumed from stage `src`'s checkpoint."""
    d = max(abs(u[src][k] - u[own][k]) / abs(u[own][k]) for k in range(1, 7))
    tol = min(max(4 * d, 2 * EPS32), CAP)
    tol_kind = {k: min(max(4 * distance(tensors(f"u{src}", k), tensors(f"u{own}", k)), 2 * EPS32), CAP)
                for k in KINDS}
    print(f"uninterrupted stage {src} vs stage {own}: d = {d:.3e}; tolerance {tol:.3e} relative (losses), "
          + ", ".join(f"{k} {t:.3e}" for k, t in tol_kind.items()) + " normwise (final tensors)")
    return tol, tol_kind
def check(run, src, own, expect_ok):
    tol, tol_kind = tolerances(src, own)
    got, want = losses(run), u[own]
    if sorted(got) != [4, 5, 6]:
        return f"{run}: steps {sorted(got)}, expected 4-6"
    err = max(abs(got[k] - want[k]) / abs(want[k]) for k in (4, 5, 6))
    ok = err <= tol
    worst = f"losses {err:.3e}"
    for k in KINDS:
        e = distance(tensors(run, k), tensors(f"u{own}", k))
        ok = ok and e <= tol_kind[k]
        worst += f", {k} {e:.3e}"
    print(f"  {run:14s} vs stage {own} uninterrupted: {worst}: {'within' if ok else 'beyond'} tolerance"
          f" ({'as it must be' if ok == expect_ok else 'WRONG'})")
    return None if ok == expect_ok else f"{run}: {worst}"
errors = [e for e in (check("later_from01", "01", "later", True), check("later_from03", "03", "later", True),
                      check("r03_from_later", "later", "03", True), check("r01_from_later", "later", "01", True),
                      check("neg_lr", "03", "later", False)) if e]
# Control of the tensor bounds alone: moments scaled together (m 2x, v 4x: the same AdamW
# update, so the losses cannot show it) must be beyond them.
_, tol_kind = tolerances("03", "later")
for kind, scale in (("adam_m", 2.0), ("adam_v", 4.0)):
    e = distance(scale * tensors("later_from03", kind), tensors("ulater", kind))
    print(f"  control: later_from03's {kind} x{scale:g}: {e:.3e} {'beyond' if e > tol_kind[kind] else 'WITHIN'} tolerance")
    if e <= tol_kind[kind]:
        errors.append(f"control: {kind} x{scale:g} accepted")
def check_sgd(run, src, own, expect_ok):
    """One SGD step (step 4) of stage `own` from stage `src`'s step-3 checkpoint."""
    d = distance(tensors(f"u{src}_sgd", "param", 4), tensors(f"u{own}_sgd", "param", 4))
    tol = min(max(4 * d, 2 * EPS32), CAP)
    if sorted(losses(run)) != [4]:
        return f"{run}: steps {sorted(losses(run))}, expected 4"
    e = distance(tensors(run, "param", 4), tensors(f"u{own}_sgd", "param", 4))
    ok = e <= tol
    print(f"  {run:18s} vs stage {own} uninterrupted, one SGD step: param {e:.3e}, tolerance {tol:.3e}"
          f" (uninterrupted {src} vs {own}: {d:.3e}): {'within' if ok else 'beyond'} tolerance"
          f" ({'as it must be' if ok == expect_ok else 'WRONG'})")
    return None if ok == expect_ok else f"{run}: param {e:.3e}"
errors += [e for e in (check_sgd("later_from01_sgd", "01", "later", True),
                       check_sgd("r01_from_later_sgd", "later", "01", True),
                       check_sgd("neg_sgd", "01", "later", False)) if e]
if errors:
    print("FAIL:", "; ".join(errors)); sys.exit(1)
print("checkpoints resume across stages 01, 03 and the later stage")
PY
