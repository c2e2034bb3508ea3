#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite twice, with three
# checks between:
#
#   1. the `default` preset (Release; CUDA when a toolkit is found): every test;
#   2. the notebooks: scripts/check_notebooks.sh makes their runs with that build and
#      executes every notebook of notebooks/ headless (a cell that raises fails);
#   3. the one-command path: scripts/check_train.sh runs scripts/train.sh with that
#      build (bad arguments refused before setup, a short run that samples);
#   4. the API reference: scripts/check_docs.sh runs doxygen, warnings are failures;
#   5. the `sanitize` preset (AddressSanitizer + UBSan, CPU only): every test not
#      labelled `slow`, with GPT_TEST_QUICK=1: the comparisons of whole training runs
#      train every layout, most of them 3 steps instead of 10, but leave out the runs that
#      repeat the same code (the one-step SGD variants, the controls' runs), which the
#      first pass has checked. Its build starts beside steps 1-4 at the lowest CPU
#      priority (nice 19), in the time their tests leave idle; its output goes to
#      build-sanitize/build.log, shown if it fails.
#
#   scripts/test.sh [ctest args ...]      e.g. scripts/test.sh -R config -V
#
# Extra arguments go to both ctest runs. Exits non-zero when a build or a test fails.
# Environment:
#   GPT_TEST_SKIP_SANITIZE=1   skip the sanitizer pass (quicker local runs)
#   GPT_TEST_SKIP_NOTEBOOKS=1  skip the notebooks (about a minute on 2 cores)
#   GPT_TEST_SKIP_DOCS=1       skip the doxygen run
#   GPT_TEST_JOBS=N            tests run at once (default: the cores + 1)
#   GPT_TEST_TIMEOUT=S         per-test limit for tests that set none (default 900 s)
# GPU tests (label `gpu`) report "skipped" on machines without a GPU.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
  -h | --help)
    print_help
    exit 0
    ;;
esac

# check_ctest_args ARGS...: ctest ignores what it does not know (a mistyped option would
# run the whole suite), so each option must be one `ctest --help` lists (or -jN), and each
# other word must follow an option, as its value.
check_ctest_args() {
  local known arg prev=""
  known=" $(ctest --help | grep -oE '^ +-[^=]*' | grep -oE -e '-{1,2}[A-Za-z][A-Za-z0-9.-]*' | tr '\n' ' ' || true)"
  [[ "$known" != " " ]] || return 0  # a help text of another form: left to ctest
  for arg in "$@"; do
    if [[ "$arg" == -* ]]; then
      [[ "$known" == *" ${arg%%=*} "* || "$arg" =~ ^-j[0-9]+$ ]] ||
        bad_input "argument '$arg': not an option of ctest (scripts/test.sh [ctest args ...]; --help)"
    elif [[ "$prev" != -* || "$prev" == *=* ]]; then
      bad_input "argument '$arg': neither a ctest option nor the value of one (scripts/test.sh [ctest args ...])"
    fi
    prev="$arg"
  done
}
# Checked before setup when ctest is there already; on a fresh machine, once setup brings it.
args_checked=0
if command -v ctest > /dev/null; then
  check_ctest_args "$@"
  args_checked=1
fi

cd "$GPT_ROOT"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
# Tests run several at a time: OpenMP threads that spin while waiting would steal the
# core another test needs (20x slowdowns seen), so they sleep instead.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
# One test more than the cores: many tests spend seconds waiting (for a communication
# timeout, a hung rank, a held save, a signal) with their cores idle. On the 2-core CI
# machine the default suite took 441 s two at a time and 376 s three at a time.
jobs="${GPT_TEST_JOBS:-$(($(machine_cores) + 1))}"
timeout="${GPT_TEST_TIMEOUT:-900}"
# ctest takes either without a word when it is not a whole number: a timeout of "abc" or 0
# is no limit at all (a hung test hangs the suite), "15m" is 15 seconds.
[[ "$jobs" =~ ^[1-9][0-9]{0,3}$ ]] || bad_input "GPT_TEST_JOBS='$jobs': a number of tests at once, 1 or more"
[[ "$timeout" =~ ^[1-9][0-9]{0,6}$ ]] ||
  bad_input "GPT_TEST_TIMEOUT='$timeout': a whole number of seconds, 1 or more (15 minutes is 900)"
# An empty suite is a failure, unless the caller filtered it (-R, -L ...) to nothing.
no_tests=(--no-tests=error)
(($# > 0)) && no_tests=()

summary=()
failed=0

# run_suite NAME DIR [ctest args...]: runs ctest in DIR, keeps its log in DIR/test.log
# and adds the summary lines to `summary`.
run_suite() {
  local name="$1" dir rc log line
  dir="$(abs_dir "$2")"
  shift 2
  log="$dir/test.log"
  log "running the $name tests ($dir, $jobs at once)"
  if ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout "$timeout" \
    "${no_tests[@]}" "$@" 2>&1 | tee "$log"; then
    rc=0
  else
    rc=$?
  fi
  # The pass/fail count, the total time, the list of failed tests if any, and how many
  # were skipped (a GPU test without a GPU, an MPI test in a build without MPI) and which.
  while IFS= read -r line; do
    summary+=("[$name] $line")
  done < <(awk '/tests passed|Total Test time/ { print; next }
                /The following tests FAILED/ { f = 1 }
                /^Errors while running CTest/ { f = 0 }
                f && NF { print }' "$log")
  local skipped names=""
  skipped=$(grep -c -- '\*\*\*Skipped' "$log" || true)
  if ((skipped > 0)); then
    names=": $(grep -- '\*\*\*Skipped' "$log" | sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' | paste -sd ' ')"
  fi
  summary+=("[$name] $skipped tests skipped$names")
  if ((rc != 0)); then
    summary+=("[$name] ctest exited with status $rc (log: ${log#"$GPT_ROOT"/})")
    failed=1
  fi
}

# run_step NAME SCRIPT [args...]: runs one of the checks beside the suites, its output
# in DIR/NAME.log, and adds its last line and its time to `summary`.
run_step() {
  local name="$1" log start rc=0
  shift
  log="$(abs_dir "$GPT_BUILD_DIR")/$name.log"
  start=$SECONDS
  log "running the $name check ($*)"
  "$@" 2>&1 | tee "$log" || rc=$?
  summary+=("[$name] $(grep -v '^\s*$' "$log" | tail -1 | sed 's/^==> //') ($((SECONDS - start)) s)")
  if ((rc != 0)); then
    summary+=("[$name] failed with status $rc (log: ${log#"$GPT_ROOT"/})")
    failed=1
  fi
}

skip_notebooks="${GPT_TEST_SKIP_NOTEBOOKS:-0}"
skip_docs="${GPT_TEST_SKIP_DOCS:-0}"
deps=()
[[ "$skip_notebooks" == 1 ]] || deps+=(--with-notebooks)
[[ "$skip_docs" == 1 ]] || deps+=(--with-docs)
ensure_deps "${deps[@]}"
if ((!args_checked)) && command -v ctest > /dev/null; then check_ctest_args "$@"; fi
# tiktoken and GPT-2's ranks from PyPI, for the tokenizer's comparison (skipped without)
[[ "${GPT_SKIP_SETUP:-0}" == 1 ]] || scripts/setup_tiktoken.sh
build_preset default "$GPT_BUILD_DIR"

# The sanitizer build beside the first pass, at nice 19: the scheduler gives it only the
# cycles the tests leave idle (a test waiting out a timeout, a hung rank or a held save;
# mpirun starting ranks; the tail of the suite, where fewer tests are left than cores;
# doxygen on one core), so the tests run as fast as without it and most of the build is
# done when its turn comes (measured: 500 s of its 656 s beside the first pass, whose
# tests took 403 s, as they had alone).
# In a session of its own (setsid), so that the trap can end the whole build at once; a
# new session is also a new autogroup of the scheduler (Linux's sched_autogroup), which
# would share the cores with the tests' session half and half whatever the processes'
# nice values: the group is given nice 19 as well (measured: the tests took 623 s
# instead of 439 s beside a build in an autogroup of nice 0).
sanitize_pid=""
sanitize_log=""
if [[ "${GPT_TEST_SKIP_SANITIZE:-0}" != 1 ]]; then
  sanitize_log="$(abs_dir "$GPT_SANITIZE_BUILD_DIR")/build.log"
  mkdir -p "$(dirname "$sanitize_log")"
  log "building the sanitize preset beside the first pass at nice 19 (log: ${sanitize_log#"$GPT_ROOT"/})"
  # shellcheck disable=SC2016  # $1, $2: the inner shell's arguments
  setsid --wait nice -n 19 bash -c '{ echo 19 > /proc/self/autogroup; } 2> /dev/null
    source "$1/scripts/lib.sh" && build_preset sanitize "$2"' \
    _ "$GPT_ROOT" "$GPT_SANITIZE_BUILD_DIR" > "$sanitize_log" 2>&1 &
  sanitize_pid=$!
  trap '[[ -z "$sanitize_pid" ]] || kill -- "-$sanitize_pid" 2> /dev/null || true' EXIT
fi

run_suite default "$GPT_BUILD_DIR" "$@"

if [[ "$skip_notebooks" == 1 ]]; then
  summary+=("[notebooks] skipped (GPT_TEST_SKIP_NOTEBOOKS=1)")
else
  run_step notebooks scripts/check_notebooks.sh
fi
run_step train scripts/check_train.sh
if [[ "$skip_docs" == 1 ]]; then
  summary+=("[docs] skipped (GPT_TEST_SKIP_DOCS=1)")
else
  run_step docs scripts/check_docs.sh
fi

if [[ "${GPT_TEST_SKIP_SANITIZE:-0}" == 1 ]]; then
  summary+=("[sanitize] skipped (GPT_TEST_SKIP_SANITIZE=1)")
else
  waited=$SECONDS
  log "waiting for the sanitize build (log: ${sanitize_log#"$GPT_ROOT"/})"
  build_status=0
  wait "$sanitize_pid" || build_status=$?
  sanitize_pid=""  # ended: nothing left for the exit trap
  if ((build_status == 0)); then
    summary+=("[sanitize] $(grep -o 'built in [0-9]* s' "$sanitize_log" | tail -1) beside the first pass, \
the last $((SECONDS - waited)) s of it after")
    export GPT_TEST_QUICK=1
    # One run, MPI tests included: those run without LeakSanitizer (tests/CMakeLists.txt).
    run_suite sanitize "$GPT_SANITIZE_BUILD_DIR" --label-exclude slow "$@"
  else
    tail -40 "$sanitize_log" >&2
    summary+=("[sanitize] the build failed, no test run (log: ${sanitize_log#"$GPT_ROOT"/})")
    failed=1
  fi
fi

printf '\n==== test summary ====\n'
printf '%s\n' "${summary[@]}"
if ((failed)); then
  printf 'FAILED\n'
  exit 1
fi
printf 'all test runs passed\n'
