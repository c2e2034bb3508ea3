#!/usr/bin/env bash
# The default corpus: the English fortunes of Debian's `fortunes` package.
#
#   datasets/prepare_fortunes.sh [OUT_DIR] [PREPARE_BIN]
#
# OUT_DIR defaults to data/fortunes, PREPARE_BIN to build/bin/prepare (both relative
# to the current directory, normally the repository root). Writes OUT_DIR/train.bin
# and OUT_DIR/val.bin, byte-level tokens, 5% for validation.
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
script=${BASH_SOURCE[0]}

if [[ ! -d $source_dir ]]; then
  echo "prepare_fortunes: $source_dir not found; install the fortunes package:" >&2
  echo "  sudo apt-get install fortunes" >&2
  exit 2
fi

# Idempotent: shards newer than this recipe are the recipe's output already.
if [[ -f $out_dir/train.bin && -f $out_dir/val.bin &&
      $out_dir/train.bin -nt $script && $out_dir/val.bin -nt $script ]]; then
  echo "prepare_fortunes: $out_dir/train.bin and val.bin are up to date; skipping"
  exit 0
fi

if [[ ! -x $prepare_bin ]]; then
  echo "prepare_fortunes: no prepare binary at $prepare_bin;" \
       "build it with: cmake --build build --target prepare" >&2
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
echo "prepare_fortunes: ${#files[@]} files from $source_dir, $(wc -c <"$text") bytes"

# --force: shards older than this recipe are its own earlier output, made anew.
"$prepare_bin" --out "$out_dir" --val-fraction 0.05 --force "$text"
