#!/usr/bin/env python3
"""prepare_choices' reference, written apart from datasets/prepare_choices.cpp: HellaSwag's
JSON lines rendered as llm.c's dev/data/hellaswag.py renders them (the context as it is,
each ending after a space), tokenized by tests/tokenizer/reference_bpe.py, and written in
llm.c's eval file format as its documentation gives it (common/choices_file.h):

  header: 256 little-endian int32: magic 20240522, version 1, examples, longest example's bytes
  each example, uint16: 65535, its bytes, index, label, K, n, n context tokens,
                        then K times: m, m completion tokens

  prepare_choices_reference.py EXAMPLES.jsonl VOCAB|bytes OUT [--limit N] [--no-space]

--no-space encodes the endings without their leading space: the control a comparison
must reject. Run with /usr/bin/python3 (reference_bpe.py's pieces need python3-regex).
"""
import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tokenizer"))
import reference_bpe  # noqa: E402


def main():
    args = sys.argv[1:]
    no_space = "--no-space" in args
    args = [a for a in args if a != "--no-space"]
    limit = 0
    if "--limit" in args:
        i = args.index("--limit")
        limit = int(args[i + 1])
        del args[i:i + 2]
    source, vocab_name, out = args
    if vocab_name == "bytes":
        encode = lambda text: list(text.encode("utf-8"))
    else:
        vocab = reference_bpe.read_vocab(vocab_name)
        encode = lambda text: reference_bpe.encode(text.encode("utf-8"), vocab)

    records = []
    for line in open(source, encoding="utf-8"):
        if not line.strip():
            continue
        if limit and len(records) == limit:
            break
        item = json.loads(line)
        context = encode(item["ctx"])
        endings = [encode(e if no_space else " " + e) for e in item["endings"]]
        words = [65535, 0, len(records), int(item["label"]), len(endings), len(context)] + context
        for e in endings:
            words += [len(e)] + e
        words[1] = 2 * len(words)
        records.append(words)
    longest = max(2 * len(w) for w in records)
    header = struct.pack("<256i", 20240522, 1, len(records), longest, *([0] * 252))
    body = b"".join(struct.pack(f"<{len(w)}H", *w) for w in records)
    Path(out).write_bytes(header + body)


if __name__ == "__main__":
    main()
