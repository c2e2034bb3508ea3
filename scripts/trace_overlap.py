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
  overlap ms   the part of that time during which lane 0 was running an op inside a
               "backward" span, i.e. the communication that ran while later layers'
               gradients were still being computed (the point of bucketing)
  overlap %    overlap / comm
  exposed ms   comm - overlap: communication while the main thread computed nothing
  wait ms      how long the main thread blocked on it (the "wait_buckets" spans)
  in phases ms the part of comm inside the "backward" spans themselves: an upper bound
               of overlap (below)

An op is a lane-0 span that holds no other span and is not communication (category
"comm", or the --comm and --wait spans, and what runs inside them): the main thread
computing. The phase spans around the ops ("backward") are not enough: a phase also
holds the moments between ops, and on a machine with more threads than cores, the
moments the main thread is not running at all because the communication thread has its
core. Communication during them is not hidden: counted by the phase spans, a single
bucket started as backward's last op ends looked half hidden, for as long as the main
thread waited for a core. Between ops there is also a little untraced work (a bucket's
buffer zeroed, say), so overlap is a lower bound and "in phases" an upper one; both are
printed, the last line is the lower.

A step runs from one step's first "zero_grads" span to the next step's, as
scripts/trace_spans.py finds steps (a rank holding several model chunks zeroes each one's
gradients in every step). --comm, --lane, --during and --wait measure other pairs, e.g.
stage 05's prefetched gathers:
  --comm gather_unit --during forward,backward --wait wait_prefetch

A collective's span on one rank also holds the time it waited for its peers to arrive:
when one rank runs late, its peers' spans grow, and what they show as exposed is the
imbalance between the ranks. So with several traces (one per rank of a job) a last
table takes, step by step, the smallest and largest exposed time over the ranks: the
smallest is what communication really cost the step (the rank that arrived last still
computed nothing for that long); the difference to the largest is imbalance, not
communication. Its last line is the hidden share: 1 - (smallest exposed) / (smallest
communication time), summed over the steps: the part of the communication that ran
behind compute.

Overlap is concurrency, not free time: ranks that share cores with their own
communication threads (CPU ranks on a small machine) slow their ops down while a
collective runs beside them. There the step time, not the hidden share, says what the
overlap gained; on a GPU, where a collective runs on the network and the copy engines,
the two agree.

--buckets also lists every comm span with its start and end relative to the end of the
step's last op in the phases (negative: it started while backward still ran).

Exits 0 after printing, 1 when a trace has none of the comm spans asked for, 2 on bad
arguments. Uses only the standard library.
"""
import argparse
import os
import signal
import sys

import trace_spans


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


def ops_of(lane0, not_compute):
    """The lane-0 spans that hold no other lane-0 span and are not communication.

    One thread's spans nest (a Span closes before its parent does), so in the order of
    (start, longest first) a span holds another exactly when the next one starts before
    it ends."""
    ordered = sorted(lane0, key=lambda e: (e["ts"], -e["dur"]))
    ops = []
    for i, e in enumerate(ordered):
        holds = i + 1 < len(ordered) and ordered[i + 1]["ts"] < e["ts"] + e["dur"]
        if not holds and e.get("cat") != "comm" and e["name"] not in not_compute:
            ops.append(e)
    return ops


def own_comm(lane0, not_compute):
    """The main thread's own communication: its spans of category "comm", its comm and wait spans."""
    return [e for e in lane0 if e.get("cat") == "comm" or e["name"] in not_compute]


def compute_ops(events, during, not_compute):
    """The main thread computing: the ops (ops_of) of lane 0 inside its `during` phase spans,
    but not inside its own communication (the additions of a ring the main thread runs)."""
    lane0 = [e for e in events if e.get("tid", 0) == 0]
    phases = merge((e["ts"], e["ts"] + e["dur"]) for e in lane0 if e["name"] in during)
    communicating = merge((e["ts"], e["ts"] + e["dur"]) for e in own_comm(lane0, not_compute))
    inside = [e for e in ops_of(lane0, not_compute) if covered(e["ts"], e["ts"] + e["dur"], phases) > 0]
    return [e for e in inside if covered(e["ts"], e["ts"] + e["dur"], communicating) == 0]


def intersect(a, b):
    """The intersection of two merged interval lists."""
    return [[max(s, t), min(e, f)] for s, e in a for t, f in b if max(s, t) < min(e, f)]


def intervals(spans, lo, hi):
    """The merged [start, end) of the spans that start in [lo, hi)."""
    return merge((e["ts"], e["ts"] + e["dur"]) for e in spans if lo <= e["ts"] < hi)


def analyse(path, comm_name, lane, during, wait_name, show_buckets, wait_given=False):
    """Prints a trace's table; returns {step: (exposed us, exposed us by the phases, comm us)}.
    A --during name, or a --wait name the user gave, that no lane-0 span has is an error (a
    misspelled name would measure nothing and print 0 % as if it were a finding)."""
    events = trace_spans.load_spans(path, "trace_overlap")
    comm = sorted((e for e in events if e["name"] == comm_name and e.get("tid", 0) == lane),
                  key=lambda e: e["ts"])
    if not comm:
        print(f"{path}: no '{comm_name}' spans on lane {lane}", file=sys.stderr)
        return None
    not_compute = {comm_name, wait_name}
    lane0 = [e for e in events if e.get("tid", 0) == 0]
    lane0_names = {e["name"] for e in lane0}
    missing = sorted(during - lane0_names) + ([wait_name] if wait_given and wait_name not in lane0_names else [])
    if missing:
        print(f"{path}: no {', '.join(repr(n) for n in missing)} spans on lane 0 (--during, --wait); its spans "
              f"there: {', '.join(sorted(lane0_names))}", file=sys.stderr)
        return None
    compute = compute_ops(events, during, not_compute)
    phases = [e for e in lane0 if e["name"] in during]
    # Communication on the main thread itself (a gather it runs, a wait) lies inside the
    # phases too, but is no compute in either measure.
    main_comm = own_comm(lane0, not_compute)
    waits = [e for e in lane0 if e["name"] == wait_name]
    starts = trace_spans.step_starts(events)
    if not starts:
        starts = [min(e["ts"] for e in events)]
    bounds = starts + [float("inf")]

    phase_names = "/".join(sorted(during))
    print(f"{os.path.basename(path)}: '{comm_name}' (lane {lane}) during {phase_names} (lane 0)")
    what = "buckets" if comm_name == "allreduce_bucket" else "spans"
    print(f"{'step':>4} {what:>7} {'comm ms':>9} {'overlap ms':>10} {'overlap %':>9} "
          f"{'exposed ms':>10} {'wait ms':>8} {'in phases ms':>12}")
    totals = [0.0, 0.0, 0.0]  # comm, overlap, in phases
    per_step = {}
    for i in range(len(starts)):
        lo, hi = bounds[i], bounds[i + 1]
        in_step = [(e["ts"], e["ts"] + e["dur"]) for e in comm if lo <= e["ts"] < hi]
        if not in_step:
            continue
        ops, phase = intervals(compute, lo, hi), intervals(phases, lo, hi)
        main = intersect(phase, intervals(main_comm, lo, hi))  # the main thread's own comm inside the phases
        comm_us = sum(f - s for s, f in in_step)
        overlap_us = sum(covered(s, f, ops) for s, f in in_step)
        in_phase_us = sum(covered(s, f, phase) - covered(s, f, main) for s, f in in_step)
        wait_us = sum(e["dur"] for e in waits if lo <= e["ts"] < hi)
        for k, v in enumerate((comm_us, overlap_us, in_phase_us)):
            totals[k] += v
        per_step[i + 1] = (comm_us - overlap_us, comm_us - in_phase_us, comm_us)
        pct = 100.0 * overlap_us / comm_us if comm_us > 0 else 0.0
        print(f"{i + 1:>4} {len(in_step):>7} {comm_us / 1e3:>9.1f} {overlap_us / 1e3:>10.1f} {pct:>8.1f}% "
              f"{(comm_us - overlap_us) / 1e3:>10.1f} {wait_us / 1e3:>8.1f} {in_phase_us / 1e3:>12.1f}")
        if show_buckets:
            last_op_end = max((f for s, f in ops), default=lo)
            for k, (s, f) in enumerate(in_step):
                print(f"       {comm_name} {k}: {(s - last_op_end) / 1e3:+8.1f} .. {(f - last_op_end) / 1e3:+8.1f} ms "
                      f"from the end of the last op of {phase_names}, {covered(s, f, ops) / 1e3:.1f} ms overlapped")
    comm_us, overlap_us, in_phase_us = totals
    if comm_us > 0:
        print(f" all {'':>7} {comm_us / 1e3:>9.1f} {overlap_us / 1e3:>10.1f} {100.0 * overlap_us / comm_us:>8.1f}% "
              f"{(comm_us - overlap_us) / 1e3:>10.1f} {'':>8} {in_phase_us / 1e3:>12.1f}")
    return per_step


def across_ranks(per_rank, phase_names):
    """Per step, the smallest and largest exposed time over the ranks' traces, and the hidden share."""
    steps = sorted(set.intersection(*(set(r) for r in per_rank)))
    if not steps:
        return
    print(f"\nacross the {len(per_rank)} traces: exposed communication per step")
    print(f"{'step':>4} {'min exposed ms':>14} {'max exposed ms':>14} {'min comm ms':>11}"
          f"   (min exposed: what communication cost; max - min: imbalance)")
    exposed = by_phases = communication = 0.0
    for s in steps:
        xs = [r[s][0] for r in per_rank]
        cs = [r[s][2] for r in per_rank]
        exposed += min(xs)
        by_phases += min(r[s][1] for r in per_rank)
        communication += min(cs)
        print(f"{s:>4} {min(xs) / 1e3:>14.1f} {max(xs) / 1e3:>14.1f} {min(cs) / 1e3:>11.1f}")
    # The rank that reaches a collective last waits for nobody: its spans are the
    # communication itself, and the part of them its ops do not cover is what the
    # communication still cost the step.
    if communication > 0:
        print(f"inside the {phase_names} spans: {100.0 * (1.0 - by_phases / communication):.1f}% (an upper bound: "
              f"it counts the moments between ops, untraced work or the main thread waiting for a core)")
        print(f"hidden share: {100.0 * (1.0 - exposed / communication):.1f}% "
              f"(1 - exposed {exposed / 1e3:.1f} ms / communication {communication / 1e3:.1f} ms, "
              f"both the smallest over the ranks, summed over the steps)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", metavar="TRACE.json")
    ap.add_argument("--comm", default="allreduce_bucket", help="name of the communication spans")
    ap.add_argument("--lane", type=int, default=1, help="lane (tid) of the communication spans")
    ap.add_argument("--during", default="backward", help="comma-separated compute spans on lane 0")
    ap.add_argument("--wait", default=None, help="lane-0 span in which the main thread waits for them "
                    "(default wait_buckets)")
    ap.add_argument("--buckets", action="store_true", help="list every comm span too")
    args = ap.parse_args()
    during = set(n for n in args.during.split(",") if n)
    wait = args.wait or "wait_buckets"
    ok, per_rank = True, []
    for i, path in enumerate(args.traces):
        if i:
            print()
        per_step = analyse(path, args.comm, args.lane, during, wait, args.buckets, wait_given=args.wait is not None)
        ok &= per_step is not None
        if per_step:
            per_rank.append(per_step)
    if ok and len(per_rank) > 1:
        across_ranks(per_rank, "/".join(sorted(during)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    # Piped into head, a print after the reader has gone ends the tool quietly, not with
    # a BrokenPipeError traceback (only when run: a program importing this keeps its own).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
