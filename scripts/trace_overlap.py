#!/usr/bin/env python3
"""How much of a rank's communication ran hidden behind its compute, step by step.

  trace_overlap.py TRACE.json [TRACE.json ...] [--comm NAME] [--lane N] [--during NAME[,NAME]]
                   [--wait NAME] [--buckets]

Reads the Chrome trace a stage writes with trace_file=PREFIX (one file per rank,
PREFIX.rank<r>.json; see common/trace.h). By default it measures stage 02's gradient
buckets: the spans named "allreduce_bucket" on lane 1 (the communication thread of
stages/02_ddp/grad_sync.cpp) against the "backward" spans on lane 0 (the main thread).
For every step of every trace it prints

  buckets      how many comm spans the step has
  comm ms      their total duration
  overlap ms   the part of that time during which lane 0 was inside a "backward" span,
               i.e. the communication that ran while later layers' gradients were still
               being computed (the point of bucketing)
  overlap %    overlap / comm
  exposed ms   comm - overlap: communication still running after backward ended
  wait ms      how long the main thread actually blocked on it (the "wait_buckets" spans)

A step runs from one "zero_grads" span to the next. --comm, --lane, --during and --wait
measure other pairs, e.g. stage 05's prefetched gathers:
  --comm gather_unit --during forward,backward --wait wait_prefetch

A collective's span on one rank also holds the time it waited for its peers to arrive:
when one rank runs late, its peers' spans grow, and what they show as exposed is the
imbalance between the ranks. So with several traces (one per rank of a job) a last
table takes, step by step, the smallest and largest wait over the ranks: the smallest
is what communication really cost the step (the rank that arrived last still waited
that long); the difference to the largest is imbalance, not communication. Its last
line is the hidden share: 1 - (smallest wait) / (smallest communication time), summed
over the steps: the part of the communication that ran behind compute.
--buckets also lists every comm span with its start and end relative to the end of the
step's backward (negative: it started while backward still ran).

Exits 0 after printing, 1 when a trace has none of the comm spans asked for, 2 on bad
arguments. Uses only the standard library.
"""
import argparse
import json
import os
import sys


def load_events(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"trace_overlap: cannot read the trace '{path}': {e}", file=sys.stderr)
        sys.exit(2)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X"]


def merge(intervals):
    """Union of [start, end) intervals, sorted and non-overlapping."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(start, end, union):
    """Length of [start, end) that lies inside the merged intervals `union`."""
    return sum(max(0, min(end, e) - max(start, s)) for s, e in union)


def steps_of(events):
    """Start times (us) of the steps: every "zero_grads" span on lane 0."""
    starts = sorted(e["ts"] for e in events if e["name"] == "zero_grads" and e.get("tid", 0) == 0)
    return starts


def analyse(path, comm_name, lane, during, wait_name, show_buckets):
    events = load_events(path)
    comm = sorted((e for e in events if e["name"] == comm_name and e.get("tid", 0) == lane),
                  key=lambda e: e["ts"])
    if not comm:
        print(f"{path}: no '{comm_name}' spans on lane {lane}", file=sys.stderr)
        return None
    compute = [e for e in events if e["name"] in during and e.get("tid", 0) == 0]
    waits = [e for e in events if e["name"] == wait_name and e.get("tid", 0) == 0]
    starts = steps_of(events)
    if not starts:
        starts = [min(e["ts"] for e in events)]
    bounds = starts + [float("inf")]

    print(f"{os.path.basename(path)}: '{comm_name}' (lane {lane}) during {'/'.join(sorted(during))} (lane 0)")
    what = "buckets" if comm_name == "allreduce_bucket" else "spans"
    print(f"{'step':>4} {what:>7} {'comm ms':>9} {'overlap ms':>10} {'overlap %':>9} "
          f"{'exposed ms':>10} {'wait ms':>8}")
    total_comm = total_overlap = 0.0
    per_step = {}
    for i in range(len(starts)):
        lo, hi = bounds[i], bounds[i + 1]
        in_step = [e for e in comm if lo <= e["ts"] < hi]
        if not in_step:
            continue
        union = merge((e["ts"], e["ts"] + e["dur"]) for e in compute if lo <= e["ts"] < hi)
        comm_us = sum(e["dur"] for e in in_step)
        overlap_us = sum(covered(e["ts"], e["ts"] + e["dur"], union) for e in in_step)
        wait_us = sum(e["dur"] for e in waits if lo <= e["ts"] < hi)
        total_comm += comm_us
        total_overlap += overlap_us
        per_step[i + 1] = (wait_us, comm_us)
        pct = 100.0 * overlap_us / comm_us if comm_us > 0 else 0.0
        print(f"{i + 1:>4} {len(in_step):>7} {comm_us / 1e3:>9.1f} {overlap_us / 1e3:>10.1f} {pct:>8.1f}% "
              f"{(comm_us - overlap_us) / 1e3:>10.1f} {wait_us / 1e3:>8.1f}")
        if show_buckets:
            back_end = max((e for s, e in union), default=lo)
            for k, e in enumerate(in_step):
                s, f = e["ts"], e["ts"] + e["dur"]
                print(f"       {comm_name} {k}: {(s - back_end) / 1e3:+8.1f} .. {(f - back_end) / 1e3:+8.1f} ms "
                      f"from the end of {'/'.join(sorted(during))}, {covered(s, f, union) / 1e3:.1f} ms overlapped")
    if total_comm > 0:
        print(f" all {'':>7} {total_comm / 1e3:>9.1f} {total_overlap / 1e3:>10.1f} "
              f"{100.0 * total_overlap / total_comm:>8.1f}% {(total_comm - total_overlap) / 1e3:>10.1f}")
    return per_step


def across_ranks(waits, wait_name):
    """Per step, the smallest and largest wait over the ranks' traces, and the hidden share."""
    steps = sorted(set.intersection(*(set(w) for w in waits)))
    if not steps:
        return
    print(f"\nacross the {len(waits)} traces: '{wait_name}' per step")
    print(f"{'step':>4} {'min wait ms':>11} {'max wait ms':>11} {'min comm ms':>11}"
          f"   (min wait: exposed communication; max - min: imbalance)")
    exposed = communication = 0.0
    for s in steps:
        ws = [w[s][0] for w in waits]
        cs = [w[s][1] for w in waits]
        exposed += min(ws)
        communication += min(cs)
        print(f"{s:>4} {min(ws) / 1e3:>11.1f} {max(ws) / 1e3:>11.1f} {min(cs) / 1e3:>11.1f}")
    # The rank that reaches a collective last waits for nobody: its spans are the
    # communication itself, and its wait is what communication still cost the step.
    if communication > 0:
        print(f"hidden share: {100.0 * (1.0 - exposed / communication):.1f}% "
              f"(1 - exposed {exposed / 1e3:.1f} ms / communication {communication / 1e3:.1f} ms, "
              f"both the smallest over the ranks, summed over the steps)")
        if exposed > communication:  # a wait span brackets the communication and its own bookkeeping
            print("  (negative: the waits outlast the communication itself, so none of it ran hidden; the excess "
                  "is the wait's own overhead, visible only when steps are this short)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", metavar="TRACE.json")
    ap.add_argument("--comm", default="allreduce_bucket", help="name of the communication spans")
    ap.add_argument("--lane", type=int, default=1, help="lane (tid) of the communication spans")
    ap.add_argument("--during", default="backward", help="comma-separated compute spans on lane 0")
    ap.add_argument("--wait", default="wait_buckets", help="lane-0 span in which the main thread waits for them")
    ap.add_argument("--buckets", action="store_true", help="list every comm span too")
    args = ap.parse_args()
    during = set(n for n in args.during.split(",") if n)
    ok, waits = True, []
    for i, path in enumerate(args.traces):
        if i:
            print()
        per_step = analyse(path, args.comm, args.lane, during, args.wait, args.buckets)
        ok &= per_step is not None
        if per_step:
            waits.append(per_step)
    if ok and len(waits) > 1:
        across_ranks(waits, args.wait)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
