#!/usr/bin/env python3
"""Compares a resumed run with the uninterrupted run it continues.

  cross_resume.py --reference DIR --baseline DIR [DIR...] --candidate DIR [DIR...]
                  --from-step K --step N [--kinds param,...] [--tensor-floor-eps F]

Each DIR is a run directory with metrics.jsonl and step_XXXXXXXX/ checkpoints. The
reference and the baselines ran steps 1..N uninterrupted; a candidate resumed from a
checkpoint of step K-1 written by another stage and layout and ran steps K..N only, so
its metrics.jsonl must hold exactly the train steps K..N (a run that silently started
fresh would log steps 1..N, and fails here).

Tolerance: the reasoning of tests/stages/compare_runs.py (docs/architecture.md, rule
8), restricted to steps K..N, with factors measured here (below). The baselines are other stages and layouts (other dp)
computing the same thing uninterrupted; they differ from the reference only in the order
of fp32 sums, so their spread |baseline - reference| is the size of the reordering error
on this problem. A candidate's state at step K-1 is the one the checkpoint's writer had,
read by another layout; from there it reorders the sums as its own layout does. So it
passes when, for each of the steps K..N, the loss and the gradient norm, and at step N
each tensor kind of the final checkpoint (param, adam_m, adam_v, in the 2-norm),

    |candidate - reference| <= 4 * max_baseline |baseline - reference| + floor

with floor = 16 * eps32 * |reference| (F * eps32 * ||reference|| for tensors, F = 16 by
default). The factors are this test's own, not compare_runs.py's K = 8 and 2-ulp floor:
a candidate reorders the sums once more, as a baseline does, so its error is of the
spread's size; the largest ratio error / spread in tests/zero/cross_resume.sh's runs is
2.0 (the gradient norm at step 6), and 4 leaves a factor 2 over it. The floor serves a
step where every baseline happens to agree with the reference bit for bit (spread 0, the
loss at step 8 there) while the candidate's order differs: 16 ulps of the value, 2.7
times the largest difference any run there shows from the reference (6 ulps of the loss,
at step 10). A resume that drops the moments, restarts the learning-rate schedule, or
replays the wrong sequences moves the loss in its second or third digit, far beyond the
bound.

One SGD step from the reference's own checkpoint (K = N) takes F = 2: the candidate and
the reference start from the same bits, so their weights differ by lr |g_c - g_r| plus at
most one rounding of the sum p - lr g per element, and one ulp of x is at most eps32 |x|;
2 eps32 ||p|| covers that rounding and the rounding of lr g. The floor is what decides
this bound: the spread comes from the baselines' N uninterrupted steps, so it over-states
one step's lr |g_c - g_r| (in cross_resume.sh's runs 1.2e-8 against the candidate's
3.1e-9), and 4 times it is still some 70 times below the floor (3.2e-6); a step 1 % too
large lies at 1.5e-5, 4.6 times beyond. With 16 the floor would be as large as that step.
Exits 1 with a table when any check fails. Uses only the standard library.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoint"))
import checkpoint_tensors  # noqa: E402

EPS32 = 2.0 ** -23
# No bound above 1e-4 relative, however far apart the baselines are: a baseline that
# drifted must not loosen the check of the candidate.
CAP = 1e-4


def train_lines(run):
    out = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind") == "train":
                out[rec["step"]] = rec
    return out


def tensor(run, step, kind):
    return checkpoint_tensors.values(os.path.join(run, "step_%08d" % step), kind)


def distance(a, b):
    if len(a) != len(b):
        return math.inf
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


def norm(a):
    return math.sqrt(sum(x * x for x in a))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True)
    ap.add_argument("--baseline", nargs="+", required=True)
    ap.add_argument("--candidate", nargs="+", required=True)
    ap.add_argument("--from-step", type=int, required=True, help="first step the candidates ran")
    ap.add_argument("--step", type=int, required=True, help="last step, whose checkpoints are compared")
    ap.add_argument("--kinds", default="param,adam_m,adam_v")
    ap.add_argument("--tensor-floor-eps", type=float, default=16.0,
                    help="the tensors' floor in eps32 * ||reference|| (docstring)")
    args = ap.parse_args()
    steps = list(range(args.from_step, args.step + 1))

    ref = train_lines(args.reference)
    base = [train_lines(b) for b in args.baseline]
    cand = {c: train_lines(c) for c in args.candidate}
    rows, failed = [], False
    for run, lines in [(args.reference, ref)] + list(zip(args.baseline, base)):
        missing = [s for s in steps if s not in lines]
        if missing:
            sys.exit(f"cross_resume: {run} lacks steps {missing}")
    for c, lines in cand.items():
        if sorted(lines) != steps:
            failed = True
            rows.append(("steps logged", os.path.basename(c), math.inf, 0.0, 0.0, False))
            print(f"{c}: logged train steps {sorted(lines)}, expected exactly {steps} (did it resume?)")

    for field in ("loss", "grad_norm"):
        for step in steps:
            r = ref[step][field]
            spread = max(abs(b[step][field] - r) for b in base)
            bound = min(4 * spread + 16 * EPS32 * abs(r), CAP * abs(r))
            for c, lines in cand.items():
                err = abs(lines[step][field] - r) if step in lines else math.inf
                ok = err <= bound
                failed |= not ok
                rows.append((f"{field} step {step}", os.path.basename(c), err, spread, bound, ok))
    for kind in args.kinds.split(","):
        r = tensor(args.reference, args.step, kind)
        spread = max(distance(tensor(b, args.step, kind), r) for b in args.baseline)
        bound = min(4 * spread + args.tensor_floor_eps * EPS32 * norm(r), CAP * norm(r))
        for c in args.candidate:
            err = distance(tensor(c, args.step, kind), r)
            ok = err <= bound
            failed |= not ok
            rows.append((f"{kind} (2-norm)", os.path.basename(c), err, spread, bound, ok))

    print(f"reference {os.path.basename(args.reference)}; baselines "
          f"{', '.join(os.path.basename(b) for b in args.baseline)}; steps {args.from_step}..{args.step}")
    print(f"{'quantity':20s} {'candidate':24s} {'error':>10s} {'baseline':>10s} {'bound':>10s}")
    for q, c, err, spread, bound, ok in rows:
        print(f"{q:20s} {c:24s} {err:10.3e} {spread:10.3e} {bound:10.3e} {'PASS' if ok else 'FAIL'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
