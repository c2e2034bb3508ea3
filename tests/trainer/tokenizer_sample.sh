#!/usr/bin/env bash
# The sample goes through the config's tokenizer. Bit for bit: a tokenizer file that
# lists the 256 bytes in order gives the byte tokenizer's sample exactly (same ids,
# same text); the control, a file with the bytes reversed, gives another. With a BPE
# vocabulary: prepare --tokenizer writes the shards, stage 01 trains on them, and the
# sample begins with the prompt (encoded, then decoded) and is text of that vocabulary.
# Usage: tokenizer_sample.sh TRAIN PREPARE PYTHON WORK ROOT
set -euo pipefail
TRAIN=$1 PREPARE=$2 PY=$3 WORK=$4 ROOT=$5
source "$(dirname "$0")/common.sh"
REF="$ROOT/tests/tokenizer/reference_bpe.py"
"$PY" -c 'import regex' 2> /dev/null || { echo "skipped: $PY has no regex module (Debian's python3-regex)"; exit 77; }
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"

# sample_of RUN_NAME [--set ...]: trains 3 steps, prints the sample's text from the metrics.
sample_of() {
  local name=$1
  shift
  "$TRAIN" $(tiny_args "$WORK/data" "$WORK/$name") --set steps=3 --set sample_tokens=40 \
    --set checkpoint_at_end=false "$@" > "$WORK/$name.log" 2>&1 || { tail -5 "$WORK/$name.log"; return 1; }
  "$PY" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(json.dumps([r["text"] for r in rows if r.get("kind") == "sample"]))' "$WORK/$name/metrics.jsonl"
}

"$PY" "$REF" vocab identity 0 /dev/null "$WORK/identity.bin"
"$PY" "$REF" vocab reversed 0 /dev/null "$WORK/reversed.bin"
bytes=$(sample_of bytes)
identity=$(sample_of identity --set "tokenizer=$WORK/identity.bin")
reversed=$(sample_of reversed --set "tokenizer=$WORK/reversed.bin")
echo "bytes:    $bytes"
echo "identity: $identity"
echo "reversed: $reversed"
[[ $bytes != "[]" ]] || fail "no sample in the metrics"
[[ $identity == "$bytes" ]] && echo "ok   a file of the 256 bytes in order samples what the byte tokenizer samples" ||
  fail "the identity file's sample differs from the byte tokenizer's"
[[ $reversed != "$bytes" ]] && echo "ok   the control, the bytes reversed, samples another text" ||
  fail "the reversed file's sample is the byte tokenizer's: the tokenizer is not used"

# BPE: a vocabulary learned from the corpus, the shards written with it.
"$PY" "$REF" vocab trained 1 "$WORK/corpus.txt" "$WORK/trained.bin"
vocab=$("$PY" -c 'import struct, sys; print(struct.unpack_from("<I", open(sys.argv[1], "rb").read(), 8)[0])' "$WORK/trained.bin")
"$PREPARE" --out "$WORK/bpe_data" --val-fraction 0.1 --tokenizer "$WORK/trained.bin" "$WORK/corpus.txt" > /dev/null
bpe=$("$TRAIN" $(tiny_args "$WORK/bpe_data" "$WORK/bpe") --set steps=30 --set sample_tokens=40 \
  --set checkpoint_at_end=false --set "vocab_size=$vocab" --set "tokenizer=$WORK/trained.bin" \
  --set "prompt=The quick brown" 2>&1) || { echo "$bpe" | tail -5; fail "stage 01 did not train with a BPE vocabulary"; }
text=$("$PY" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print([r["text"] for r in rows if r.get("kind") == "sample"][0])' "$WORK/bpe/metrics.jsonl")
echo "BPE ($vocab tokens): $text"
[[ $text == "The quick brown"* ]] && echo "ok   the BPE sample begins with its prompt" || fail "the BPE sample does not begin with its prompt"
# A token per byte would give the prompt and 40 characters; this vocabulary's tokens
# are longer, and decoding them gives more.
((${#text} > 15 + 40)) && echo "ok   40 BPE tokens decode to ${#text} characters" ||
  fail "40 BPE tokens after the prompt decoded to only ${#text} characters"

((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "all tokenizer sample checks passed"
