#!/usr/bin/env python3
"""Writes GPT-2's vocabulary as a tokenizer file in llm.c's format (common/tokenizer.h),
from tiktoken's "gpt2" encoding: the tokenizer of shards made with tiktoken (llm.c's and
nanoGPT's scripts). Train with  --set vocab_size=50257 --set tokenizer=FILE.

  write_gpt2_tokenizer.py [OUT]                 OUT defaults to data/gpt2_tokenizer.bin
  write_gpt2_tokenizer.py --ranks RANKS [OUT]   from a local copy of the ranks

Without --ranks it needs the tiktoken package, which downloads the vocabulary on first
use (once, then it is cached); run it where there is a network. --ranks reads the
ranks from a file in tiktoken's format (a line per token: its bytes in base64, its
rank) and needs nothing else: r50k_base.tiktoken, which tiktoken caches, or the copy
in the openai-whisper package (whisper/assets/gpt2.tiktoken; `pip download --no-deps
openai-whisper` fetches it from PyPI). The file must be GPT-2's: its SHA-256 is checked
against the one tiktoken publishes for r50k_base, and GPT-2's end-of-text token,
50256, is added after its 50256 ranks. llm.c's own train_gpt2.py writes the same file
(gpt2_tokenizer.bin), which can be used instead.

Format (little-endian): uint32 header[256] = magic 20240328, version 2, the number of
tokens, the end-of-text id, zeros; then for each id a uint8 length and the token's bytes.
"""
import base64
import hashlib
import os
import struct
import sys

MAGIC, VERSION = 20240328, 2
# SHA-256 of r50k_base.tiktoken, GPT-2's ranks, as tiktoken's openai_public.py states it.
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
EOT = b"<|endoftext|>"


class RanksEncoding:
    """The part of a tiktoken Encoding that write() uses, from a file of ranks."""

    def __init__(self, path):
        data = open(path, "rb").read()
        digest = hashlib.sha256(data).hexdigest()
        if digest != R50K_SHA256:
            sys.exit(f"write_gpt2_tokenizer: {path}: SHA-256 {digest} is not r50k_base's "
                     f"({R50K_SHA256}): not GPT-2's ranks")
        self.tokens = {}
        for line in data.splitlines():
            token, rank = line.split()
            self.tokens[int(rank)] = base64.b64decode(token)
        self.eot_token = len(self.tokens)
        assert sorted(self.tokens) == list(range(self.eot_token)), path
        self.tokens[self.eot_token] = EOT
        self.max_token_value = self.eot_token

    def decode_single_token_bytes(self, token):
        return self.tokens[token]


def write(encoding, path):
    count = encoding.max_token_value + 1
    header = [MAGIC, VERSION, count, encoding.eot_token] + [0] * 252
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<256I", *header))
            for token in range(count):
                data = encoding.decode_single_token_bytes(token)
                if not 1 <= len(data) <= 255:
                    sys.exit(f"token {token} has {len(data)} bytes; the format holds 1..255")
                f.write(bytes([len(data)]) + data)
        os.replace(tmp, path)  # never a half-written file under the final name
    except BaseException:
        if os.path.isfile(tmp):
            os.remove(tmp)  # no temporary left behind by a failed write
        raise
    return count


def fail(message):
    print(f"write_gpt2_tokenizer: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return
    ranks = None
    if args[:1] == ["--ranks"]:
        if len(args) < 2:
            fail("--ranks needs a file")
        ranks, args = args[1], args[2:]
    if len(args) > 1:
        fail(f"one OUT at most, not {len(args)} arguments: {' '.join(args)} (--help)")
    if args and args[0].startswith("-"):
        fail(f"unknown option '{args[0]}' (--help); an OUT that starts with '-' is written ./{args[0]}")
    path = args[0] if args else "data/gpt2_tokenizer.bin"
    if os.path.isdir(path) or path.endswith("/"):
        fail(f"OUT '{path}' is a directory: name the file to write")
    if ranks is not None:
        if not os.path.isfile(ranks):
            fail(f"--ranks {ranks}: no such file")
        encoding = RanksEncoding(ranks)
    else:
        try:
            import tiktoken
        except ImportError:
            fail("needs the tiktoken package (pip install tiktoken), or --ranks FILE")
        encoding = tiktoken.get_encoding("gpt2")
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        count = write(encoding, path)
    except OSError as e:
        fail(f"cannot write '{path}': {e}")
    print(f"{path}: {count} tokens")


if __name__ == "__main__":
    main()
