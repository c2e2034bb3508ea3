# Shared by the trainer tests: a small corpus made on the spot (no download, no
# dependence on the fortunes package), prepared into shards with the project's tool.
set -euo pipefail

make_corpus() {  # make_corpus DIR PREPARE
  local dir=$1 prepare=$2
  mkdir -p "$dir"
  local text="$dir/corpus.txt"
  : > "$text"
  local i
  for i in $(seq 1 400); do
    printf 'The quick brown fox %d jumps over the lazy dog. A stitch in time saves nine.\n' "$i" >> "$text"
    printf 'To be or not to be, that is the question number %d.\n\n' "$i" >> "$text"
  done
  "$prepare" --out "$dir/data" --val-fraction 0.1 "$text" > /dev/null
}

# The start of a multi-rank test script: Open MPI allowed as root (the tests run as
# root in CI), one OpenMP thread a rank that sleeps when idle (ranks outnumber the
# cores), WORK emptied, and the corpus made in it.
start_mpi_test() {  # start_mpi_test WORK PREPARE
  [ -n "$1" ] || { echo "start_mpi_test: no WORK directory given" >&2; exit 2; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
  rm -rf "$1" && mkdir -p "$1"
  make_corpus "$1" "$2"
}

# The learning rate of the tiny-model runs times FACTOR, what a negative control runs at:
# configs/tiny.json's lr, or the caller's COMMON lr= when it sets one (a later --set wins).
scaled_lr() {  # scaled_lr FACTOR
  local lr kv
  lr=$(/usr/bin/python3 -c "import json; print(json.load(open('$ROOT/configs/tiny.json'))['lr'])")
  for kv in ${COMMON:-}; do [[ "$kv" == lr=* ]] && lr=${kv#lr=}; done
  /usr/bin/python3 -c "print($lr * $1)"
}

# quick_run: true under GPT_TEST_QUICK=1, set by scripts/test.sh for its sanitizer pass,
# which looks for memory errors and undefined behaviour: the whole-run comparisons then
# train and compare every layout but leave out the runs that repeat the same code.
quick_run() { [ "${GPT_TEST_QUICK:-0}" = 1 ]; }

# compared_steps: the AdamW steps a whole-run comparison trains: 10, or 3 in a quick run,
# whose third step runs every line the tenth does (the first allocates, the second is the
# first to reuse) under sanitizers that make training some 30x slower.
compared_steps() { if quick_run; then echo 3; else echo 10; fi; }

# plant_ulps RUN_DIR STEP: element 1000 of the run's step-STEP param.bin moved 10 ulps
# (the same sign and exponent range): the error an exact comparison must reject.
plant_ulps() {
  /usr/bin/python3 - "$1/step_$(printf %08d "$2")/param.bin" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(4 * 1000)
    bits = struct.unpack("<I", f.read(4))[0]
    f.seek(4 * 1000)
    f.write(struct.pack("<I", bits + 10))
PY
}

# plant_norm RUN_DIR STEP: the run's logged gradient norm of step STEP 1e-9 (relative)
# larger: far below what a wrong gradient does, far above the rounding of a regrouped
# sum of squares that compare_runs.py --norm-resharded allows.
plant_norm() {
  /usr/bin/python3 - "$1/metrics.jsonl" "$2" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
for r in records:
    if r.get("kind") == "train" and r["step"] == int(sys.argv[2]):
        r["grad_norm"] *= 1 + 1e-9
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in records))
PY
}

# require_layout RUN_DIR NP [key=value...]: the newest checkpoint in RUN_DIR was written
# at the layout NP ranks and the keys ask for (tp, pp, cp: 1 unless given; dp: the rest
# of NP, unless given), or the test fails. A driver that ignored tp= would compute what
# the reference computes and pass a comparison; its manifest's layout gives it away.
require_layout() {
  /usr/bin/python3 - "$@" << 'PY' || exit 1
import glob, json, sys
run_dir, np, *keys = sys.argv[1:]
want = {"tp": 1, "pp": 1, "cp": 1}
dp = 0
for kv in keys:
    key, _, value = kv.partition("=")
    if key in want:
        want[key] = int(value)
    elif key == "dp":
        dp = int(value)
want["dp"] = dp or int(np) // (want["tp"] * want["pp"] * want["cp"])
manifests = sorted(glob.glob(run_dir + "/step_*/manifest.json"))
if not manifests:
    sys.exit(f"FAIL: {run_dir} holds no checkpoint, so the layout it trained at is unknown")
got = json.load(open(manifests[-1]))["layout"]
if any(got.get(key) != value for key, value in want.items()):
    sys.exit(f"FAIL: {manifests[-1]} was written at the layout {got}, not the requested {want}")
PY
}

# A test's failures: `fail MESSAGE` prints it and counts one; the script ends on
# `failures` (a script may define its own fail after sourcing this file).
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The tiny model every trainer test uses, on the corpus of make_corpus.
tiny_args() {  # tiny_args DATA_DIR RUN_DIR
  echo --config "$ROOT/configs/tiny.json" --set device=cpu --set "train_data=$1/train.bin" \
    --set "val_data=$1/val.bin" --set "run_dir=$2" --set threads=1
}

# One step of the tiny model on NP ranks (MPIEXEC, WORK set by the caller), without sample,
# validation or checkpoint, for a test that reads what the run prints: one_step NAME NP
# TRAIN key=value... writes the output to $WORK/NAME.log; a run that fails is a failure
# (the caller's `fail`) and returns 1.
one_step() {
  local name=$1 np=$2 bin=$3 sets=() kv
  shift 3
  for kv in "$@"; do sets+=(--set "$kv"); done
  "$MPIEXEC" -np "$np" --oversubscribe "$bin" $(tiny_args "$WORK/data" "$WORK/$name") --set steps=1 \
    --set sample_tokens=0 --set val_batches=0 --set checkpoint_at_end=false "${sets[@]}" > "$WORK/$name.log" 2>&1 ||
    { tail -5 "$WORK/$name.log"; fail "$name did not run"; return 1; }
}

# The traffic tests' runs, each judged by the caller's function `judge LOG ARGS...`:
# judged_step NAME NP TRAIN ARGS... -- key=value... runs one_step NAME NP TRAIN with the
# keys, then judge "$WORK/NAME.log" ARGS...; a run judged right is added to the caller's
# array `passed`, a wrong one counted by its `fail`.
judged_step() {
  local name=$1 np=$2 bin=$3 judged=()
  shift 3
  while [ "$1" != "--" ]; do judged+=("$1"); shift; done
  shift
  one_step "$name" "$np" "$bin" "$@" || return 0
  if judge "$WORK/$name.log" "${judged[@]}"; then passed+=("$name"); else fail "$name"; fi
}

# A negative control of those tests: control WHAT LOG ARGS... runs the caller's judge on
# $WORK/LOG.log with ARGS (a plausible wrong derivation, WHAT) and counts a failure, by
# the caller's `fail`, when the run passes it.
control() {
  local what=$1 log=$2
  shift 2
  if judge "$WORK/$log.log" "$@" > /dev/null 2>&1; then fail "control: $what passed"
  else echo "ok   (control) $what is rejected"; fi
}

# passed_all NAME...: whether judged_step judged every NAME right (a control needs them).
passed_all() {
  local name
  for name in "$@"; do [[ " ${passed[*]} " == *" $name "* ]] || return 1; done
}

# A multi-rank trainer refusing bad input: expect_refused NAME NEEDLE NP TRAIN key=value...
# runs TRAIN on NP ranks (MPIEXEC, WORK set by the caller) for one step of the tiny model
# with the given keys; passes when it exits with status 2 and its output contains
# NEEDLE, else counts a failure in `failures`.
expect_refused() {
  local name=$1 needle=$2 np=$3 bin=$4 sets=() kv status=0
  shift 4
  for kv in "$@"; do sets+=(--set "$kv"); done
  "$MPIEXEC" -np "$np" --oversubscribe "$bin" $(tiny_args "$WORK/data" "$WORK/run_$RANDOM") --set steps=1 \
    --set sample_tokens=0 "${sets[@]}" > "$WORK/out.txt" 2>&1 || status=$?
  if [ "$status" -ne 2 ]; then
    echo "FAIL [$name]: exit status $status, expected 2"; tail -5 "$WORK/out.txt" | sed 's/^/    /'
    failures=$((failures + 1)); return
  fi
  if ! grep -qF -- "$needle" "$WORK/out.txt"; then
    echo "FAIL [$name]: the message does not name '$needle':"; sed 's/^/    /' "$WORK/out.txt" | head -8
    failures=$((failures + 1)); return
  fi
  # A rank names itself once: an error from a collective step ("rank 0: ...") printed by
  # the rank it came from must not read "rank 0: error: rank 0: ...".
  if grep -qE "rank ([0-9]+): (internal )?error: rank \1: " "$WORK/out.txt"; then
    echo "FAIL [$name]: a rank names itself twice:"; grep -E "rank ([0-9]+): (internal )?error: rank \1: " \
      "$WORK/out.txt" | head -2 | sed 's/^/    /'
    failures=$((failures + 1)); return
  fi
  echo "ok   [$name]: $(grep -F -m1 -- "$needle" "$WORK/out.txt")"
}
