#!/usr/bin/env python3
"""Where a step's time goes: every span's time per step, one or more traces side by side.

  trace_ops.py TRACE.json [TRACE.json ...] [--top N] [--all-steps]

TRACE.json are the files a stage writes with trace_file=PATH (stage 01: PATH itself;
stages 02+: PATH.rank<r>.json, one per rank; the format is in common/trace.h). Give two
stages' traces, or two ranks', or one run before and after a change, and the spans that
differ stand out:

  scripts/trace_ops.py runs/a/trace.json runs/b/trace.json.rank0.json

A step runs from its "zero_grads" to its optimizer and the communication right after it,
as scripts/trace_spans.py finds steps: what runs between two steps (a validation, the
sample at the end) belongs to none, and a step cut off before its optimizer is left out.
The first step is left out too: it pays for the run's warm-up (buffers touched for the
first time, a schedule's first messages). --all-steps counts it; a trace of one step
counts that one.

For every span name the table gives, per trace, the mean milliseconds a counted step
spends in spans of that name (the spans on any lane that start within a counted step,
divided by their number) and how many such spans a step has. A span's time includes the
spans inside it: "forward" holds "matmul_forward", and the column "inside" names the span
that usually holds it (on its lane). Spans of the communication thread (lane 1: stage 02's
bucket all-reduces, stage 05's prefetched gathers) run beside the main thread's and are
marked "(lane 1)". Rows come in order of the largest time in any trace; --top N keeps the
first N (default 30, 0: all).
"""
import argparse
import collections
import signal
import sys

import trace_spans


def fail(message):
    print(f"trace_ops: {message}", file=sys.stderr)
    sys.exit(2)


def parents(spans):
    """The name of the innermost span holding each span on its lane ("" at the top)."""
    parent = {}
    by_lane = collections.defaultdict(list)
    for i, e in enumerate(spans):
        by_lane[(e.get("pid", 0), e.get("tid", 0))].append(i)
    for indices in by_lane.values():
        holding = []  # the spans holding the current one, innermost last
        for i in trace_spans.outer_first(spans, indices):
            start = spans[i]["ts"]
            while holding and spans[holding[-1]]["ts"] + spans[holding[-1]]["dur"] <= start:
                holding.pop()
            parent[i] = spans[holding[-1]]["name"] if holding else ""
            holding.append(i)
    return parent


class Profile:
    """One trace's spans per counted step, by name."""

    def __init__(self, path, all_steps):
        spans = trace_spans.load_spans(path, "trace_ops")
        bounds = trace_spans.steps(spans)
        if not bounds:
            fail(f"'{path}': no training step in the trace (a \"zero_grads\" span on lane 0 followed by an "
                 f"optimizer span, \"{trace_spans.OPTIMIZER_PREFIX}...\")")
        counted = bounds if all_steps or len(bounds) == 1 else bounds[1:]
        self.path = path
        self.steps = len(counted)
        self.first_counted = len(bounds) - len(counted) + 1
        self.step_ms = sum(end - start for start, end in counted) / len(counted) / 1e3
        parent = parents(spans)
        self.ms = collections.Counter()
        self.count = collections.Counter()
        parent_votes = collections.defaultdict(collections.Counter)
        lane_votes = collections.defaultdict(collections.Counter)
        for i, e in enumerate(spans):
            if not any(start <= e["ts"] < end for start, end in counted):
                continue
            name = e["name"]
            self.ms[name] += e["dur"] / 1e3 / self.steps
            self.count[name] += 1
            parent_votes[name][parent[i]] += 1
            lane_votes[name][e.get("tid", 0)] += 1
        self.parent = {n: v.most_common(1)[0][0] for n, v in parent_votes.items()}
        self.lane = {n: v.most_common(1)[0][0] for n, v in lane_votes.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", metavar="TRACE.json")
    ap.add_argument("--top", type=int, default=30, help="rows to print, largest first (0: all)")
    ap.add_argument("--all-steps", action="store_true", help="count the first (warm-up) step too")
    args = ap.parse_args()
    if args.top < 0:
        fail(f"--top {args.top}: give a number of rows, 0 for all")
    profiles = [Profile(p, args.all_steps) for p in args.traces]

    for k, p in enumerate(profiles):
        steps = (f"step {p.first_counted}" if p.steps == 1
                 else f"steps {p.first_counted}-{p.first_counted + p.steps - 1}")
        print(f"[{k + 1}] {p.path}: {steps} of the trace, {p.step_ms:.2f} ms a step")
    names = set().union(*(p.ms for p in profiles))
    rows = sorted(names, key=lambda n: (-max(p.ms[n] for p in profiles), n))
    if args.top:
        rows = rows[: args.top]

    def owner(name):  # the first trace that has the name says where it sits
        return next(p for p in profiles if name in p.parent)

    def label(name):
        lane = owner(name).lane[name]
        return name + (f" (lane {lane})" if lane != 0 else "")

    width = max([len("span")] + [len(label(n)) for n in rows])
    inside = max([len("inside")] + [len(owner(n).parent[n]) for n in rows])
    header = f"{'span':<{width}} {'inside':<{inside}}" + "".join(f" | {f'[{k + 1}] ms/step':>14} {'n/step':>7}" for k in range(len(profiles)))
    print(header)
    print("-" * len(header))
    for name in rows:
        cells = []
        for p in profiles:
            if name in p.ms:
                cells.append(f" | {p.ms[name]:14.2f} {p.count[name] / p.steps:7.1f}")
            else:
                cells.append(f" | {'-':>14} {'-':>7}")
        print(f"{label(name):<{width}} {owner(name).parent[name]:<{inside}}" + "".join(cells))
    if args.top and len(names) > args.top:
        print(f"({len(names) - args.top} more span names; --top 0 lists them all)")


if __name__ == "__main__":
    # Piped into head, a print after the reader has gone ends the tool quietly, not with
    # a BrokenPipeError traceback (only when run: a program importing this keeps its own).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
