#!/usr/bin/env python3
"""An independent multiple-choice scorer, for the tests of build/bin/eval_choices.

It knows llm.c's eval file as llm.c's dev/data/data_common.py documents it (a 256-int32
header: magic 20240522, version 1, examples, longest example in bytes; then per example
the uint16 run 65535, bytes, index, label, K, n + context, K x (m + completion)) and the
completion-style scoring of llm.c's HellaSwag eval: the loss of each completion token
predicted from the token before it, summed (acc) and averaged per token (acc_norm). The
model is GPT-2 in float64 from an llm.c model file (llmc_reference.py's logits_of).

  choices_reference.py write OUT --vocab V --seed S --examples N --window T
      random examples of 2 to 5 completions: contexts of 1 to T-8 tokens, completions of 1
      to 12, some rows longer than T + 1 (their context must be cut), one completion of
      exactly T tokens (the longest that can be scored whole), and one example whose first
      two completions are the same tokens (an exact tie: the first of them is the pick).
  choices_reference.py score MODEL EVAL [--float32] [--unshifted]
      one JSON line per example, as eval_choices --out writes them, in float64 (with
      --float32: PyTorch's float32, the baseline the fp32 bound is derived from).
      --unshifted takes the losses of the positions holding the completion (the mask
      not shifted by one): the bug a negative control must catch.
  choices_reference.py compare GOT WANT (--bound B | --baseline B32)
      every example's fields equal, every loss_sum within relative error B of WANT's, and
      every prediction equal except where WANT's best two are within B of each other;
      prints WANT's acc and acc_norm. Exit 1 otherwise. With --baseline, B is the oracle's
      fp32 bound (tests/oracle/README.md): 4 x the largest relative error of B32's losses
      against WANT's, plus 8 eps32.
  choices_reference.py corrupt IN DIR
      DIR/KIND.bin for each KIND below: IN made wrong in that one way, for the bad-input checks.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llmc_reference  # noqa: E402  (the model file reader and the float64 GPT-2; exits 77 without torch)
import numpy as np  # noqa: E402
from eval_file import encode  # noqa: E402  (the file's bytes for (index, label, context, completions))

MAGIC, START = 20240522, 65535


def decode(raw):
    words = np.frombuffer(raw[1024:], dtype="<u2").astype(int).tolist()
    examples, at = [], 0
    while at < len(words):
        assert words[at] == START
        index, label, k, n = words[at + 2], words[at + 3], words[at + 4], words[at + 5]
        context = words[at + 6: at + 6 + n]
        at += 6 + n
        completions = []
        for _ in range(k):
            m = words[at]
            completions.append(words[at + 1: at + 1 + m])
            at += 1 + m
        examples.append((index, label, context, completions))
    return examples


def write(args):
    rng = np.random.default_rng(args.seed)
    T, V = args.window, args.vocab
    tokens = lambda n: rng.integers(0, V, size=n).tolist()
    examples = []
    for i in range(args.examples):
        k = int(rng.integers(2, 6))
        completions = [tokens(int(rng.integers(1, 13))) for _ in range(k)]
        if i == 1:
            completions[0] = tokens(T)  # scored whole after one context token
        if i == 2:
            completions[1] = list(completions[0])  # an exact tie
        examples.append((i, int(rng.integers(0, k)), tokens(int(rng.integers(1, T - 7))), completions))
    Path(args.out).write_bytes(encode(examples))


def score(args):
    torch, F = llmc_reference.torch_modules()
    h, a = llmc_reference.read(args.model)
    examples = decode(Path(args.eval).read_bytes())
    window = min(h["maxT"], max(len(ctx) + len(c) - 1 for _, _, ctx, cs in examples for c in cs))
    for index, label, context, completions in examples:
        # Every row leaves out the same context tokens, as many as the longest row needs.
        cut = max(0, max(len(context) + len(c) - 1 - window for c in completions))
        sums, counts = [], []
        for c in completions:
            row = torch.tensor(context[cut:] + c, dtype=torch.int64)
            logits = llmc_reference.logits_of(h, a, row[:-1], torch.float32 if args.float32 else torch.float64)
            losses = F.cross_entropy(logits, row[1:], reduction="none")
            mask = torch.zeros(len(row), dtype=torch.bool)
            mask[len(row) - len(c):] = True  # the completion's tokens
            mask = mask[:-1] if args.unshifted else mask[1:]
            sums.append(float(losses[mask].sum()))
            counts.append(len(c))
        means = [s / n for s, n in zip(sums, counts)]
        print(json.dumps({"index": index, "label": label, "pred": int(np.argmin(sums)),
                          "pred_norm": int(np.argmin(means)), "context_cut": cut, "tokens": counts,
                          "loss_sum": sums}))


def relative_error(x, y):
    return abs(x - y) / abs(y) if y else (0.0 if x == y else float("inf"))


def load(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def compare(args):
    got, want = load(args.got), load(args.want)
    if args.baseline:
        base = max(relative_error(x, y) for b, w in zip(load(args.baseline), want)
                   for x, y in zip(b["loss_sum"], w["loss_sum"]))
        args.bound = 4 * base + 8 * 2.0 ** -23
        print(f"fp32 bound: 4 x the baseline's error {base:.3e} + 8 eps32 = {args.bound:.3e}")
    bad, worst, ties = [], 0.0, 0
    if not want:
        bad.append(f"{args.want} holds no example: nothing would be compared")
    if len(got) != len(want):
        bad.append(f"{len(got)} examples, the reference has {len(want)}")
    for g, w in zip(got, want):
        where = f"example index {w['index']}"
        for key in ("index", "label", "tokens", "context_cut"):
            if g[key] != w[key]:
                bad.append(f"{where}: {key} {g[key]}, the reference {w[key]}")
        if len(g["loss_sum"]) != len(w["loss_sum"]):
            bad.append(f"{where}: {len(g['loss_sum'])} endings scored, the reference {len(w['loss_sum'])}")
            continue
        err = max(relative_error(x, y) for x, y in zip(g["loss_sum"], w["loss_sum"]))
        worst = max(worst, err)
        if err > args.bound:
            bad.append(f"{where}: loss_sum {g['loss_sum']}, the reference {w['loss_sum']} (relative error {err:.3e})")
        for key, values in (("pred", w["loss_sum"]), ("pred_norm", [s / n for s, n in zip(w["loss_sum"], w["tokens"])])):
            best, second = sorted(values)[:2]
            if best != second and second - best <= args.bound * abs(best):
                ties += 1  # a near tie: the bound cannot order the two (an exact one goes to the first)
            elif g[key] != w[key]:
                bad.append(f"{where}: {key} {g[key]}, the reference {w[key]}")
    n = len(want)
    acc = sum(w["pred"] == w["label"] for w in want) / max(n, 1)
    acc_norm = sum(w["pred_norm"] == w["label"] for w in want) / max(n, 1)
    print(f"{n} examples; largest relative error of a completion's loss {worst:.3e} (bound {args.bound:g}); "
          f"{ties} near ties left unordered; reference acc {acc:.4f} acc_norm {acc_norm:.4f}")
    if bad:
        print(f"FAIL: {len(bad)} differences: " + "; ".join(bad[:5]))
        sys.exit(1)


# KIND: what goes wrong, applied to the file's bytes or examples.
def _words_edit(at, value):
    def edit(raw):
        b = bytearray(raw)
        b[1024 + 2 * at: 1024 + 2 * at + 2] = int(value).to_bytes(2, "little")
        return bytes(b)
    return edit


def _header_edit(i, value):
    def edit(raw):
        b = bytearray(raw)
        b[4 * i: 4 * i + 4] = int(value).to_bytes(4, "little", signed=True)
        return bytes(b)
    return edit


def _examples_edit(change):
    def edit(raw):
        examples = decode(raw)
        change(examples)
        return encode(examples)
    return edit


KINDS = {
    "magic": _header_edit(0, 20240520),
    "version": _header_edit(1, 2),
    "count": _header_edit(2, 1000),
    "too_many": _header_edit(2, 70000),
    "longest": _header_edit(3, 2),
    "start": _words_edit(0, 7),
    "size": _words_edit(1, 4),
    "truncated": lambda raw: raw[:-3],
    "trailing": lambda raw: raw + bytes(4),
    "label": _examples_edit(lambda ex: ex.__setitem__(0, (ex[0][0], len(ex[0][3]), ex[0][2], ex[0][3]))),
    "vocab": _examples_edit(lambda ex: ex.__setitem__(0, (ex[0][0], ex[0][1], [60000] + ex[0][2], ex[0][3]))),
    "no_context": _examples_edit(lambda ex: ex.__setitem__(0, (ex[0][0], 0, [], ex[0][3]))),
    "one_completion": _examples_edit(lambda ex: ex.__setitem__(0, (ex[0][0], 0, ex[0][2], ex[0][3][:1]))),
    "empty_completion": _examples_edit(lambda ex: ex.__setitem__(0, (ex[0][0], 0, ex[0][2], [[]] + ex[0][3]))),
    "long_completion": _examples_edit(lambda ex: ex.__setitem__(0, (ex[0][0], 0, ex[0][2], [[1] * 100] + ex[0][3]))),
}


def corrupt(args):
    raw = Path(args.src).read_bytes()
    for kind, edit in KINDS.items():
        (Path(args.dir) / f"{kind}.bin").write_bytes(edit(raw))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    for k in ("--vocab", "--seed", "--examples", "--window"):
        w.add_argument(k, type=int, required=True)
    s = sub.add_parser("score")
    s.add_argument("model")
    s.add_argument("eval")
    s.add_argument("--unshifted", action="store_true")
    s.add_argument("--float32", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("got")
    c.add_argument("want")
    bound = c.add_mutually_exclusive_group(required=True)
    bound.add_argument("--bound", type=float)
    bound.add_argument("--baseline")
    k = sub.add_parser("corrupt")
    k.add_argument("src")
    k.add_argument("dir")
    args = ap.parse_args()
    {"write": write, "score": score, "compare": compare, "corrupt": corrupt}[args.cmd](args)


if __name__ == "__main__":
    main()
