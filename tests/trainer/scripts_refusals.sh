#!/usr/bin/env bash
# The helper scripts refuse what would lose a file or print a wrong answer, with exit 2
# and a message naming it, before doing anything:
#   notebook_runs.sh OUT, OUT a file (it empties OUT: the file would be deleted), or a
#   directory of the user's holding agree/ and memory/ beside a file of theirs (also
#   given relative to the current directory);
#   gpu_carry.sh with an argument (--help's mistyped cousin ran it, replacing the carried
#   packages);
#   check_notebooks.sh OUT, OUT notebooks/ itself (executed copies beside the clean ones);
#   diff_stages.sh with a first stage that names none (it went on as an empty name and
#   exited 0 with a diff of nothing, or --count 0), or a number past 64 bits (it wrapped
#   around to a real stage);
#   bench_pipeline.sh with P past its layers (mpirun -np 99999 spun for minutes);
#   test.sh with GPT_TEST_TIMEOUT=15m (ctest read 15 seconds; "abc" or 0, no limit);
#   bench_cpu.sh --set metrics_file=... (the run's analysis read another file: a
#   traceback after the whole benchmark), or a key the trainer does not know (refused after
#   the build); bench_recompute.py on a directory without its
#   runs (a traceback).
# Controls: diff_stages.sh --count of two real stages prints a count and exits 0.
# Usage: scripts_refusals.sh WORKDIR ROOT
set -uo pipefail
WORK=$1 ROOT=$2
rm -rf "$WORK" && mkdir -p "$WORK"
failures=0
# expect NAME NEEDLE COMMAND...: exit status 2 and NEEDLE in its output.
expect() {
  local name=$1 needle=$2 status=0
  shift 2
  "$@" > "$WORK/out.txt" 2>&1 || status=$?
  if [ "$status" -ne 2 ] || ! grep -qF -- "$needle" "$WORK/out.txt"; then
    echo "FAIL [$name]: exit $status, expected 2 naming '$needle':"; sed 's/^/    /' "$WORK/out.txt" | head -5
    failures=$((failures + 1))
  else echo "ok   [$name]: $(grep -F -m1 -- "$needle" "$WORK/out.txt")"; fi
}
# expect_in DIR NAME NEEDLE COMMAND...: expect, run from DIR (for paths relative to it).
expect_in() {
  local dir=$1
  shift
  (cd "$dir" && failures=0 && expect "$@"; exit "$failures") || failures=$((failures + 1))
}
echo "keep me" > "$WORK/precious.txt"
expect "notebook_runs OUT a file" "exists and is not a directory" "$ROOT/scripts/notebook_runs.sh" "$WORK/precious.txt"
[ "$(cat "$WORK/precious.txt")" = "keep me" ] || { echo "FAIL: notebook_runs.sh changed the file"; failures=$((failures + 1)); }
mkdir -p "$WORK/mine/agree" "$WORK/mine/memory" && echo "keep me" > "$WORK/mine/precious.txt"
expect "notebook_runs OUT someone's" "holds files this script did not make" "$ROOT/scripts/notebook_runs.sh" "$WORK/mine"
[ "$(cat "$WORK/mine/precious.txt")" = "keep me" ] ||
  { echo "FAIL: notebook_runs.sh emptied a directory of the user's"; failures=$((failures + 1)); }
# A relative OUT is a path from the current directory, as the shell it was typed in means
# it (it was taken from the repository root): here a directory of the user's in WORK,
# refused naming it, where the root's README.md would have been refused as a file.
mkdir -p "$WORK/README.md/agree" "$WORK/README.md/memory" && echo "keep me" > "$WORK/README.md/precious.txt"
expect_in "$WORK" "notebook_runs relative OUT" "$WORK/README.md holds files this script did not make" \
  "$ROOT/scripts/notebook_runs.sh" README.md
# bench_recompute.py on a directory without the benchmark's runs: the runs named, no traceback.
expect "bench_recompute.py not its runs" "does not hold bench_recompute.sh's runs: no gpipe-none" \
  /usr/bin/python3 "$ROOT/scripts/bench_recompute.py" "$WORK"
# "." typed at the repository root is the root itself, which is never emptied.
expect_in "$ROOT" "notebook_runs . at the root" "refusing to empty $ROOT" "$ROOT/scripts/notebook_runs.sh" .
expect "gpu_carry with an argument" "unknown argument '--hepl'" "$ROOT/scripts/gpu_carry.sh" --hepl
expect "check_notebooks OUT notebooks/" "is notebooks/ itself" "$ROOT/scripts/check_notebooks.sh" --no-runs "$ROOT/notebooks/"
expect "diff_stages bad first stage" "'99' names 0 stages" "$ROOT/scripts/diff_stages.sh" 99 05
# A stage number past 64 bits wrapped around to a real stage (2^64 + 2 was 02).
expect "diff_stages stage 2^64+2" "'18446744073709551618' names 0 stages" "$ROOT/scripts/diff_stages.sh" \
  --count 18446744073709551618 05
expect "bench_pipeline P past the layers" "P=99999: a pipeline of more stages" "$ROOT/scripts/bench_pipeline.sh" 99999
expect "bench_cpu.sh metrics_file" "the benchmark sets metrics_file itself" "$ROOT/scripts/bench_cpu.sh" \
  --set metrics_file="$WORK/m.jsonl"
expect "bench_cpu.sh unknown key" "unknown key 'threadz'" "$ROOT/scripts/bench_cpu.sh" --set threadz=1
expect "test.sh GPT_TEST_TIMEOUT=15m" "GPT_TEST_TIMEOUT='15m'" env GPT_TEST_TIMEOUT=15m "$ROOT/scripts/test.sh" -R none
expect "diff_stages --count bad first" "'' names 11 stages" "$ROOT/scripts/diff_stages.sh" --count "" 05
expect "diff_stages --count last" "--count goes before the stages" "$ROOT/scripts/diff_stages.sh" 04 05 --count
count=$("$ROOT/scripts/diff_stages.sh" --count 04 05) && [[ "$count" =~ ^[1-9][0-9]*$ ]] ||
  { echo "FAIL: diff_stages.sh --count 04 05 printed '$count'"; failures=$((failures + 1)); }
[ "$failures" -eq 0 ] && echo PASS || exit 1
