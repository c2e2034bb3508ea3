#!/usr/bin/env python3
"""llm.c's multiple-choice eval file format written with the standard library alone, as
llm.c documents it (common/choices_file.h has the layout), for the tests that need a file:

  header: 256 little-endian int32: magic 20240522, version 1, examples, longest example's bytes
  each example, uint16: 65535, its bytes, index, label, K, n, n context tokens,
                        then K times: m, m completion tokens

  eval_file.py random OUT --vocab V --seed S --examples N [--max-context C] [--max-completion M]
      N examples of 2 to 5 completions of 1..M tokens after a context of 1..C tokens
      (defaults 30 and 12), ids below V, labels at random
  eval_file.py one OUT CONTEXT COMPLETION... [--label L]
      one example; tokens comma-separated (10,11)
"""
import argparse
import random
import struct
from pathlib import Path

MAGIC, START = 20240522, 65535


def encode(examples):
    """The file's bytes for a list of (index, label, context, [completions])."""
    records = []
    for index, label, context, completions in examples:
        words = [START, 0, index, label, len(completions), len(context), *context]
        for c in completions:
            words += [len(c), *c]
        words[1] = 2 * len(words)
        records.append(words)
    longest = max(w[1] for w in records)
    header = struct.pack("<256i", MAGIC, 1, len(records), longest, *([0] * 252))
    return header + b"".join(struct.pack(f"<{len(w)}H", *w) for w in records)


def random_examples(vocab, seed, n, max_context, max_completion):
    rng = random.Random(seed)
    tokens = lambda count: [rng.randrange(vocab) for _ in range(count)]
    examples = []
    for i in range(n):
        k = rng.randint(2, 5)
        completions = [tokens(rng.randint(1, max_completion)) for _ in range(k)]
        context = tokens(rng.randint(1, max_context))
        examples.append((i, rng.randrange(k), context, completions))
    return examples


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("random")
    r.add_argument("out")
    for k in ("--vocab", "--seed", "--examples"):
        r.add_argument(k, type=int, required=True)
    r.add_argument("--max-context", type=int, default=30)
    r.add_argument("--max-completion", type=int, default=12)
    o = sub.add_parser("one")
    o.add_argument("out")
    o.add_argument("context")
    o.add_argument("completions", nargs="+")
    o.add_argument("--label", type=int, default=0)
    a = ap.parse_args()
    if a.mode == "random":
        examples = random_examples(a.vocab, a.seed, a.examples, a.max_context, a.max_completion)
    else:
        ids = lambda text: [int(t) for t in text.split(",")]
        examples = [(0, a.label, ids(a.context), [ids(c) for c in a.completions])]
    Path(a.out).write_bytes(encode(examples))


if __name__ == "__main__":
    main()
