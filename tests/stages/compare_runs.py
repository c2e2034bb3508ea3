#!/usr/bin/env python3
"""Compares training runs step by step: losses, gradient norms, final weights and moments.

  compare_runs.py --truth DIR --reference DIR --candidate DIR [DIR...] --step N
                  [--kinds param,adam_m,adam_v] [--weights-only] [--expect-reject] [--from-step K]
  compare_runs.py --exact --reference DIR --candidate DIR [DIR...] --step N [--weights-only]
                  [--expect-reject]

Each DIR is a run directory holding metrics.jsonl and step_XXXXXXXX/ checkpoints (fp32
files, or fp64 from the float64 runs: tests/checkpoint/checkpoint_tensors.py reads either).

Tolerance mode. The ground truth is stage 01 run in float64 (precision=fp64; rule 8 of
docs/architecture.md) on the same global batch; the reference is the earlier stage in
fp32. The fp32 reference's own distance from the truth, e_ref, is what fp32 rounding
does to this very quantity on this very trajectory; a candidate that computes the same
thing in another order (sums over ranks instead of over rows, shards instead of one
buffer) makes rounding errors of the same kind and size. So a candidate passes when, for
every logged step and every tensor kind,

    |candidate - truth| <= min(K * max(e_ref, floor), CAP * |truth|)

  K = 8       two fp32 computations of one quantity differ in the rounding errors they
              happen to make; the ratio of their error sizes, err / max(e_ref, floor)
              (the table's err/base), over every fp32 layout of this suite is at most
              3.7 (2026-12-01: the AdamW moments of one bias in stage 11's 8-rank
              layout; for a loss 3.1, a pipeline's one micro-batch of 24 sequences
              against the reference's two of 12, the first step): 8 leaves room, and is still
              orders of magnitude below what a bug does (a missing 1/dp, a rank on the
              wrong sequences, a skipped bucket move the loss in its second digit).
  floor       2 fp32 ulps: of the value (2 eps32 |truth|) for losses and norms; for a
              tensor, of one typical element (2 eps32 rms(truth)). The reference may
              round a value exactly by chance where the candidate does not.
  CAP = 1e-4  relative: no reference, however far it drifted, widens the bound past it.
              --bf16 (runs whose activations are stored in bf16) raises it to 8 bf16
              roundings, 8 * 2^-8 = 3.1e-2: bf16 storage alone moves a value by up to
              2^-8 of itself, so a bf16 reference drifts that far from float64 honestly.
  e_ref       per step, the largest error of the reference up to that step (rounding
              errors accumulate; one lucky step does not tighten the bound). With
              --ensemble, the largest over the reference and the ensemble: runs of the
              reference's program that group the same sums otherwise (other micro-batch
              splits). One run's error is one draw, and where the trajectory is
              sensitive one draw can be a lucky one: at a gradient-norm spike (step 6 of
              the GPU tests' model, norm 17.75 between steps of 2.8), stage 01 in fp32 on
              the CPU was 1.3e-6 from float64 with micro-batch 12 and 1.5e-5 to 4.7e-5
              with 24, 8, 6, 4 or 3, so no other grouping could meet 8 x the first. The
              ensemble's largest error estimates the spread of honest runs instead.
  flip        --bf16 AdamW runs, each weight tensor on its own: + 2 lr_max. In bf16 a
              gradient element whose true value lies within the rounding noise has no
              reliable sign, and AdamW steps an element by about lr whatever the size of
              its gradient (|step| <= lr when 1 - beta1 <= sqrt(1 - beta2): Kingma & Ba
              2015, section 2.1; 0.1 <= 0.22 here). Two correct runs may then step one such
              element in opposite directions, 2 lr apart; the reference's e_ref shows that
              only if the reference happens to flip in the same tensor. (Seen on a GPU: one
              bias of 128 elements 1.0 lr off, 8 x its e_ref = 0.8 lr, while the one SGD
              step of the same run matched every tensor within 1.02 x e_ref.) The kinds'
              2-norms keep their bound, and the SGD comparison, where a step is lr g, gets
              no allowance: a gradient wrong in one tensor still fails there.

Losses and gradient norms are compared per step, the tensors in the 2-norm of their
difference: each kind as a whole, and each tensor on its own with its own e_ref and
floor and no CAP (a factor wrong in one small tensor, a bias or a layernorm, is lost in
the norm of the whole kind; over every tensor of every fp32 layout of this suite
err/base stays below 3.7, so K = 8 holds there too). The table shows a kind's worst tensor.
Exact mode (--exact) asks for the same bits: every logged loss and gradient
norm equal, every checkpoint file byte-identical; for layouts that only move work (with
--norm-resharded the norm within the rounding of another grouping of its sum; with
--weights-only the files alone).
--regrouped NAME[,NAME...] (exact mode, with --truth) names tensors whose sum the
candidate must regroup (a pipeline adds the tied wte's embedding and head gradients per
stage, then the two): those tensors, in every kind, and the gradient norm (which
contains them) are held to the tolerance bound above; everything else to the bits.

Every run's logged throughput must also be its global batch over its step time
(tokens_per_s x ms / 1000 = batch_size x seq_len), whatever the mode (not with
--weights-only): each stage's driver computes it for itself.

--from-step K (tolerance mode): the candidates resumed a checkpoint of step K - 1 and
logged steps K.. alone, while the truth and the references ran from step 1; they are
scored from step K on, each step's e_ref still the largest reference error up to it (the
resumed state carries the reference's rounding so far).
A candidate with a different number of steps or a tensor of a different length fails
(it is not scored on the common part). Exits 1 with a table when any check fails.
--bound-of NAME (tolerance mode) prints the bound one tensor of the weights, param/NAME,
is held to at --step, and exits: a control can then plant an error of a size it chooses
against that bound (tests/stages/equivalence.sh: 2.5 times it must be rejected, 0.3 times
accepted), which shows the bound is as tight as it says.
--expect-reject inverts the verdict, for negative controls: exit 0 only when at least
one check fails (the comparison did see the planted error). A control that plants its
error in a tensor adds --weights-only (either mode): then only the tensors can reject it.
The sums of squares run in numpy where the interpreter has it (/usr/bin/python3 with
python3-numpy: some 10x faster on the bf16 tests' million weights), else (or with
--pure-python) in the standard library's loops; both sum in double, so the two differ in
the last bits of a figure, far below any bound and below the table's four digits.
"""
import argparse
import json
import math
import os
import sys

try:
    import numpy
except ImportError:
    numpy = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoint"))
import checkpoint_tensors  # noqa: E402

EPS32 = 2.0 ** -23
K = 8.0
CAP = 1e-4
CAP_BF16 = 8 * 2.0 ** -8


def series(run, field):
    out = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind") == "train":
                out[rec["step"]] = rec[field]
    if not out:
        sys.exit(f"compare_runs: {run}/metrics.jsonl has no train lines")
    return out


def tensor_path(run, step, kind):
    return os.path.join(run, "step_%08d" % step, kind + ".bin")


def references(args):
    """The reference run and its ensemble (tolerance mode): e_ref is the largest error among them."""
    return [args.reference] + args.ensemble


def checkpoint(run, step):
    return os.path.join(run, "step_%08d" % step)


def tensor(run, step, kind):
    return checkpoint_tensors.values(checkpoint(run, step), kind)


def distance(a, b):
    """The 2-norm of a - b (sequences of one length), summed in double."""
    if len(a) != len(b):
        sys.exit(f"compare_runs: a distance between {len(a)} and {len(b)} values")
    if numpy is not None:
        d = numpy.asarray(a, dtype=numpy.float64) - numpy.asarray(b, dtype=numpy.float64)
        return math.sqrt(float(numpy.dot(d, d)))
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


def norm(a):
    """The 2-norm of a, summed in double."""
    if numpy is not None:
        v = numpy.asarray(a, dtype=numpy.float64)
        return math.sqrt(float(numpy.dot(v, v)))
    return math.sqrt(sum(x * x for x in a))


def tensor_bound(e_ref, t, cap):
    """(bound, base): the bound on a candidate's distance from the truth t (a kind's or a
    tensor group's values), given the reference's e_ref: K times base, which is e_ref or
    2 ulps of a typical element if more, and at most cap of t's norm."""
    base = tensor_base(e_ref, t)
    return min(K * base, cap * norm(t)), base


def tensor_base(e_ref, t):
    """What K multiplies for the values t: e_ref, or 2 ulps of a typical element if more."""
    return max(e_ref, 2 * EPS32 * norm(t) / math.sqrt(max(1, len(t))))


class Table:
    def __init__(self):
        self.rows, self.failed = [], False

    def add(self, quantity, candidate, err, e_ref, bound, ok, base=None):
        """A row. `base`: what K multiplies, max(e_ref, floor) (e_ref when not given); the
        row's err/base is then the ratio K = 8 bounds, where no cap or flip allowance binds."""
        self.failed |= not ok
        self.rows.append((quantity, candidate, err, e_ref, bound, ok, e_ref if base is None else base))

    def print(self):
        print(f"{'quantity':24s} {'candidate':26s} {'error':>10s} {'e_ref':>10s} {'bound':>10s} {'err/base':>9s}")
        for q, c, err, e_ref, bound, ok, base in self.rows:
            ratio = err / base if base > 0 and math.isfinite(err) else float("nan")
            print(f"{q:24s} {c:26s} {err:10.3e} {e_ref:10.3e} {bound:10.3e} {ratio:9.2f} {'PASS' if ok else 'FAIL'}")


def blank(raw, ranges):
    """raw with the byte ranges zeroed (compared elsewhere)."""
    out = bytearray(raw)
    for b, e in ranges:
        out[b:e] = bytes(e - b)
    return bytes(out)


def compare_throughput(args, table):
    """Every run's logged throughput is its global batch over its step time: tokens_per_s
    x ms / 1000 = batch_size x seq_len (from the run's manifest), to double rounding (the
    two are logged at full precision). The stages compute it each in their own driver."""
    runs = references(args) + args.candidate + ([args.truth] if args.truth else [])
    for run in runs:
        cfg = checkpoint_tensors.manifest(checkpoint(run, args.step))["config"]
        tokens = cfg["batch_size"] * cfg["seq_len"]
        tps, ms = series(run, "tokens_per_s"), series(run, "ms")
        worst = max(abs(tps[s] * ms[s] / 1000.0 - tokens) / tokens for s in tps)
        table.add("tokens_per_s x ms", os.path.basename(run), worst, 0.0, 1e-12, worst <= 1e-12)


def compare_tolerance(args, table):
    compare_series(args, table, () if args.weights_only else ("loss", "grad_norm"))
    compare_tensors(args, table)


def compare_series(args, table, fields):
    for field in fields:
        truth = series(args.truth, field)
        refs = [series(r, field) for r in references(args)]
        for ref in refs:
            if sorted(ref) != sorted(truth):
                sys.exit(f"compare_runs: a reference logged steps {sorted(ref)}, the truth {sorted(truth)}")
        envelope = 0.0
        cands = {c: series(c, field) for c in args.candidate}
        scored = [s for s in sorted(truth) if s >= args.from_step]
        for c, cand in cands.items():
            if sorted(cand) != scored:
                table.add(f"{field} steps", os.path.basename(c), math.inf, 0, 0, False)
        for step in sorted(truth):
            t = truth[step]
            envelope = max(envelope, max(abs(ref[step] - t) for ref in refs))
            if step < args.from_step:
                continue
            base = max(envelope, 2 * EPS32 * abs(t))
            bound = min(K * base, args.cap * abs(t))
            for c, cand in cands.items():
                if step not in cand:
                    continue
                err = abs(cand[step] - t)
                table.add(f"{field} step {step}", os.path.basename(c), err, envelope, bound, err <= bound, base)


def flip_allowance(args, kind, truth_m):
    """The flip allowance (above): bf16 AdamW runs' weights only, whose truth has moments."""
    adamw = truth_m is not None and any(truth_m)
    max_lr = max(v for step, v in series(args.truth, "lr").items() if step <= args.step)
    return 2 * max_lr if args.bf16 and kind == "param" and adamw else 0.0


def truth_moments(args):
    """The truth's adam_m at --step, or None where it has no moments file."""
    moments = tensor_path(args.truth, args.step, "adam_m")
    return tensor(args.truth, args.step, "adam_m") if os.path.exists(moments) else None


def tensor_bounds(args, kind, t, refs, flip):
    """For each tensor of `kind`: (name, begin, end, truth, e_ref, bound, base)."""
    pieces = []
    for name, b, e in tensor_pieces(args.truth, args.step, kind):
        tt = t[b:e]
        e_ref_t = max(distance(r[b:e], tt) for r in refs)
        base_t = tensor_base(e_ref_t, tt)
        pieces.append((name, b, e, tt, e_ref_t, K * base_t + flip, base_t))
    return pieces


def print_bound_of(args):
    """--bound-of NAME: the bound param/NAME is held to, alone on a line."""
    t = tensor(args.truth, args.step, "param")
    refs = [tensor(run, args.step, "param") for run in references(args)]
    flip = flip_allowance(args, "param", truth_moments(args))
    for name, _, _, _, _, bound_t, _ in tensor_bounds(args, "param", t, refs, flip):
        if name == args.bound_of:
            print(repr(bound_t))
            return
    sys.exit(f"compare_runs: --bound-of {args.bound_of}: no such tensor of the weights")


def compare_tensors(args, table):
    # Read once: the adam_m comparison below uses the same array.
    truth_m = truth_moments(args)
    for kind in filter(None, args.kinds.split(",")):
        t = truth_m if kind == "adam_m" and truth_m is not None else tensor(args.truth, args.step, kind)
        refs = [tensor(run, args.step, kind) for run in references(args)]
        for r in refs:
            if len(r) != len(t):
                sys.exit(f"compare_runs: {kind} of a reference has {len(r)} values, the truth {len(t)}")
        e_ref = max(distance(r, t) for r in refs)
        bound, base = tensor_bound(e_ref, t, args.cap)
        flip = flip_allowance(args, kind, truth_m)
        # Each tensor's truth, reference error (the largest over the references) and bound,
        # once for every candidate. No CAP here: a bias that starts at 0 is small, and fp32
        # rounding alone takes the reference 0.6e-4 of its norm away in 10 AdamW steps; the
        # kind's bound caps.
        pieces = tensor_bounds(args, kind, t, refs, flip)
        for c in args.candidate:
            x = tensor(c, args.step, kind)
            if len(x) != len(t):
                table.add(f"{kind} length", os.path.basename(c), math.inf, e_ref, bound, False)
                continue
            err = distance(x, t)
            table.add(f"{kind} (2-norm)", os.path.basename(c), err, e_ref, bound, err <= bound, base)
            # Each tensor on its own; the row shows the one nearest its bound.
            worst = None
            for name, b, e, tt, e_ref_t, bound_t, base_t in pieces:
                err_t = distance(x[b:e], tt)
                score = err_t / bound_t if bound_t > 0 else (0.0 if err_t == 0 else math.inf)
                if worst is None or score > worst[0]:
                    worst = (score, name, err_t, e_ref_t, bound_t, base_t)
            if worst:
                _, name, err_t, e_ref_t, bound_t, base_t = worst
                table.add(f"{kind} worst: {name}", os.path.basename(c), err_t, e_ref_t, bound_t, err_t <= bound_t,
                          base_t)


def tensor_ranges(run, step, kind, names):
    """Element ranges [begin, end) of the named tensors of `kind` in its file (manifest.json)."""
    out = [(b, e) for name, b, e in tensor_pieces(run, step, kind) if name in names]
    if len(out) != len(names):
        sys.exit(f"compare_runs: {run} has no {kind} tensor among {sorted(names)} for some name")
    return out


def tensor_pieces(run, step, kind):
    """(name, begin, end) in elements of every tensor of `kind` in its file (manifest.json)."""
    return checkpoint_tensors.pieces(checkpoint(run, step), kind)


def compare_regrouped(args, table, kind, ranges):
    """The regrouped tensors of `kind` against the truth, within the tolerance bound."""
    def cut(run):
        values = tensor(run, args.step, kind)
        return [x for b, e in ranges for x in values[b:e]]
    t, r = cut(args.truth), cut(args.reference)
    e_ref = distance(r, t)
    bound, base = tensor_bound(e_ref, t, args.cap)
    for c in args.candidate:
        err = distance(cut(c), t)
        table.add(f"{kind}/{args.regrouped} (2-norm)", os.path.basename(c), err, e_ref, bound, err <= bound, base)


def compare_resharded_norm(args, table):
    """The gradient norms, where the two runs split tensors between ranks at other places.

    Each rank sums the squares of its elements of a tensor in double and the parts are
    added (stages/07_pipeline_gpipe/grad_norm_by_tensor.h): where a data-parallel shard
    boundary falls elsewhere, the same n = P squares (exact in double: a float squared has
    48 significant bits) are added in another grouping. Any order of adding non-negative
    terms (one after another, in lanes, by chunks: a tree of additions) is within
    (n - 1) u of the exact sum (u = 2^-53; Higham, Accuracy
    and Stability of Numerical Algorithms, 2002, eq. 4.4), so two groupings differ by at
    most 2 (n - 1) u of it, and the norm, its square root, by (n - 1) u of itself, plus
    u/2 for each run's rounding of the root: n u in all. A wrong gradient moves the norm
    by far more; the weights and moments stay compared bit for bit."""
    P = sum(e - b for _, b, e in tensor_pieces(args.reference, args.step, "param"))
    ref = series(args.reference, "grad_norm")
    for c in args.candidate:
        cand = series(c, "grad_norm")
        if sorted(cand) != sorted(ref):
            table.add("grad_norm steps", os.path.basename(c), math.inf, 0, 0, False)
            continue
        worst = max(((abs(cand[s] - ref[s]), P * 2.0 ** -53 * abs(ref[s])) for s in ref),
                    key=lambda eb: eb[0] / eb[1] if eb[1] else math.inf)
        table.add("grad_norm (resharded)", os.path.basename(c), worst[0], 0.0, worst[1], worst[0] <= worst[1])


def compare_exact(args, table):
    regrouped = set(args.regrouped.split(",")) if args.regrouped else set()
    if regrouped and not args.weights_only:
        tolerance = argparse.Namespace(**vars(args))
        tolerance.kinds, tolerance.weights_only = "", False
        compare_series(tolerance, table, ("grad_norm",))
    if args.norm_resharded and not regrouped and not args.weights_only:
        compare_resharded_norm(args, table)
    exact_fields = ("loss",) if regrouped or args.norm_resharded else ("loss", "grad_norm")
    if args.weights_only:
        exact_fields = ()
    for field in exact_fields:
        ref = series(args.reference, field)
        for c in args.candidate:
            cand = series(c, field)
            same = cand == ref
            worst = max((abs(cand[s] - ref[s]) for s in ref if s in cand), default=math.inf)
            if sorted(cand) != sorted(ref):
                worst = math.inf
            table.add(f"{field} (all steps)", os.path.basename(c), worst, 0.0, 0.0, same)
    for kind in args.kinds.split(","):
        with open(tensor_path(args.reference, args.step, kind), "rb") as f:
            want = f.read()
        ranges = tensor_ranges(args.reference, args.step, kind, regrouped) if regrouped else []
        dtype = checkpoint_tensors.dtype_of(checkpoint(args.reference, args.step), kind)
        size = checkpoint_tensors.ELEMENT_BYTES[dtype]
        byte_ranges = [(size * b, size * e) for b, e in ranges]
        if ranges:
            compare_regrouped(args, table, kind, ranges)
            want = blank(want, byte_ranges)
        for c in args.candidate:
            with open(tensor_path(c, args.step, kind), "rb") as f:
                got = blank(f.read(), byte_ranges)
            differing = sum(1 for i in range(0, min(len(got), len(want)), size) if got[i:i + size] != want[i:i + size])
            if len(got) != len(want):
                differing = math.inf
            table.add(f"{kind} (values differing)", os.path.basename(c), float(differing), 0.0, 0.0, got == want)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--truth", help="the float64 stage 01 run (tolerance mode)")
    ap.add_argument("--reference", required=True)
    ap.add_argument("--candidate", nargs="+", required=True)
    ap.add_argument("--ensemble", nargs="+", default=[],
                    help="tolerance mode: more reference runs (other groupings); e_ref is the largest error of all")
    ap.add_argument("--step", type=int, required=True, help="checkpoint step to compare")
    ap.add_argument("--from-step", type=int, default=1,
                    help="tolerance mode: the candidates resumed and logged steps from this one on")
    ap.add_argument("--kinds", default="param,adam_m,adam_v")
    ap.add_argument("--exact", action="store_true", help="same bits, no tolerance")
    ap.add_argument("--regrouped", default="", help="exact mode: tensors held to the tolerance bound (needs --truth)")
    ap.add_argument("--norm-resharded", action="store_true",
                    help="exact mode: the gradient norms within the rounding of another grouping of their sum")
    ap.add_argument("--weights-only", action="store_true", help="compare the tensors only, not the logged series")
    ap.add_argument("--expect-reject", action="store_true", help="negative control: some check of the numbers must fail (the throughput check is left out)")
    ap.add_argument("--bf16", action="store_true", help="bf16 runs: the cap is 8 bf16 roundings, not 1e-4")
    ap.add_argument("--bound-of", default="",
                    help="tolerance mode: print the bound of the weights' tensor NAME, and exit")
    ap.add_argument("--pure-python", action="store_true",
                    help="sum in the standard library's loops even where numpy is there (as without it)")
    args = ap.parse_args()
    if args.pure_python:
        global numpy
        numpy = None
    args.cap = CAP_BF16 if args.bf16 else CAP
    if (not args.exact or args.regrouped) and not args.truth:
        ap.error("--truth is needed unless --exact (and with --regrouped)")
    if args.exact and args.ensemble:
        ap.error("--ensemble is for the tolerance mode: the exact mode compares with the reference's bits")
    if args.exact and args.from_step != 1:
        ap.error("--from-step is for the tolerance mode")

    if args.bound_of:
        if args.exact:
            ap.error("--bound-of is for the tolerance mode")
        print_bound_of(args)
        return
    table = Table()
    (compare_exact if args.exact else compare_tolerance)(args, table)
    # A negative control must be rejected by the numbers its planted error is in, not by
    # the throughput bookkeeping, which no planted error touches.
    if not args.weights_only and not args.expect_reject:
        compare_throughput(args, table)
    table.print()
    if args.expect_reject:
        print("negative control:", "rejected, as it must be" if table.failed else "ACCEPTED: the comparison is blind to it")
        sys.exit(0 if table.failed else 1)
    sys.exit(1 if table.failed else 0)


if __name__ == "__main__":
    main()
