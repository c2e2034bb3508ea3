# shellcheck shell=bash
# The texts the tokenizer comparisons encode, written into the current directory;
# sourced by vs_reference.sh and vs_tiktoken.sh. make_texts ROOT PYTHON sets `texts`:
#   prose.txt       the project's own English (README, the lessons, docs/)
#   documents.txt   the lessons as documents joined by end-of-text markers, each on one
#                   line (so a split at a document is not also one at a line)
#   random_N.txt    six random texts of every script and character class
#                   (reference_bpe.py text N), 20000 characters each
# With GPT_TEST_QUICK=1 (the sanitizer pass of scripts/test.sh, which looks for memory
# errors in the C++ side) the texts are shorter, every kind still there: prose is the
# README alone, each document the first 40 lines of its lesson, and the random texts
# 5000 characters; the pure-Python reference took most of the test's time on the long ones.
make_texts() {
  local root=$1 py=$2 f seed lines=100000 chars=20000
  if [[ "${GPT_TEST_QUICK:-0}" == 1 ]]; then
    lines=40 chars=5000
    cat "$root/README.md" > prose.txt
  else
    cat "$root/README.md" "$root"/stages/*/README.md "$root"/docs/*.md > prose.txt
  fi
  for f in "$root"/stages/*/README.md; do
    head -n "$lines" "$f" | tr '\n' ' '
    printf '<|endoftext|>'
  done > documents.txt
  texts=(prose.txt documents.txt)
  for seed in 1 2 3 4 5 6; do
    "$py" "$root/tests/tokenizer/reference_bpe.py" text "$seed" "$chars" "random_$seed.txt"
    texts+=("random_$seed.txt")
  done
}
