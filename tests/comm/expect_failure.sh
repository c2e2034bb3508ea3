#!/usr/bin/env bash
# Runs a command that must fail: passes when it exits with the expected status within
# MAX_SECONDS and its output (stdout and stderr) matches every extended regular
# expression given.
#
#   expect_failure.sh MAX_SECONDS [--status N] REGEX [REGEX...] -- COMMAND [ARGS...]
#
# The status must be N when given; otherwise any of 1-123, a failure the command itself
# reported: not 124-127 (timeout(1) ran out, or could not run it) and not 128 and above
# (a process that died by a signal: a crash in the failure path would print its lines
# first and then pass as "non-zero").
#
# Used for the communicator's failure paths (a peer that never answers, a rank that
# dies), where "the job ended, in time, saying why" is the thing under test.
set -uo pipefail
max="$1"
shift
want_status=""
if [[ "${1:-}" == --status ]]; then
  want_status="$2"
  shift 2
fi
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
elif [[ -n "$want_status" ]] && ((status != want_status)); then
  echo "FAIL: exit status $status, expected $want_status"
  fail=1
elif [[ -z "$want_status" ]] && ((status >= 124)); then
  echo "FAIL: exit status $status: timed out or ended by a signal, not a failure the command reported"
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
