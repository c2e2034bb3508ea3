#!/usr/bin/env bash
# --help wins wherever it stands (common/cli.h): every program given a flag it refuses and
# then --help prints its own usage line to stdout and exits 0. The control: the same flag
# alone is refused (non-zero exit), so the usage came from --help, not from a program that
# ignores what it cannot read. After prepare's lone "--", "--help" is a file's name, not a
# request; a trainer given "--" and --help prints its usage.
# usage: help_anywhere.sh PREPARE PROGRAM...   (prepare is checked among the programs too)
set -u
prepare=$1
shift
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for program in "$prepare" "$@"; do
  name=$(basename "$program")
  # The usage line names the tool; a stage's trainer is named by its binary, train.
  for args in "--frobnicate --help" "--frobnicate -h" "--help --frobnicate"; do
    # shellcheck disable=SC2086  # args is split into words on purpose
    "$program" $args >"$work/out" 2>"$work/err"
    status=$?
    [[ $status -eq 0 ]] || { fail "$name $args exited $status: $(head -c 300 "$work/err")"; continue; }
    first=$(head -n 1 "$work/out")
    [[ $first == "usage: $name "* ]] || fail "$name $args: stdout starts '$first', not its usage line"
  done
  "$program" --frobnicate >"$work/out" 2>"$work/err" </dev/null
  status=$?
  [[ $status -ne 0 ]] || fail "$name --frobnicate exited 0 (the control: a refused flag must be refused)"
done

# After "--" every argument is a file name: prepare looks for a file called --help.
"$prepare" --out "$work/shards" -- --help >"$work/out" 2>"$work/err"
status=$?
[[ $status -ne 0 ]] || fail "prepare --out DIR -- --help exited 0"
grep -q -- "--help" "$work/err" || fail "prepare -- --help did not name the file --help: $(cat "$work/err")"
grep -q "^usage:" "$work/out" && fail "prepare -- --help printed the usage"
# No other program gives "--" a meaning: there --help still wins.
"$1" -- --help >"$work/out" 2>"$work/err" || fail "$(basename "$1") -- --help exited $?: $(cat "$work/err")"
grep -q "^usage: " "$work/out" || fail "$(basename "$1") -- --help printed no usage"

[[ $failures -eq 0 ]] && echo "every program's --help wins ($(($# + 1)) programs)"
exit $((failures > 0))
