#!/usr/bin/env bash
# Checkpoints cross between layouts: a checkpoint of stage 01 (one writer) and one of
# stage 03 (dp = 2 shards) resume in a later stage on LATER_NP ranks (stage 06 at tp = 2,
# stage 10 at cp = 2: the key=value arguments), and the later stage's resumes in stage 03
# and in stage 01 (one process reading every shard's tensors whole); each resumed run
# continues the uninterrupted run of its own stage.
#
# Each resumed run is judged by tests/stages/compare_runs.py against stage 01 in float64
# over steps 4-6 (--from-step 4: losses, gradient norms) and on its step-6 weights and both
# AdamW moments (which AdamW's update alone would not show scaled together): within 8 times
# the largest distance from float64 of the two uninterrupted fp32 runs it stands between,
# its own stage's (whose layout it computes in from step 4) and the checkpoint writer's
# (whose rounding its first 3 steps carry). Negative controls: the same resume with the
# learning rate 1.01x; its moments scaled together (m 2x, v 4x: the same AdamW update, so
# the losses cannot show it), each rejected.
#
# The one-step SGD variant (optimizer=sgd, grad_clip=0: p -= lr g, no moments, so a
# gradient off by a constant factor moves the weights by that factor, which AdamW's
# m / sqrt(v) would hide): stage 01 and the later stage run 4 steps, and each resumes the
# other's step-3 checkpoint for the one step 4, its weights compared the same way; the
# later stage's step 1.01x too large (lr 1.01x: under SGD, every gradient 1.01x) must be
# rejected.
# With GPT_TEST_QUICK=1 (the sanitizer pass of scripts/test.sh) the AdamW resumes run and
# are compared; the SGD variant and the controls are left to the default pass.
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
SGD=(steps=4 optimizer=sgd grad_clip=0)
lr=$(scaled_lr "1.01")
if ! quick_run; then
  run "$LATER_NP" "$TRAIN_LATER" "$WORK/neg_lr" "${LAYOUT[@]}" resume="$(ckpt u03)" lr="$lr"
  run 1 "$TRAIN01" "$WORK/u01_sgd" "${SGD[@]}"
  run "$LATER_NP" "$TRAIN_LATER" "$WORK/ulater_sgd" "${LAYOUT[@]}" "${SGD[@]}"
  run "$LATER_NP" "$TRAIN_LATER" "$WORK/later_from01_sgd" "${LAYOUT[@]}" "${SGD[@]}" resume="$(ckpt u01_sgd)"
  run 1 "$TRAIN01" "$WORK/r01_from_later_sgd" "${SGD[@]}" resume="$(ckpt ulater_sgd)"
  run "$LATER_NP" "$TRAIN_LATER" "$WORK/neg_sgd" "${LAYOUT[@]}" "${SGD[@]}" resume="$(ckpt u01_sgd)" lr="$lr"
  run 1 "$TRAIN01" "$WORK/t01_fp64_sgd" precision=fp64 "${SGD[@]}"
fi

COMPARE=(/usr/bin/python3 "$ROOT/tests/stages/compare_runs.py")
run 1 "$TRAIN01" "$WORK/t01_fp64" precision=fp64
status=0
# resumed RUN SRC OWN [--expect-reject...]: stage OWN's run RUN, resumed from stage SRC's
# step-3 checkpoint, against the truth (AdamW, steps 4-6).
resumed() {
  local run=$1 src=$2 own=$3
  shift 3
  echo "== $run: stage $own resumed from stage $src's step 3"
  "${COMPARE[@]}" "$@" --from-step 4 --step 6 --truth "$WORK/t01_fp64" --reference "$WORK/u$own" \
    --ensemble "$WORK/u$src" --candidate "$WORK/$run" || status=1
}
resumed later_from01 01 later
resumed later_from03 03 later
resumed r03_from_later later 03
resumed r01_from_later later 01
if quick_run; then
  [ "$status" = 0 ] || { echo "FAIL: a comparison above"; exit 1; }
  echo "quick run (GPT_TEST_QUICK=1): the SGD variant and the controls are left to the default pass"
  exit 0
fi
resumed neg_lr 03 later --expect-reject
# The moments scaled together in a copy of later_from03's final checkpoint.
rm -rf "$WORK/neg_moments" && cp -r "$WORK/later_from03" "$WORK/neg_moments"
/usr/bin/python3 - "$WORK/neg_moments/step_00000006" <<'PY'
import numpy, sys
for kind, scale in (("adam_m", 2.0), ("adam_v", 4.0)):
    path = f"{sys.argv[1]}/{kind}.bin"
    (numpy.fromfile(path, dtype="<f4") * numpy.float32(scale)).astype("<f4").tofile(path)
PY
resumed neg_moments 03 later --expect-reject --weights-only --kinds adam_m,adam_v
# resumed_sgd RUN SRC OWN [--expect-reject...]: the same for one SGD step (step 4).
resumed_sgd() {
  local run=$1 src=$2 own=$3
  shift 3
  echo "== $run: stage $own resumed from stage $src's step 3, one SGD step"
  "${COMPARE[@]}" "$@" --from-step 4 --step 4 --kinds param --truth "$WORK/t01_fp64_sgd" \
    --reference "$WORK/u${own}_sgd" --ensemble "$WORK/u${src}_sgd" --candidate "$WORK/$run" || status=1
}
resumed_sgd later_from01_sgd 01 later
resumed_sgd r01_from_later_sgd later 01
resumed_sgd neg_sgd 01 later --expect-reject --weights-only
[ "$status" = 0 ] || { echo "FAIL: a comparison or a control above"; exit 1; }
echo "checkpoints resume across stages 01, 03 and the later stage"
