#!/usr/bin/env bash
# tokenize prints each token's bytes in quotes: a token that is whole UTF-8 as it is, and
# one that holds part of a character (GPT-2 cuts a character's bytes across tokens) with
# those bytes as \xNN, which a terminal would otherwise show as one replacement mark for
# any of them. A tokenizer of the 256 bytes, "é" (C3 A9, id 256), the first two bytes of
# "€" (E2 82, id 257) and an end-of-text token, in llm.c's format (version 2).
# Usage: shows_bytes.sh TOKENIZE PYTHON WORKDIR
set -euo pipefail
TOKENIZE=$1 PY=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$PY" - tokens.bin <<'PY'
import struct, sys
tokens = [bytes([b]) for b in range(256)] + ["é".encode(), "€".encode()[:2], b"<|endoftext|>"]
header = [20240328, 2, len(tokens), len(tokens) - 1] + [0] * 252
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256I", *header))
    for t in tokens:
        f.write(bytes([len(t)]) + t)
PY
printf 'é€\x01"' | "$TOKENIZE" --tokenizer tokens.bin > shown.txt
# The expected lines: é whole, € cut into 257 and its last byte, a control byte, a quote.
printf '%s\n' '256 "é"' '257 "\xE2\x82"' '172 "\xAC"' '1 "\x01"' '34 "\""' > expected.txt
if cmp -s shown.txt expected.txt; then echo "ok   whole UTF-8 as it is, cut characters' bytes as \\xNN"
else echo "FAIL: tokenize printed"; cat shown.txt; echo "expected"; cat expected.txt; exit 1; fi
