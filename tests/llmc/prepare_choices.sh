#!/usr/bin/env bash
# build/bin/prepare_choices (HellaSwag's JSON lines -> llm.c's eval file format) against an
# independent writer (prepare_choices_reference.py: llm.c's rendering of an example, the
# tokenizer's Python reference, the format as llm.c documents it), byte for byte:
#   1. 14 examples of random text in many scripts (2 to 5 endings, HellaSwag's other fields
#      present and ignored, a blank line skipped) with a BPE vocabulary trained on the text;
#   2. the same with the byte tokenizer, and with --limit 5 (a third of the labels are
#      strings of digits, as the Hugging Face copy of HellaSwag writes them);
#   3. the records chain by their size fields and agree with the header (the reader's
#      round trip of the writer is test_choices_file's);
#   4. bad input: each way a line can be wrong, named by its line number; an output that
#      exists is left as it was; unknown or malformed options: exit 2, named.
# Negative control: the reference with the endings encoded without their leading space
# must differ.
# Usage: prepare_choices.sh PREPARE_CHOICES ROOT WORK
set -euo pipefail
TOOL=$1 ROOT=$2 WORK=$3
PY=/usr/bin/python3
BPE=("$PY" "$ROOT/tests/tokenizer/reference_bpe.py")
REF=("$PY" "$ROOT/tests/llmc/prepare_choices_reference.py")
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$PY" -c "import regex" 2> /dev/null || { echo "skipped: $PY lacks the regex module (python3-regex)"; exit 77; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
source "$ROOT/tests/llmc/refused.sh"  # refused NAME NEEDLE CMD...

"${BPE[@]}" text 7 20000 corpus.txt
"${BPE[@]}" vocab trained 7 corpus.txt vocab.bin
"$PY" - << 'PY'
import json, random, sys
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
text = open("corpus.txt", encoding="utf-8").read()
rng = random.Random(3)
def snippet(lo, hi):
    start = rng.randrange(len(text) - hi)
    return text[start:start + rng.randint(lo, hi)].strip() or "x"
with open("examples.jsonl", "w", encoding="utf-8") as f:
    for i in range(14):
        endings = [snippet(1, 60) for _ in range(rng.randint(2, 5))]
        item = {"ind": 1000 + i, "activity_label": snippet(3, 12), "ctx_a": "a", "ctx_b": "b",
                "ctx": snippet(5, 120), "split": "val", "split_type": "indomain",
                "label": rng.randrange(len(endings)), "endings": endings, "source_id": f"s~{i}"}
        if i % 3 == 0:
            item["label"] = str(item["label"])  # as the Hugging Face copy writes it
        f.write(json.dumps(item, ensure_ascii=(i % 2 == 0)) + "\n")
        if i == 6:
            f.write("\n")
PY

# same NAME TOOL_ARGS... -- REF_ARGS...: the tool's file equals the reference's.
same() {
  local name=$1 tool=() ref=()
  shift
  while [ "$1" != -- ]; do tool+=("$1"); shift; done
  shift
  ref=("$@")
  rm -f "$name.bin" "$name.want.bin"
  "$TOOL" examples.jsonl "$name.bin" "${tool[@]}" > "$name.log" 2>&1 || { fail "$name: the tool failed"; cat "$name.log"; return; }
  "${REF[@]}" examples.jsonl "${ref[@]}" "$name.want.bin"
  if cmp -s "$name.bin" "$name.want.bin"; then echo "ok   $name: $(cat "$name.log")"
  else fail "$name: the file differs from the reference's"; cmp "$name.bin" "$name.want.bin" | head -2; fi
}
same bpe --tokenizer vocab.bin -- vocab.bin
same bytes --tokenizer bytes -- bytes
same limit --tokenizer vocab.bin --limit 5 -- vocab.bin --limit 5
"${REF[@]}" examples.jsonl vocab.bin no_space.bin --no-space
if cmp -s bpe.bin no_space.bin; then fail "control: the endings without their space give the same file"
else echo "ok   control: the endings without their leading space give another file"; fi
# Each record's start marker and size field lead to the next, and the header's counts agree.
for name in bpe bytes limit; do
  if out=$("$PY" - "$name.bin" << 'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
magic, version, n, longest = struct.unpack_from("<4i", data)
at, seen, most = 1024, 0, 0
while at < len(data):
    start, size = struct.unpack_from("<2H", data, at)
    assert start == 65535, at
    most = max(most, size)
    at += size
    seen += 1
assert (magic, version, seen, most) == (20240522, 1, n, longest) and at == len(data)
print(n)
PY
  ); then echo "ok   $name: $out examples, the header agrees with the records"; else fail "$name: the records disagree with the header"; fi
done

echo "== bad input"
jsonl() { printf '%s\n' "$@" > bad.jsonl; }  # the lines of bad.jsonl
bad() { refused "$1" "$2" "$TOOL" bad.jsonl o.bin --tokenizer bytes; }  # bad NAME NEEDLE
good='{"ctx": "A man", "endings": [" sits", " runs"], "label": 1}'
jsonl "$good" '{"ctx": "x", "endings": ["a", "b"], "label": 0' ; bad "not JSON" "'bad.jsonl', line 2: not JSON"
jsonl '["ctx"]';                                       bad "not an object" "line 1: not a JSON object"
jsonl '{"endings": ["a", "b"], "label": 0}';            bad "no ctx"        'line 1: no "ctx" field'
jsonl '{"ctx": 5, "endings": ["a", "b"], "label": 0}';  bad "ctx a number"  '"ctx" is 5, not a string'
jsonl '{"ctx": "", "endings": ["a", "b"], "label": 0}'; bad "empty ctx"     '"ctx" is empty'
jsonl '{"ctx": "x", "endings": "a", "label": 0}';       bad "endings text"  '"endings" is "a", not an array'
jsonl '{"ctx": "x", "endings": ["a", 3], "label": 0}';  bad "ending number" 'line 1, ending 1 is 3, not a string'
jsonl '{"ctx": "x", "endings": ["a"], "label": 0}';     bad "one ending"    'line 1: 1 endings; a choice needs two'
jsonl '{"ctx": "x", "endings": ["a", "b"]}';            bad "no label"      'line 1: no "label" field'
jsonl '{"ctx": "x", "endings": ["a", "b"], "label": ""}'; bad "test split" "(HellaSwag's test split has no labels)"
jsonl '{"ctx": "x", "endings": ["a", "b"], "label": "b"}'; bad "label text" '"label" is "b", not an integer'
jsonl '{"ctx": "x", "endings": ["a", "b"], "label": 2}'; bad "label range"  '"label" is 2, not one of its 2 endings'
jsonl '{"ctx": "x", "endings": ["a", "b"], "label": 18446744073709551615}'; bad "label past int64" \
  '"label" is 18446744073709551615, not one of its endings'  # nlohmann holds it unsigned: not wrapped to -1
jsonl '' '  ';                                           bad "blank"         "no examples (every line is blank)"
jsonl '{"ctx": "x", "ctx": "y", "endings": ["a", "b"], "label": 0}'; bad "ctx twice" "line 1: key 'ctx' is given twice"
# Nesting that quoting a value would recurse through (100,000 levels overflowed the stack).
jsonl "{\"ctx\": $(printf '[%.0s' $(seq 100000))$(printf ']%.0s' $(seq 100000))}"; bad "deep" "line 1: nested deeper than 64"
refused "missing input"  "'nope.jsonl': no such file" "$TOOL" nope.jsonl o.bin --tokenizer bytes
refused "missing tokenizer" "no_tok.bin" "$TOOL" examples.jsonl o.bin --tokenizer no_tok.bin
refused "one file"       "expected EXAMPLES.jsonl and OUT.bin, got 1" "$TOOL" examples.jsonl
refused "no tokenizer"   "--tokenizer is required" "$TOOL" examples.jsonl o.bin
refused "unknown option" "unknown option '--frobnicate'" "$TOOL" examples.jsonl o.bin --frobnicate --tokenizer bytes
refused "limit zero"     "--limit: '0' is not a positive integer" "$TOOL" examples.jsonl o.bin --limit 0 --tokenizer bytes
refused "limit twice"    "--limit is given twice" "$TOOL" examples.jsonl o.bin --limit 1 --limit 2 --tokenizer bytes
cp bpe.bin kept.bin
refused "output exists"  "'kept.bin' exists" "$TOOL" examples.jsonl kept.bin --tokenizer bytes
mkdir -p ck/step_00000003 && echo '{}' > ck/step_00000003/manifest.json  # a checkpoint directory
refused "into a checkpoint" "ck/step_00000003 is a checkpoint directory" \
  "$TOOL" examples.jsonl ck/step_00000003/hs.bin --tokenizer bytes
[ ! -e ck/step_00000003/hs.bin ] || fail "the refused prepare_choices wrote into ck/step_00000003"
cmp -s bpe.bin kept.bin && echo "ok   the existing output is unchanged" || fail "the existing output changed"
ln -s nowhere.bin dangling.bin  # a link to nothing is a name taken as well
refused "output a dangling link" "'dangling.bin' exists" "$TOOL" examples.jsonl dangling.bin --tokenizer bytes
[ -L dangling.bin ] && [ ! -e nowhere.bin ] && echo "ok   the link is kept, its target not made" ||
  fail "the refused output replaced the link or made its target"
[ ! -e o.bin ] && [ ! -e o.bin.tmp ] && echo "ok   no refused run left a file" || fail "a refused run left o.bin"

[ "$failures" = 0 ] || { echo "FAIL: $failures"; exit 1; }
echo "prepare_choices writes the reference's files and refuses bad input by name"
