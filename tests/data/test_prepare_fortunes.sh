#!/usr/bin/env bash
# The default corpus recipe end to end:  test_prepare_fortunes.sh SCRIPT PREPARE
# Runs datasets/prepare_fortunes.sh into a temporary directory, checks both shards
# are written, then that a second run skips. Exits 77 (CTest: skipped) where the
# fortunes package is not installed.
set -u
script=$1
prepare=$2
if [[ ! -d /usr/share/games/fortunes ]]; then
  echo "SKIP: /usr/share/games/fortunes missing (apt-get install fortunes)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash "$script" "$work/fortunes" "$prepare" || { echo "FAIL: recipe exited $?"; exit 1; }
for split in train val; do
  size=$(stat -c %s "$work/fortunes/$split.bin" 2>/dev/null || echo 0)
  # More than the 1024-byte header: the split holds tokens.
  [[ $size -gt 1024 ]] || { echo "FAIL: $split.bin missing or empty"; exit 1; }
done
second=$(bash "$script" "$work/fortunes" "$prepare") || { echo "FAIL: second run failed"; exit 1; }
echo "$second"
[[ $second == *"up to date"* ]] || { echo "FAIL: second run did not skip"; exit 1; }
echo "PASS"
