#!/usr/bin/env bash
# expect_failure.sh's own controls: what it must reject, it rejects. A command that
# fails with another status than --status asks, one that a signal ends (without
# --status), one that times out, one that succeeds, and one whose output lacks a line
# the regular expressions ask for each make it exit non-zero; a command that fails as
# asked makes it exit 0.
#   expect_failure_self.sh EXPECT_FAILURE_SH
set -uo pipefail
tool=$1
failures=0
# verdict WANT WHAT ARGS...: expect_failure.sh ARGS must exit 0 (WANT pass) or not (reject).
verdict() {
  local want=$1 what=$2 status
  shift 2
  bash "$tool" "$@" > /dev/null 2>&1
  status=$?
  if { [ "$want" = pass ] && ((status == 0)); } || { [ "$want" = reject ] && ((status != 0)); }; then
    echo "ok   $what"
  else
    echo "FAIL $what: expect_failure.sh exited $status"
    failures=$((failures + 1))
  fi
}
verdict pass "status 3 as asked" 5 --status 3 "said x" -- bash -c 'echo said x; exit 3'
verdict pass "a reported failure, no status asked" 5 "said x" -- bash -c 'echo said x; exit 2'
verdict reject "status 2 where 3 is asked" 5 --status 3 "said x" -- bash -c 'echo said x; exit 2'
verdict reject "killed by a signal, no status asked" 5 "said x" -- bash -c 'echo said x; kill -9 $$'
verdict reject "a success" 5 "said x" -- bash -c 'echo said x'
verdict reject "a line missing" 5 "said y" -- bash -c 'echo said x; exit 2'
verdict reject "slower than its limit" 1 "said x" -- bash -c 'echo said x; sleep 2; exit 2'
((failures == 0)) || { echo "FAIL: $failures"; exit 1; }
echo "expect_failure.sh rejects what it must"
