#!/usr/bin/env python3
"""Compares training runs step by step: losses and final weights and moments.

  compare_runs.py --reference DIR --baseline DIR [DIR...] --candidate DIR [DIR...] [--step N]

Each DIR is a run directory holding metrics.jsonl and step_XXXXXXXX/ checkpoints.

Tolerance, derived as DESIGN rule 9 asks ("within a small multiple of the baseline's
own error"). Two stages that compute the same thing differ only in the order of fp32
sums: a gradient summed over ranks instead of over the rows of one matmul, a loss
averaged per rank first. The baseline runs are the reference stage itself with the
same global batch split differently (gradient accumulation 2 and 4 instead of 1):
exactly the same kind of reordering, so their spread |baseline - reference| is the
size of the reordering error of fp32 on this problem. A candidate passes when, for
every logged loss and every tensor kind,

    |candidate - reference| <= 4 * max_baseline |baseline - reference| + floor

with floor = 16 * eps32 * |reference| (for losses) or 16 * eps32 * ||reference|| (for
tensors, in the 2-norm), for quantities the baselines happen to reproduce exactly.
A real bug (a missing 1/dp, a rank training on the wrong sequences, a skipped bucket)
moves the loss in its second digit, orders of magnitude beyond this bound.
Exits 1 with a table when any check fails. Uses only the standard library.
"""
import argparse
import array
import json
import math
import os
import sys

EPS32 = 2.0 ** -23


def losses(run, field="loss"):
    out = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind") == "train":
                out[rec["step"]] = rec[field]
    if not out:
        sys.exit(f"compare_runs: {run}/metrics.jsonl has no train lines")
    return out


def tensor(run, step, kind):
    path = os.path.join(run, "step_%08d" % step, kind + ".bin")
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def distance(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


def norm(a):
    return math.sqrt(sum(x * x for x in a))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True)
    ap.add_argument("--baseline", nargs="+", required=True)
    ap.add_argument("--candidate", nargs="+", required=True)
    ap.add_argument("--step", type=int, required=True, help="checkpoint step to compare")
    ap.add_argument("--kinds", default="param,adam_m,adam_v")
    args = ap.parse_args()

    rows, failed = [], False
    # The gradient norm is compared too: AdamW is blind to a uniform scale of the
    # gradient, so a missing 1/dp would hardly move the losses, but it doubles the norm.
    for field in ("loss", "grad_norm"):
        ref = losses(args.reference, field)
        base = [losses(b, field) for b in args.baseline]
        cand = {c: losses(c, field) for c in args.candidate}
        for step in sorted(ref):
            r = ref[step]
            spread = max(abs(b[step] - r) for b in base)
            bound = 4 * spread + 16 * EPS32 * abs(r)
            for c in args.candidate:
                if step not in cand[c]:
                    failed = True
                    rows.append((f"{field} step {step}", os.path.basename(c), math.inf, spread, bound, False))
                    continue
                err = abs(cand[c][step] - r)
                ok = err <= bound
                failed |= not ok
                rows.append((f"{field} step {step}", os.path.basename(c), err, spread, bound, ok))
    for kind in args.kinds.split(","):
        r = tensor(args.reference, args.step, kind)
        spread = max(distance(tensor(b, args.step, kind), r) for b in args.baseline)
        bound = 4 * spread + 16 * EPS32 * norm(r)
        for c in args.candidate:
            err = distance(tensor(c, args.step, kind), r)
            ok = err <= bound
            failed |= not ok
            rows.append((f"{kind} (2-norm)", os.path.basename(c), err, spread, bound, ok))
    print(f"{'quantity':20s} {'candidate':22s} {'error':>10s} {'baseline':>10s} {'bound':>10s}")
    for q, c, err, spread, bound, ok in rows:
        print(f"{q:20s} {c:22s} {err:10.3e} {spread:10.3e} {bound:10.3e} {'PASS' if ok else 'FAIL'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
