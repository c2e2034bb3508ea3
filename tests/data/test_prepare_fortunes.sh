#!/usr/bin/env bash
# The default corpus recipe end to end:  test_prepare_fortunes.sh SCRIPT PREPARE
# Runs datasets/prepare_fortunes.sh into a temporary directory, checks both shards
# are written, then that a second run skips. Shards of another text there, which it
# wrote (its marker), are made anew; shards it did not write (a dataset of the user's,
# even older than the recipe) are refused with exit 2 and left byte for byte. Exits 77
# (CTest: skipped) where the fortunes package is not installed.
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
[[ $second == *"hold these fortunes already"* ]] || { echo "FAIL: second run did not skip"; exit 1; }

# Its own shards of another text (an older fortunes package): made anew.
printf 'other text\n' > "$work/other.txt"
"$prepare" --out "$work/other" "$work/other.txt" > /dev/null
cp "$work/other/train.bin" "$work/fortunes/train.bin"
bash "$script" "$work/fortunes" "$prepare" > "$work/third.txt" || { echo "FAIL: the remake failed"; exit 1; }
third=$(bash "$script" "$work/fortunes" "$prepare")
[[ $third == *"hold these fortunes already"* ]] || { echo "FAIL: its own stale shards were not made anew"; exit 1; }
echo "ok: its own shards of another text made anew"

# A dataset of the user's in OUT_DIR, older than the recipe: refused, untouched.
mkdir -p "$work/mine" && echo precious > "$work/mine/train.bin" && echo v > "$work/mine/val.bin"
touch -d 2020-01-01 "$work/mine/train.bin" "$work/mine/val.bin"
status=0
bash "$script" "$work/mine" "$prepare" > "$work/mine.txt" 2>&1 || status=$?
[[ $status == 2 ]] && grep -q "that this script did not write" "$work/mine.txt" ||
  { echo "FAIL: another dataset in OUT_DIR: exit $status"; cat "$work/mine.txt"; exit 1; }
[[ "$(cat "$work/mine/train.bin")" == precious && "$(cat "$work/mine/val.bin")" == v ]] ||
  { echo "FAIL: the refused run changed the user's shards"; exit 1; }
echo "ok: $(cat "$work/mine.txt")"
echo "PASS"
