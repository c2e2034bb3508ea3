#!/usr/bin/env bash
# Runs a command that must fail: passes when it exits non-zero within MAX_SECONDS and
# its output (stdout and stderr) matches every extended regular expression given.
#
#   expect_failure.sh MAX_SECONDS REGEX [REGEX...] -- COMMAND [ARGS...]
#
# Used for the communicator's failure paths (a peer that never answers, a rank that
# dies), where "the job ended, in time, saying why" is the thing under test.
set -uo pipefail
max="$1"
shift
regexes=()
while (($# > 0)) && [[ "$1" != "--" ]]; do
  regexes+=("$1")
  shift
done
shift  # the --
start=$(date +%s.%N)
output="$(timeout --kill-after=5 "$((${max%.*} + 30))" "$@" 2>&1)"
status=$?
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
printf '%s\n' "$output"
echo "--- exit status $status after $elapsed s"
fail=0
if ((status == 0)); then
  echo "FAIL: the command succeeded, but it should have failed"
  fail=1
fi
if awk -v e="$elapsed" -v m="$max" 'BEGIN { exit !(e > m) }'; then
  echo "FAIL: took $elapsed s, more than $max s"
  fail=1
fi
for re in "${regexes[@]}"; do
  if ! grep -Eq -- "$re" <<<"$output"; then
    echo "FAIL: no line of the output matches: $re"
    fail=1
  fi
done
((fail == 0)) && echo "PASS"
exit "$fail"
