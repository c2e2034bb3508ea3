#!/usr/bin/env bash
# Runs a command with at most SHARE of one core: CPU time per wall-clock time, enforced by
# the kernel's CFS bandwidth control in a cgroup of the command's own (quota = SHARE x
# period, every PERIOD_US microseconds, default 10000).
#
#   scripts/cpu_share.sh SHARE CMD [ARG...]      e.g. mpirun -np 4 scripts/cpu_share.sh 0.5 train ...
#
# Why: p pipeline ranks on fewer than p cores measure the contention for the cores, not
# the schedule. A rank that waits frees its core, and the ranks still computing run
# faster for a while, so the idle time the schedule causes is not the idle time seen.
# Capped at SHARE each, with p x SHARE <= cores, no rank ever waits for a core and none
# can run faster than SHARE: each computes as on a dedicated core of SHARE the speed,
# whatever the others do. A bubble is a ratio of times, so it does not depend on the
# speed. (The cap is paid out per period: after a wait a rank runs at full speed until
# it has used SHARE x period, so the work it measures should be long next to a period.
# Periods shorter than 10 ms are not recommended: the kernel accounts in scheduler ticks, 4 ms
# here, and a 2 ms period gave 0.33 of a core for a share of 0.5.)
#
# Needs root and the cgroup cpu controller (v1 under /sys/fs/cgroup/cpu, or v2 with
# `cpu` enabled). Exits 2 naming what is missing; the command's own status otherwise.
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"  # as lib.sh's print_help (not sourced here)
  exit 0
fi
if (($# < 2)); then
  sed -n '2,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
fi
share=$1
shift
period=${PERIOD_US:-10000}
refuse() { echo "cpu_share: $*" >&2; exit 2; }
[[ $share =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v s="$share" 'BEGIN { exit !(s > 0 && s <= 1) }' ||
  refuse "SHARE '$share' must be a fraction of one core in (0, 1]"
[[ $period =~ ^[0-9]+$ ]] && ((period >= 1000 && period <= 1000000)) ||
  refuse "PERIOD_US '$period' must be 1000..1000000 microseconds"
quota=$(awk -v s="$share" -v p="$period" 'BEGIN { q = int(s * p + 0.5); print (q < 1000 ? 1000 : q) }')

# The cgroup: v1's cpu hierarchy, else v2's unified one.
if [[ -f /sys/fs/cgroup/cpu/cgroup.procs ]]; then
  root=/sys/fs/cgroup/cpu
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2> /dev/null; then
  root=/sys/fs/cgroup
else
  refuse "no writable cgroup cpu controller (needs root; cgroup v1 /sys/fs/cgroup/cpu or v2 with cpu enabled)"
fi
# Where this shell is now, to go back to at the end (a container's or a job's own group,
# not the hierarchy's root): v1 names the cpu hierarchy's path, v2 the one path ("0::").
if [[ $root == /sys/fs/cgroup/cpu ]]; then
  home=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3; exit }' /proc/self/cgroup)
else
  home=$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup)
fi
home="$root${home%/}"
group="$root/gpt_cpu_share_$$"
mkdir "$group" 2> /dev/null || refuse "cannot create $group (not root?)"
cleanup() {
  # Back where it came from (else to the root), so that the group, empty, can go.
  echo $$ > "$home/cgroup.procs" 2> /dev/null || echo $$ > "$root/cgroup.procs" 2> /dev/null || true
  rmdir "$group" 2> /dev/null || true
}
trap cleanup EXIT
if [[ $root == /sys/fs/cgroup/cpu ]]; then
  echo "$period" > "$group/cpu.cfs_period_us"
  echo "$quota" > "$group/cpu.cfs_quota_us"
else
  echo "$quota $period" > "$group/cpu.max"
fi
echo $$ > "$group/cgroup.procs"  # this shell, and so the command it starts
status=0
"$@" || status=$?
exit "$status"
