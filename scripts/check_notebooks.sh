#!/usr/bin/env bash
# Executes every notebook of notebooks/ headless on fresh runs, as CI does.
#
#   scripts/check_notebooks.sh [--no-runs] [OUT]
#
#   1. the committed notebooks must carry no outputs (clear them before committing:
#      Jupyter's "Clear All Outputs", or
#      jupyter nbconvert --clear-output --inplace notebooks/*.ipynb);
#   2. scripts/notebook_runs.sh makes the runs they read (--no-runs: use the ones there);
#   3. each notebook runs top to bottom in a fresh python3 kernel (Debian's ipykernel,
#      /usr/bin/python3) with `jupyter nbconvert --execute`, GPT_NOTEBOOK_JOBS of them at
#      once (default 2); the executed copies go to OUT (default: $GPT_BUILD_DIR/notebooks,
#      i.e. build/notebooks), never into notebooks/.
#
# Exits 1 when a notebook has outputs, a run fails or a cell raises. Needs the packages
# of scripts/setup.sh --with-notebooks and the default build (scripts/notebook_runs.sh
# builds the binaries it misses). GPT_NOTEBOOK_RUNS moves the runs, as for the notebooks.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

make_runs=1
out=""
for arg in "$@"; do
  case "$arg" in
    --no-runs) make_runs=0 ;;
    -h | --help)
      print_help
      exit 0
      ;;
    -*) bad_input "unknown option '$arg' (see scripts/check_notebooks.sh --help)" ;;
    *)
      [[ -z "$out" ]] || bad_input "argument '$arg': one output directory at most, '$out' is one (see --help)"
      out="$arg"
      ;;
  esac
done
# Checked before anything runs or is emptied (the runs below are made anew).
jobs="${GPT_NOTEBOOK_JOBS:-2}"
[[ "$jobs" =~ ^[1-9][0-9]{0,2}$ ]] || bad_input "GPT_NOTEBOOK_JOBS='$jobs': not a whole number of at least 1"
out="$(abs_dir "${out:-$GPT_BUILD_DIR/notebooks}")"
# The executed copies, with outputs, must not land beside the notebooks they come from
# (the committed ones must carry none) or replace them.
[[ "$(realpath -m -- "$out")" != "$(realpath -m -- "$GPT_ROOT/notebooks")" ]] ||
  bad_input "OUT '$out' is notebooks/ itself: the executed copies would mix with the committed notebooks; give another directory"
python=/usr/bin/python3
cd "$GPT_ROOT"

notebooks=(notebooks/*.ipynb)
[[ -e "${notebooks[0]}" ]] || die "no notebook in notebooks/"
"$python" -c 'import nbconvert, ipykernel, matplotlib, numpy' 2>/dev/null ||
  die "$python lacks nbconvert, ipykernel, matplotlib or numpy: scripts/setup.sh --with-notebooks"

# 1. No outputs in the committed notebooks.
"$python" - "${notebooks[@]}" <<'PY' || die "notebooks with outputs: clear them before committing"
import json, sys
bad = []
for path in sys.argv[1:]:
    with open(path) as f:
        nb = json.load(f)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if any(c.get("outputs") or c.get("execution_count") is not None for c in code):
        bad.append(path)
for path in bad:
    print(f"{path}: has outputs or execution counts", file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# 2. The runs.
if ((make_runs)); then
  start=$SECONDS
  scripts/notebook_runs.sh
  log "runs made in $((SECONDS - start)) s"
fi

# 3. Every notebook, in a fresh kernel, GPT_NOTEBOOK_JOBS at a time (default 2: a kernel
#    is one process that mostly waits on Python's start-up and matplotlib, one core each).
mkdir -p "$out"
export PYDEVD_DISABLE_FILE_VALIDATION=1  # quiets the kernel's debugger warning on Python 3.11

# execute_notebook NB: runs NB; its log in OUT/NAME.log, its seconds (or "failed") in
# OUT/NAME.status, read once every notebook has ended. A kernel that died before it
# answered ran no cell: that is a failure of the kernel's start (two starting at once can
# race for the ports they listen on), not of the notebook, and it gets one more start
# (the first start's log kept as NAME.first_start.log).
execute_notebook() {
  local nb="$1" name t0=$SECONDS attempt
  name="$out/$(basename "$nb" .ipynb)"
  for attempt in 1 2; do
    if "$python" -m nbconvert --to notebook --execute --ExecutePreprocessor.kernel_name=python3 \
      --ExecutePreprocessor.timeout=300 --output-dir "$out" "$nb" > "$name.log" 2>&1; then
      echo "$((SECONDS - t0))" > "$name.status"
      return
    fi
    ((attempt == 1)) && grep -q "Kernel died before replying to kernel_info" "$name.log" || break
    mv "$name.log" "$name.first_start.log"
  done
  echo failed > "$name.status"
}

failed=()
start=$SECONDS
running=0
for nb in "${notebooks[@]}"; do
  rm -f "$out/$(basename "$nb" .ipynb).status"
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
  execute_notebook "$nb" &
  running=$((running + 1))
done
wait
for nb in "${notebooks[@]}"; do
  name="$out/$(basename "$nb" .ipynb)"
  status="$(cat "$name.status" 2> /dev/null || echo failed)"
  if [[ "$status" != failed ]]; then
    log "$nb: ok ($status s)"
  else
    grep -v '^0.00s' "$name.log" | tail -25 >&2
    warn "$nb: a cell failed (log: $name.log)"
    failed+=("$nb")
  fi
done
log "${#notebooks[@]} notebooks executed in $((SECONDS - start)) s ($jobs at a time), copies with outputs in $out"
((${#failed[@]} == 0)) || die "failed: ${failed[*]}"
