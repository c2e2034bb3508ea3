#!/usr/bin/env bash
# What stage B adds to stage A, as a diff: one line naming it, then `diff -u` of the two
# drivers (train.cpp) and of the technique files B has of its own (shown whole, as new).
#
#   scripts/diff_stages.sh A B         e.g. scripts/diff_stages.sh 04 05, or 03_zero1 04_zero2
#   scripts/diff_stages.sh --count A B prints only the number of changed driver lines
#
# A and B name stage directories as scripts/run_stage.sh does (02, 2, 02_ddp). Shared
# code (common/, kernels/) is not shown: it is the same for both.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
case "${1:-}" in
  -h | --help) print_help; exit 0 ;;
esac
count_only=0
if [[ "${1:-}" == --count ]]; then count_only=1; shift; fi
usage="usage: scripts/diff_stages.sh [--count] A B (stage numbers or directory names; --help)"
for arg in "$@"; do
  [[ "$arg" != --count ]] || bad_input "--count goes before the stages; $usage"
  [[ "$arg" != -* ]] || bad_input "unknown option '$arg'; $usage"
done
(($# >= 2)) || bad_input "two stages needed, not $#; $usage"
(($# == 2)) || bad_input "unknown argument '$3' (two stages only); $usage"

stage_dir() {  # the stage directory a name or number means
  local want=$1 dir name matches=()
  [[ "$want" =~ ^[0-9]{1,3}$ ]] && want="$(printf '%02d_' "$((10#$want))")"
  for dir in "$GPT_ROOT"/stages/[0-9][0-9]_*/; do
    name="$(basename "$dir")"
    [[ "$name" == "$want" || "$name" == "$want"* ]] && matches+=("$name")
  done
  ((${#matches[@]} == 1)) ||
    bad_input "'$1' names ${#matches[@]} stages (stages: $(cd "$GPT_ROOT/stages" && ls -d [0-9][0-9]_* | tr '\n' ' '))"
  printf '%s\n' "${matches[0]}"
}
# One assignment each: `a=$(..) b=$(..)` on one line takes its status from the last only,
# and a bad A would go on as an empty name.
a="$(stage_dir "$1")"
b="$(stage_dir "$2")"
cd "$GPT_ROOT/stages"
if ((count_only)); then
  # Every removed and added line, blank ones and ones that start with - or + included;
  # only the two header lines (--- A, +++ B) are not changes.
  diff -u "$a/train.cpp" "$b/train.cpp" | tail -n +3 | grep -c '^[-+]' || true
  exit 0
fi
title="$(head -n 1 "$b/README.md" | sed 's/^# *//')"
printf '== %s -> %s: %s\n' "$a" "$b" "$title"
diff -u "$a/train.cpp" "$b/train.cpp" || true
for f in "$b"/*; do
  name="$(basename "$f")"
  [[ "$name" == train.cpp || "$name" == README.md || -e "$a/$name" ]] && continue
  diff -u /dev/null "$f" || true
done
