#!/usr/bin/env bash
# The pipeline_schedule tool: --help exits 0 with the usage; a bad value (not a whole
# number, trailing text, out of range, not a number, a cost so large its sums overflow)
# exits 2 naming the option and the value, an unknown option last as unknown, an option
# given twice as such; a good call prints one timeline row and one bubble line per rank,
# and a call whose timeline would be millions of cells wide prints a note in its place.
# Usage: schedule_tool.sh PIPELINE_SCHEDULE
set -uo pipefail
TOOL=$1 failures=0
expect_refused() {  # NEEDLE ARGS...
  local needle=$1 out status
  shift
  out=$("$TOOL" "$@" 2>&1); status=$?
  if [ "$status" -ne 2 ] || ! grep -qF -- "$needle" <<< "$out"; then
    echo "FAIL: $* exited $status, expected 2 and '$needle':"; echo "$out" | head -3; failures=$((failures + 1))
  else echo "ok: $* -> $out"; fi
}
expect_refused "--pp abc"         --pp abc
expect_refused "--pp 2x"          --pp 2x
expect_refused "--pp 100000"      --pp 100000
expect_refused "--micro 0"        --micro 0
expect_refused "--virtual -1"     --virtual -1
expect_refused "--tf fast"        --tf fast
expect_refused "needs a value"    --pp
expect_refused "unknown option"   --stages 3
expect_refused "unknown option --bogus" --pp 2 --bogus
expect_refused "at most 1e12"     --tf 1e308 --tb 1e308
expect_refused "option --pp is given twice" --pp 2 --pp 3
expect_refused "option --schedule is given twice" --schedule gpipe --schedule 1f1b
"$TOOL" --help | grep -q "usage: pipeline_schedule" || { echo "FAIL: --help prints no usage"; failures=$((failures + 1)); }
out=$("$TOOL" --schedule interleaved --pp 3 --micro 5 --virtual 2) || { echo "FAIL: a good call failed"; failures=$((failures + 1)); }
rows=$(grep -c '^rank [0-9] |' <<< "$out"); bubbles=$(grep -c '^rank [0-9]: bubble' <<< "$out")
[ "$rows" -eq 3 ] && [ "$bubbles" -eq 3 ] || { echo "FAIL: expected 3 timeline rows and 3 bubble lines, got $rows and $bubbles"; failures=$((failures + 1)); }
# A cost far below the others (W nearly free) would make each row millions of cells
# wide: the timeline is left out, the bubble lines are printed.
out=$("$TOOL" --pp 4 --micro 8 --tw 1e-9 --schedule zb-h1) ||
  { echo "FAIL: --tw 1e-9 failed"; failures=$((failures + 1)); }
bubbles=$(grep -c '^rank [0-9]: bubble' <<< "$out")
grep -q "timeline not drawn: .* cells wide" <<< "$out" && [ "$bubbles" -eq 4 ] && [ ${#out} -lt 4000 ] &&
  echo "ok: --tw 1e-9 -> $(grep "timeline not drawn" <<< "$out")" ||
  { echo "FAIL: --tw 1e-9: expected a note and 4 bubble lines, got ${#out} characters"; failures=$((failures + 1)); }
# GPipe runs no W action: a tiny --tw leaves its timeline as it is.
out=$("$TOOL" --pp 4 --micro 8 --tw 1e-9 --schedule gpipe) ||
  { echo "FAIL: gpipe --tw 1e-9 failed"; failures=$((failures + 1)); }
rows=$(grep -c '^rank [0-9] |' <<< "$out")
[ "$rows" -eq 4 ] && echo "ok: gpipe --tw 1e-9 -> 4 timeline rows" ||
  { echo "FAIL: gpipe --tw 1e-9: $rows timeline rows, expected 4"; failures=$((failures + 1)); }
[ "$failures" -eq 0 ] && echo PASS
