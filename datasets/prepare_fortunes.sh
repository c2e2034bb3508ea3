#!/usr/bin/env bash
# The default corpus: the English fortunes of Debian's `fortunes` package.
#
#   datasets/prepare_fortunes.sh [OUT_DIR] [PREPARE_BIN]
#
# OUT_DIR defaults to data/fortunes, PREPARE_BIN to build/bin/prepare (both relative
# to the current directory, normally the repository root). Writes OUT_DIR/train.bin
# and OUT_DIR/val.bin, byte-level tokens, 5% for validation. Run again, it leaves shards
# that hold this text as they are, remakes the ones it wrote before from another text
# (a newer fortunes package), and refuses to replace shards it did not write.
#
# Why fortunes: a few MB of varied English (quotes, jokes, verse) that every Debian
# machine can install offline, small enough for a CPU demo run, large enough that a
# small GPT visibly learns words and layout.
set -euo pipefail

case "${1:-}" in
  -h | --help) sed -n '2,12s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
  -*) echo "error: unknown option '$1' (arguments: [OUT_DIR] [PREPARE_BIN]; --help)" >&2; exit 2 ;;
esac
(($# <= 2)) || { echo "error: at most OUT_DIR and PREPARE_BIN, not $# arguments" >&2; exit 2; }
out_dir=${1:-data/fortunes}
prepare_bin=${2:-build/bin/prepare}
source_dir=/usr/share/games/fortunes

if [[ ! -d $source_dir ]]; then
  echo "prepare_fortunes: $source_dir not found; install the fortunes package:" >&2
  echo "  sudo apt-get install fortunes" >&2
  exit 2
fi

# The English fortune files are the plain files at the top of $source_dir. Skipped:
# *.dat (strfile's binary index), *.u8 (symlinks to the same text), and directories
# such as off/ (the offensive set of fortunes-off) or other languages' collections.
files=()
while IFS= read -r -d '' file; do
  case $file in *.dat | *.u8) continue ;; esac
  # Text only: grep -I treats a file with NUL bytes as binary and matches nothing.
  LC_ALL=C grep -Iq . "$file" || continue
  files+=("$file")
done < <(find "$source_dir" -maxdepth 1 -type f -print0 | LC_ALL=C sort -z)

if [[ ${#files[@]} -eq 0 ]]; then
  echo "prepare_fortunes: no fortune text files in $source_dir;" \
       "reinstall the fortunes package" >&2
  exit 2
fi

# One text file: a '%' line separates two fortunes, so it becomes a blank line and
# every fortune is a paragraph; a blank line also closes each file.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
text=$work/fortunes.txt
for file in "${files[@]}"; do
  sed 's/^%$//' "$file"
  echo
done >"$text"

# Idempotent by content: shards whose tokens (a byte each, after the 1024-byte header,
# high bytes zero) are this text are this recipe's output already.
train=$out_dir/train.bin val=$out_dir/val.bin marker=$out_dir/.prepared_by_prepare_fortunes
shard_text() { tail -c +1025 "$1" | tr -d '\000'; }
if [[ -f $train && -f $val ]] && cmp -s <(shard_text "$train"; shard_text "$val") "$text"; then
  echo "prepare_fortunes: $train and $val hold these fortunes already; skipping"
  exit 0
fi
# Other shards there are replaced only when this script wrote them (its marker): a
# dataset of the user's under that name is not.
if [[ (-e $train || -e $val) && ! -f $marker ]]; then
  echo "prepare_fortunes: $out_dir holds train.bin or val.bin that this script did not write (no $marker):" \
       "give another OUT_DIR, or remove them" >&2
  exit 2
fi
if [[ ! -x $prepare_bin ]]; then
  echo "prepare_fortunes: no prepare binary at $prepare_bin;" \
       "build it with: cmake --build build --target prepare" >&2
  exit 2
fi
echo "prepare_fortunes: ${#files[@]} files from $source_dir, $(wc -c <"$text") bytes"

# --force: the shards there (if any) are this script's earlier output.
"$prepare_bin" --out "$out_dir" --val-fraction 0.05 --force "$text"
echo "made by datasets/prepare_fortunes.sh from $source_dir; it replaces these shards only while this file is here" \
  > "$marker"
