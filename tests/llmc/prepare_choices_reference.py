#!/usr/bin/env python3
"""prepare_choices' reference, written apart from datasets/prepare_choices.cpp: HellaSwag's
JSON lines rendered as llm.c's dev/data/hellaswag.py renders them (the context as it is,
each ending after a space), tokenized by tests/tokenizer/reference_bpe.py, and written in
llm.c's eval file format as its documentation gives it (eval_file.py):

  prepare_choices_reference.py EXAMPLES.jsonl VOCAB|bytes OUT [--limit N] [--no-space]

--no-space encodes the endings without their leading space: the control a comparison
must reject. Run with /usr/bin/python3 (reference_bpe.py's pieces need python3-regex).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tokenizer"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_file  # noqa: E402  (the format, written with the standard library)
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
        records.append((len(records), int(item["label"]), context, endings))
    Path(out).write_bytes(eval_file.encode(records))


if __name__ == "__main__":
    main()
