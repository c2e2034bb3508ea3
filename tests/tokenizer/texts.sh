# shellcheck shell=bash
# The texts the tokenizer comparisons encode, written into the current directory;
# sourced by vs_reference.sh and vs_tiktoken.sh. make_texts ROOT PYTHON sets `texts`:
#   prose.txt       the project's own English (README, the lessons, docs/)
#   documents.txt   the lessons as documents joined by end-of-text markers, each on one
#                   line (so a split at a document is not also one at a line)
#   random_N.txt    six random texts of every script and character class
#                   (reference_bpe.py text N)
make_texts() {
  local root=$1 py=$2 f seed
  cat "$root/README.md" "$root"/stages/*/README.md "$root"/docs/*.md > prose.txt
  for f in "$root"/stages/*/README.md; do tr '\n' ' ' < "$f"; printf '<|endoftext|>'; done > documents.txt
  texts=(prose.txt documents.txt)
  for seed in 1 2 3 4 5 6; do
    "$py" "$root/tests/tokenizer/reference_bpe.py" text "$seed" 20000 "random_$seed.txt"
    texts+=("random_$seed.txt")
  done
}
