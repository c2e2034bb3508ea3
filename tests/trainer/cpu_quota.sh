#!/usr/bin/env bash
# The scripts count the cores a process may use (scripts/lib.sh: machine_cores, which sets
# scripts/test.sh's tests at once and scripts/run_stage.sh's threads per rank) within its
# cgroup's CPU quota, as a container's --cpus sets it, not the machine's: in a child cgroup
# made for the test, a quota of half a CPU counts 1 core, one of 1.5 CPUs 2 (rounded up),
# each at most nproc's count; without a quota (the control), nproc's count.
# Skipped (77) where no CPU cgroup can be made (not root, a read-only cgroup file system,
# no cpu controller).
# Usage: cpu_quota.sh ROOT
set -euo pipefail
ROOT=$1
self=$(cat /proc/self/cgroup)
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # v2: cpu.max "QUOTA PERIOD"
  base=/sys/fs/cgroup$(grep '^0::' <<< "$self" | cut -d: -f3-)
  set_quota() { if [ "$1" = none ]; then echo "max 100000"; else echo "$1 100000"; fi > "$group/cpu.max"; }
  enable() { echo +cpu > "$base/cgroup.subtree_control"; }
elif [ -d /sys/fs/cgroup/cpu ]; then  # v1: cpu.cfs_quota_us over cpu.cfs_period_us
  base=/sys/fs/cgroup/cpu$(sed -nE 's/^[0-9]+:([^:]*,)?cpu(,[^:]*)?:(.*)/\3/p' <<< "$self" | head -1)
  [ -d "$base" ] || base=/sys/fs/cgroup/cpu
  set_quota() {
    echo 100000 > "$group/cpu.cfs_period_us"
    if [ "$1" = none ]; then echo -1; else echo "$1"; fi > "$group/cpu.cfs_quota_us"
  }
  enable() { :; }
else
  echo "skipped: no cgroup file system"; exit 77
fi
group="$base/gpt_test_cpu_quota_$$"
if ! enable 2> /dev/null || ! mkdir "$group" 2> /dev/null || ! set_quota 50000 2> /dev/null; then
  rmdir "$group" 2> /dev/null || true
  echo "skipped: cannot make a CPU cgroup with a quota under $base (not root, or not delegated)"; exit 77
fi
trap 'rmdir "$group" 2> /dev/null || true' EXIT

nproc_cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
failures=0
# counted QUOTA EXPECTED: machine_cores in a shell moved into the group under QUOTA.
counted() {
  local got
  set_quota "$1"
  got=$(bash -c 'echo $$ > "$1/cgroup.procs" && source "$2/scripts/lib.sh" && machine_cores' _ "$group" "$ROOT")
  if [ "$got" = "$2" ]; then echo "ok   quota $1 (of 100000 us a period): $got cores"
  else echo "FAIL: quota $1: machine_cores counted $got, expected $2"; failures=$((failures + 1)); fi
}
min() { echo $(($1 < $2 ? $1 : $2)); }
counted 50000 1
counted 150000 "$(min 2 "$nproc_cores")"
counted none "$nproc_cores"  # the control: no quota, nproc's count
[ $failures = 0 ] || exit 1
echo "the scripts count the cores within the cgroup's CPU quota"
