#!/usr/bin/env bash
# scripts/cpu_share.sh, which lets the pipeline benchmark run p ranks on fewer cores:
# a busy loop capped at a quarter of a core uses at most a quarter of the wall time (the
# kernel's bound: the quota of each 10 ms period, plus at most one period's quota at the
# start, so 0.25 + 2.5 ms / 1 s; 0.02 is left for the clocks' reading) and is throttled;
# the control, the same loop capped at a whole core, uses more than that bound. Bad
# shares exit 2. Skipped where no cgroup cpu controller can be written (not root): only
# that refusal skips; any other failure of the script fails the test.
# Usage: cpu_share.sh ROOT PYTHON
set -euo pipefail
ROOT=$1 PY=$2
SHARE="$ROOT/scripts/cpu_share.sh"
status=0
probe=$("$SHARE" 0.5 true 2>&1) || status=$?
if ((status != 0)); then
  if ((status == 2)) && grep -qE "no writable cgroup cpu controller|cannot create .*not root" <<< "$probe"; then
    echo "skipped: $probe"
    exit 77
  fi
  echo "FAIL: cpu_share.sh 0.5 true exited $status: $probe"
  exit 1
fi
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# busy: spins for 1 s of wall time, prints its CPU time per wall time and how often its
# cgroup was throttled.
busy() {
  "$SHARE" "$1" "$PY" -c '
import time
w0, c0 = time.monotonic(), time.process_time()
while time.monotonic() - w0 < 1.0:
    pass
ratio = (time.process_time() - c0) / (time.monotonic() - w0)
group = [l.rstrip("\n").split(":")[2] for l in open("/proc/self/cgroup") if l.split(":")[1] in ("cpu", "")][0]
for path in (f"/sys/fs/cgroup/cpu{group}/cpu.stat", f"/sys/fs/cgroup{group}/cpu.stat"):
    try:
        stat = dict(l.split() for l in open(path))
        break
    except OSError:
        pass
print("%.3f %s" % (ratio, stat["nr_throttled"]))'
}

read -r quarter throttled < <(busy 0.25)
echo "capped at 0.25: $quarter of the wall time in CPU, throttled $throttled times"
awk -v r="$quarter" 'BEGIN { exit !(r <= 0.25 + 0.0025 + 0.02) }' || fail "a quarter share used $quarter of a core"
((throttled > 0)) || fail "a quarter share was never throttled"
read -r whole _ < <(busy 1)
echo "capped at 1 (the control): $whole"
awk -v r="$whole" 'BEGIN { exit !(r > 0.25 + 0.0025 + 0.02) }' || fail "the control, a whole core, stayed under the quarter's bound"

for bad in 0 1.5 abc; do
  status=0
  "$SHARE" "$bad" true 2> err.txt || status=$?
  [[ $status == 2 ]] && grep -qF "SHARE '$bad'" err.txt && echo "ok   SHARE=$bad refused: $(cat err.txt)" ||
    fail "SHARE=$bad: exit $status, $(cat err.txt)"
done
((failures == 0)) || exit 1
echo "cpu_share caps and refuses as it should"
