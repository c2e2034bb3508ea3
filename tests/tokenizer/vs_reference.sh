#!/usr/bin/env bash
# The C++ tokenizer against the Python reference (reference_bpe.py): the same pieces
# and the same ids, on random texts of every character class and on English prose, for
# vocabularies learned by BPE training and of random substrings; prepare --tokenizer
# writes those ids. Each comparison has a control the check must reject: the reference
# with white space that keeps its last character, and BPE that merges the rightmost of
# equal-rank pairs. With GPT_TEST_QUICK=1 (the sanitizer pass of scripts/test.sh, which
# looks for memory errors in the C++ side) the controls, Python runs alone, are left to
# the default pass, and the texts are shorter (texts.sh).
# Usage: vs_reference.sh TOKENIZE PREPARE PYTHON WORK ROOT
set -euo pipefail
TOKENIZE=$1 PREPARE=$2 PY=$3 WORK=$4 ROOT=$5
REF="$(dirname "$0")/reference_bpe.py"
"$PY" -c 'import regex' 2> /dev/null || { echo "skipped: $PY has no regex module (Debian's python3-regex)"; exit 77; }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
failures=0
source "$ROOT/tests/trainer/common.sh"  # quick_run
controls=1
quick_run && { controls=0; echo "quick run (GPT_TEST_QUICK=1): the controls are left to the default pass"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Texts (texts.sh): prose, documents joined by end-of-text, six random texts.
source "$ROOT/tests/tokenizer/texts.sh"
make_texts "$ROOT" "$PY"

# Pieces.
for t in "${texts[@]}"; do
  "$TOKENIZE" --pieces < "$t" > cc.txt
  "$PY" "$REF" pieces "$t" > py.txt
  if cmp -s cc.txt py.txt; then echo "ok   pieces of $t: $(wc -l < cc.txt) the same"
  else fail "pieces of $t differ"; diff cc.txt py.txt | head -5; fi
  ((controls)) || continue
  "$PY" "$REF" pieces "$t" --control > control.txt
  if [[ $t == random_* ]] && cmp -s cc.txt control.txt; then fail "the pieces control was accepted on $t"; fi
done

# Ids, for two learned and two random-substring vocabularies.
"$PY" "$REF" vocab trained 1 prose.txt trained_prose.bin
"$PY" "$REF" vocab trained 1 random_1.txt trained_random.bin
"$PY" "$REF" vocab substrings 1 prose.txt substrings_prose.bin
"$PY" "$REF" vocab substrings 2 random_2.txt substrings_random.bin
for v in trained_prose trained_random substrings_prose substrings_random; do
  rejected=0
  for t in "${texts[@]}"; do
    "$TOKENIZE" --tokenizer "$v.bin" < "$t" | cut -d' ' -f1 > cc.txt
    "$PY" "$REF" encode "$v.bin" "$t" > py.txt
    cp py.txt "reference_${v}_$t.ids"  # for prepare below
    if cmp -s cc.txt py.txt; then echo "ok   $v on $t: $(wc -l < cc.txt) ids the same"
    else fail "$v on $t: the ids differ"; diff cc.txt py.txt | head -5; fi
    ((controls)) || continue
    "$PY" "$REF" encode "$v.bin" "$t" --control > control.txt
    cmp -s cc.txt control.txt || rejected=$((rejected + 1))
  done
  if ((controls)); then
    ((rejected > 0)) || fail "$v: the rightmost-merge control gave the same ids on every text"
    echo "     $v: the control differs on $rejected of ${#texts[@]} texts"
  fi
  # The end-of-text text stands for its token: ids the plain encoding does not give.
  "$TOKENIZE" --tokenizer "$v.bin" < documents.txt | cut -d' ' -f1 > cc.txt
  if ((controls)); then
    "$PY" "$REF" encode "$v.bin" documents.txt --plain > control.txt
    cmp -s cc.txt control.txt && fail "$v: the documents encode as if the end-of-text text were plain text"
  fi
  eot=$(printf '<|endoftext|>' | "$TOKENIZE" --tokenizer "$v.bin" | cut -d' ' -f1)
  documents=$(ls "$ROOT"/stages/*/README.md | wc -l)
  [[ $(grep -cx "$eot" cc.txt) == "$documents" ]] && echo "     $v: the $documents markers are end-of-text, id $eot" ||
    fail "$v: $(grep -cx "$eot" cc.txt) ids $eot in documents.txt, not one per document ($documents)"
done

# Decoding gives the text back.
"$TOKENIZE" --tokenizer trained_prose.bin < prose.txt | cut -d' ' -f1 | "$TOKENIZE" --tokenizer trained_prose.bin --decode > decoded.txt
cmp -s decoded.txt prose.txt && echo "ok   decode(encode(prose)) is the prose" || fail "decode(encode(prose)) is not the prose"

# prepare --tokenizer writes the reference's ids (train then val: the whole text).
"$PREPARE" --out prepared --tokenizer trained_prose.bin prose.txt > /dev/null
"$PY" "$REF" shard prepared/train.bin prepared/val.bin > cc.txt
"$PY" "$REF" encode trained_prose.bin prose.txt > py.txt
cmp -s cc.txt py.txt && echo "ok   prepare --tokenizer: $(wc -l < cc.txt) tokens, the reference's" ||
  fail "prepare --tokenizer wrote other ids than the reference"

# prepare reads a file a block at a time: blocks of 3 bytes, far shorter than a line or
# a word, encoded one at a time or three at once, still give the reference's ids on every
# text, markers and all (test_tokenizer has the control: blocks encoded whole give other ids).
for t in "${texts[@]}"; do
  for threads in 1 3; do
    out="prepared_blocks_${threads}_$t"
    "$PREPARE" --out "$out" --read-bytes 3 --threads $threads --tokenizer trained_prose.bin "$t" > /dev/null
    "$PY" "$REF" shard "$out/train.bin" "$out/val.bin" > cc.txt
    cmp -s cc.txt "reference_trained_prose_$t.ids" &&
      echo "ok   prepare --read-bytes 3 --threads $threads on $t: the reference's ids" ||
      fail "prepare --read-bytes 3 --threads $threads on $t wrote other ids than the reference"
  done
done

# prepare --tokenizer starts val at a document: documents.txt has no newline, so the
# cut moves forward to the next end-of-text token.
"$PREPARE" --out prepared_docs --val-fraction 0.3 --tokenizer trained_prose.bin documents.txt > /dev/null
eot=$(printf '<|endoftext|>' | "$TOKENIZE" --tokenizer trained_prose.bin | cut -d' ' -f1)
first_val=$("$PY" "$REF" shard prepared_docs/val.bin | awk "NR == 1")
[[ $first_val == "$eot" ]] && echo "ok   prepare --tokenizer: val starts at a document's end-of-text token" ||
  fail "prepare --tokenizer: val starts at token $first_val, not at end-of-text ($eot)"

# prepare --documents: each file starts with end-of-text, then its own ids. Without a
# tokenizer file there is no such token: refused.
"$PREPARE" --out prepared_files --documents --tokenizer trained_prose.bin random_1.txt prose.txt > /dev/null
"$PY" "$REF" shard prepared_files/train.bin prepared_files/val.bin > cc.txt
{ echo "$eot"; "$PY" "$REF" encode trained_prose.bin random_1.txt; echo "$eot"; "$PY" "$REF" encode trained_prose.bin prose.txt; } > py.txt
cmp -s cc.txt py.txt && echo "ok   prepare --documents: end-of-text, then each file's ids" ||
  fail "prepare --documents did not write end-of-text before each file's ids"
status=0
"$PREPARE" --out prepared_bytes --documents prose.txt > /dev/null 2> err.txt || status=$?
[[ $status == 2 ]] && grep -q "documents starts each file with the end-of-text token" err.txt && [[ ! -e prepared_bytes ]] &&
  echo "ok   prepare --documents with bytes: $(cat err.txt)" || fail "prepare --documents with bytes: exit $status, $(cat err.txt)"

# A byte that is no token: refused, naming the byte, its offset and the file.
"$PY" "$REF" vocab no_nul 0 prose.txt no_nul.bin
status=0
printf 'ab\0c' | "$TOKENIZE" --tokenizer no_nul.bin > /dev/null 2> err.txt || status=$?
if [[ $status == 2 ]] && grep -qF "byte 0x00 at offset 2 is no token of no_nul.bin" err.txt; then
  echo "ok   a byte outside the vocabulary: $(cat err.txt)"
else fail "a byte outside the vocabulary: exit $status, $(cat err.txt)"; fi
# prepare on three threads says the error one thread would: the first in the inputs'
# order, at its offset in its file, though a later block's error may come first.
printf 'ab ab cd\0ef' > bad_first.txt && printf '\0' > bad_second.txt
status=0
"$PREPARE" --out prepared_bad --read-bytes 3 --threads 3 --tokenizer no_nul.bin bad_first.txt bad_second.txt \
  > /dev/null 2> err.txt || status=$?
if [[ $status == 2 ]] && grep -qF "input 'bad_first.txt'" err.txt && grep -qF "byte 0x00 at offset 8" err.txt &&
   [[ ! -e prepared_bad ]]; then echo "ok   prepare's first error in input order: $(cat err.txt)"
else fail "prepare with two bad inputs on 3 threads: exit $status, $(cat err.txt)"; fi
# --pieces are the pre-tokenizer's, whatever the file: a --tokenizer beside it (even one
# that does not exist) would go unread, so it is refused.
status=0
echo hi | "$TOKENIZE" --tokenizer no_such_file.bin --pieces > /dev/null 2> err.txt || status=$?
[[ $status == 2 ]] && grep -qF -- "drop --tokenizer" err.txt && echo "ok   --pieces with --tokenizer: $(cat err.txt)" ||
  fail "--pieces with --tokenizer: exit $status, $(cat err.txt)"

# datasets/write_gpt2_tokenizer.py, on a stand-in for tiktoken's encoding (no network
# here): the file it writes loads, and each id decodes to the encoding's bytes for it.
mkdir -p stub
cat > stub/tiktoken.py <<'PY'
class Encoding:
    max_token_value = 300
    eot_token = 300
    def decode_single_token_bytes(self, token):
        return b"<|endoftext|>" if token == 300 else bytes([token]) if token < 256 else b"x" * (token - 254)
def get_encoding(name):
    assert name == "gpt2", name
    return Encoding()
PY
PYTHONPATH=stub "$PY" "$ROOT/datasets/write_gpt2_tokenizer.py" written/gpt2.bin > /dev/null
printf '104 105 256 299 300' | "$TOKENIZE" --tokenizer written/gpt2.bin --decode > decoded.txt
printf 'hixx%s<|endoftext|>' "$(printf 'x%.0s' $(seq 45))" > expected.txt
cmp -s decoded.txt expected.txt && echo "ok   write_gpt2_tokenizer.py writes a file that decodes as its encoding" ||
  fail "write_gpt2_tokenizer.py: decoded '$(cat decoded.txt)'"
[[ ! -e written/gpt2.bin.tmp ]] || fail "write_gpt2_tokenizer.py left its temporary file"

((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "all comparisons with the reference passed"
