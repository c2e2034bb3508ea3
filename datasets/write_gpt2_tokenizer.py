#!/usr/bin/env python3
"""Writes GPT-2's vocabulary as a tokenizer file in llm.c's format (common/tokenizer.h),
from tiktoken's "gpt2" encoding: the tokenizer of shards made with tiktoken (llm.c's and
nanoGPT's scripts). Train with  --set vocab_size=50257 --set tokenizer=FILE.

  write_gpt2_tokenizer.py [OUT]        OUT defaults to data/gpt2_tokenizer.bin

Needs the tiktoken package, which downloads the vocabulary on first use (once, then it
is cached); run it where there is a network. llm.c's own train_gpt2.py writes the same
file (gpt2_tokenizer.bin), which can be used instead.

Format (little-endian): uint32 header[256] = magic 20240328, version 2, the number of
tokens, the end-of-text id, zeros; then for each id a uint8 length and the token's bytes.
"""
import os
import struct
import sys

MAGIC, VERSION = 20240328, 2


def write(encoding, path):
    count = encoding.max_token_value + 1
    header = [MAGIC, VERSION, count, encoding.eot_token] + [0] * 252
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256I", *header))
        for token in range(count):
            data = encoding.decode_single_token_bytes(token)
            if not 1 <= len(data) <= 255:
                sys.exit(f"token {token} has {len(data)} bytes; the format holds 1..255")
            f.write(bytes([len(data)]) + data)
    os.replace(tmp, path)  # never a half-written file under the final name
    return count


def main():
    if len(sys.argv) > 2 or sys.argv[1:2] in (["-h"], ["--help"]):
        sys.exit(__doc__)
    path = sys.argv[1] if len(sys.argv) == 2 else "data/gpt2_tokenizer.bin"
    try:
        import tiktoken
    except ImportError:
        sys.exit("write_gpt2_tokenizer: needs the tiktoken package (pip install tiktoken)")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    count = write(tiktoken.get_encoding("gpt2"), path)
    print(f"{path}: {count} tokens")


if __name__ == "__main__":
    main()
