#!/usr/bin/env bash
# The GPT-2 tokenizer against tiktoken on GPT-2's real vocabulary: the ranks fetched by
# scripts/setup_tiktoken.sh become a tokenizer file through datasets/write_gpt2_tokenizer.py
# --ranks (which checks their SHA-256 against r50k_base's), and build/bin/tokenize must
# give tiktoken's ids (encode with the end-of-text token allowed) on English prose,
# documents joined by <|endoftext|>, and six random texts of every character class.
# Controls the comparison must reject: tiktoken's plain encoding of the documents (the
# marker as text), and tiktoken with two ranks swapped. A ranks file that is not
# GPT-2's is refused by the writer.
# Usage: vs_tiktoken.sh TOKENIZE PYTHON WORK ROOT   (PYTHON: one with the regex module)
set -euo pipefail
TOKENIZE=$1 PY=$2 WORK=$3 ROOT=$4
PYPI="$ROOT/third_party_local/pypi"
TK="$PYPI/venv/bin/python" RANKS="$PYPI/gpt2.tiktoken"
[[ -x $TK && -f $RANKS ]] && "$TK" -c 'import tiktoken' 2> /dev/null ||
  { echo "skipped: no tiktoken or GPT-2 ranks in $PYPI (scripts/setup_tiktoken.sh fetches them)"; exit 77; }
"$PY" -c 'import regex' 2> /dev/null || { echo "skipped: $PY has no regex module (Debian's python3-regex)"; exit 77; }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$PY" "$ROOT/datasets/write_gpt2_tokenizer.py" --ranks "$RANKS" gpt2.bin
cat > tiktoken_ids.py <<'PY'
import sys
import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tiktoken_ext.openai_public import r50k_pat_str
ranks, text_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
enc = tiktoken.Encoding("gpt2_local", pat_str=r50k_pat_str, mergeable_ranks=load_tiktoken_bpe(ranks),
                        special_tokens={"<|endoftext|>": 50256})
text = open(text_path, encoding="utf-8", newline="").read()
ids = enc.encode_ordinary(text) if mode == "plain" else enc.encode(text, allowed_special="all")
print("\n".join(map(str, ids)))
PY

source "$ROOT/tests/tokenizer/texts.sh"  # prose, documents, six random texts
make_texts "$ROOT" "$PY"
for t in "${texts[@]}"; do
  "$TOKENIZE" --tokenizer gpt2.bin < "$t" | cut -d' ' -f1 > cc.txt
  "$TK" tiktoken_ids.py "$RANKS" "$t" special > tk.txt
  if cmp -s cc.txt tk.txt; then echo "ok   $t: $(wc -l < cc.txt) ids, tiktoken's"
  else fail "$t: the ids differ from tiktoken's"; diff cc.txt tk.txt | head -5; fi
done
"$TOKENIZE" --tokenizer gpt2.bin --decode < tk.txt > decoded.txt
cmp -s decoded.txt "${texts[-1]}" || fail "tiktoken's ids do not decode to their text"

# Controls.
"$TOKENIZE" --tokenizer gpt2.bin < documents.txt | cut -d' ' -f1 > cc.txt
"$TK" tiktoken_ids.py "$RANKS" documents.txt plain > control.txt
cmp -s cc.txt control.txt && fail "the documents give the ids of tiktoken's plain encoding too"
# tiktoken with the ranks of " t" (256) and " a" (257), GPT-2's first two merges, swapped.
"$TK" - "$RANKS" swapped.tiktoken <<'PY'
import sys
lines = open(sys.argv[1], "rb").read().splitlines()
(t, _), (a, _) = lines[256].split(), lines[257].split()
lines[256], lines[257] = a + b" 256", t + b" 257"
open(sys.argv[2], "wb").write(b"\n".join(lines) + b"\n")
PY
"$TOKENIZE" --tokenizer gpt2.bin < prose.txt | cut -d' ' -f1 > cc.txt
"$TK" tiktoken_ids.py swapped.tiktoken prose.txt special > control.txt
cmp -s cc.txt control.txt && fail "tiktoken with two ranks swapped gives the same ids"
status=0
"$PY" "$ROOT/datasets/write_gpt2_tokenizer.py" --ranks swapped.tiktoken refused.bin > /dev/null 2> err.txt || status=$?
if [[ $status != 0 ]] && grep -q "is not r50k_base's" err.txt && [[ ! -e refused.bin ]]; then
  echo "ok   ranks that are not GPT-2's are refused: $(cat err.txt)"
else fail "write_gpt2_tokenizer.py --ranks took ranks that are not GPT-2's (exit $status)"; fi

((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "the tokenizer gives tiktoken's ids on GPT-2's vocabulary"
