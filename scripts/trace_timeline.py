#!/usr/bin/env python3
"""Draws one training step of one or more rank traces as a timeline (PNG).

  trace_timeline.py TRACE.json [TRACE.json ...] --out FIG.png [--step N] [--title TEXT] [--mark NAME ...]

TRACE.json are the files a stage writes with trace_file=PREFIX (PREFIX.rank<r>.json,
one per rank; format in common/trace.h). For every rank the figure has up to three
rows:

  main: compute   lane 0, the phases of the step (forward, backward, adamw, ...) as a
                  labelled strip on top and the ops inside them (matmul, attention,
                  ...) as bars below, coloured by op
  main: comm      lane 0 spans of category "comm": collectives the main thread calls
                  and waits for (stage 03's reduce-scatter, stage 04's per-bucket
                  reduce-scatter, waits)
  comm thread     lane 1: communication running beside the main thread (stage 02's
                  bucket all-reduces, stage 05's prefetched gathers)

--mark NAME outlines (hatched) every lane-0 span of that name on the compute row, at
whatever depth: a part of a phase worth seeing, such as stage 11's "recompute" inside
each backward. Rows with no spans are left out. Steps are found from the top-level spans: a step
begins at a "zero_grads" span and ends with its optimizer ("adamw...") and whatever
communication follows it. --step N picks step N (1-based); the default is the last
step that has an optimizer span (a steady-state step: the first one pays for warm-up).
Each rank's times are drawn from its own step start (the ranks' clocks have different
origins; their step starts line up to within the optimizer's run-to-run jitter,
because the step before ended with a collective).

Needs matplotlib (Debian: python3-matplotlib; run with /usr/bin/python3).
"""
import argparse
import os
import re
import signal
import sys

import trace_spans  # scripts/, beside this file

try:
    import matplotlib
except ImportError:
    print("trace_timeline: needs matplotlib (Debian: python3-matplotlib; /usr/bin/python3 has it)", file=sys.stderr)
    sys.exit(2)
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# Colours by what a span is. Ops are grouped into families by name prefix.
OP_COLOURS = [
    ("matmul", "#4C72B0", "matmul"),
    ("attention", "#8172B3", "attention"),
    ("gelu", "#55A868", "gelu"),
    ("layernorm", "#64B5CD", "layernorm"),
    ("softmax_crossentropy", "#CCB974", "cross-entropy"),
    ("adamw", "#937860", "AdamW"),
]
OP_OTHER = ("#A0A0A0", "other ops")
COMM_COLOURS = [
    ("allreduce", "#C44E52", "all-reduce"),
    ("all_reduce", "#C44E52", "all-reduce"),  # tensor parallelism's tp_all_reduce
    ("reduce_scatter", "#DD8452", "reduce-scatter"),
    ("allgather", "#2A9D8F", "all-gather"),
    ("all_gather", "#2A9D8F", "all-gather"),
    ("gather", "#2A9D8F", "all-gather"),
    ("wait", "#E0E0E0", "waiting"),
]
COMM_OTHER = ("#DA8BC3", "other comm")
PHASE_COLOUR = "#F2F2F2"


# A phase's label where it fits: its name, else a letter (a split backward's halves B and W,
# as the zero-bubble schedules name them), else none. CHAR_SHARE: the share of a 12-inch
# figure's time axis one 7-point character takes, with a character's margin to spare.
SHORT_PHASES = {"forward": "F", "backward": "B", "backward_input": "B", "backward_weight": "W"}
CHAR_SHARE = 0.0065


def phase_label(name, dur, char_ms):
    if dur >= char_ms * (len(name) + 1):
        return name
    short = SHORT_PHASES.get(name, name[:1])
    return short if dur >= char_ms * (len(short) + 1) else ""


def colour_of(name, table, other):
    for prefix, colour, label in table:
        if name.startswith(prefix) or prefix in name:
            return colour, label
    return other


def load(path):
    """(rank, spans) of a trace file: the rank from its name (PREFIX.rank<r>.json), else its spans' pid."""
    events = trace_spans.load_spans(path, "trace_timeline")
    if not events:
        fail(f"'{path}' has no spans")
    m = re.search(r"rank(\d+)", os.path.basename(path))
    pid = events[0].get("pid", 0)
    if not m and not isinstance(pid, int):
        fail(f"'{path}': no rank in its name (PREFIX.rank<r>.json) and its spans' pid {pid!r} is not one")
    return (int(m.group(1)) if m else pid), events


def steps(events):
    """[(start, end, optimized)] of every step (trace_spans.all_steps: from its first
    zero_grads to its optimizer and the communication right after, so a validation after
    it is left out), its end moved on to that of the communication thread's spans that
    started within it (a bucket's reduction that outlasts the main thread's work)."""
    out = []
    for start, end, optimized in trace_spans.all_steps(events):
        lane1_end = max((e["ts"] + e["dur"] for e in events
                         if e.get("tid", 0) != 0 and start <= e["ts"] < end), default=end)
        out.append((start, max(end, lane1_end), optimized))
    return out


def fail(message):
    print(f"trace_timeline: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", metavar="TRACE.json")
    ap.add_argument("--out", required=True, help="output image (PNG)")
    ap.add_argument("--step", type=int, default=0, help="step to draw, 1-based (default: the last full step)")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--width", type=float, default=12.0, help="figure width in inches")
    ap.add_argument("--dpi", type=int, default=100)
    ap.add_argument("--mark", action="append", default=[], metavar="NAME",
                    help="outline the lane-0 spans of this name on the compute row (repeatable)")
    args = ap.parse_args()
    # Checked before any drawing: matplotlib's own errors for these are tracebacks, and a
    # name without an image suffix is saved under another name (with .png added).
    if os.path.splitext(args.out)[1].lower() not in (".png", ".svg", ".pdf"):
        fail(f"--out '{args.out}': name an image file ending in .png, .svg or .pdf")
    if os.path.isdir(args.out):
        fail(f"--out '{args.out}' is a directory")
    if not 0 < args.width <= 100:  # NaN fails too
        fail(f"--width {args.width}: inches, above 0 and at most 100")
    if not 10 <= args.dpi <= 1000:
        fail(f"--dpi {args.dpi}: between 10 and 1000")
    if args.step < 0:
        fail(f"--step {args.step}: a step number from 1 (0, the default: the last full step)")

    loaded = [(path, *load(path)) for path in args.traces]
    # One run's traces, one per rank: two of one rank are two runs, whose rows would carry
    # the same label.
    seen = {}
    for path, rank, _ in loaded:
        if rank in seen:
            fail(f"'{seen[rank]}' and '{path}' are both rank {rank}: give one run's traces, one per rank "
                 "(PREFIX.rank<r>.json), and draw another run in a figure of its own")
        seen[rank] = path
    traces = sorted(((rank, events) for _, rank, events in loaded), key=lambda t: t[0])  # by rank
    rows = []  # (label, [(start_ms, dur_ms, colour, text)], kind)
    used_ops, used_comm = {}, {}
    span_ms = 0.0
    chosen = None
    for rank, events in traces:
        st = steps(events)
        if not st:
            fail(f"rank {rank}: no step (no zero_grads span) in the trace")
        full = [i for i, s in enumerate(st) if s[2]]
        idx = (args.step - 1) if args.step > 0 else (full[-1] if full else len(st) - 1)
        if not 0 <= idx < len(st):
            fail(f"rank {rank}: --step {args.step} but the trace has {len(st)} steps")
        chosen = idx + 1
        t0, t1, _ = st[idx]
        span_ms = max(span_ms, (t1 - t0) / 1e3)
        inside = [e for e in events if t0 <= e["ts"] < t1]

        def ms(e):
            return (e["ts"] - t0) / 1e3, e["dur"] / 1e3

        phases = [e for e in trace_spans.top_level(inside) if e.get("cat") != "comm"]
        ops, main_comm, side = [], [], []
        for e in inside:
            lane, cat = e.get("tid", 0), e.get("cat", "")
            if lane != 0:
                c, lab = colour_of(e["name"], COMM_COLOURS, COMM_OTHER) if cat == "comm" else colour_of(
                    e["name"], OP_COLOURS, OP_OTHER)
                (used_comm if cat == "comm" else used_ops)[lab] = c
                side.append((*ms(e), c, e["name"]))
            elif cat == "comm":
                c, lab = colour_of(e["name"], COMM_COLOURS, COMM_OTHER)
                used_comm[lab] = c
                main_comm.append((*ms(e), c, e["name"]))
            elif cat == "op":
                c, lab = colour_of(e["name"], OP_COLOURS, OP_OTHER)
                used_ops[lab] = c
                ops.append((*ms(e), c, e["name"]))
        marked = [(*ms(e), e["name"]) for e in inside if e.get("tid", 0) == 0 and e["name"] in args.mark]
        rows.append((f"rank {rank}  main: compute", ops, "compute", [(*ms(e), e["name"]) for e in phases], marked))
        if main_comm:
            rows.append((f"rank {rank}  main: comm", main_comm, "comm", [], []))
        if side:
            rows.append((f"rank {rank}  comm thread", side, "comm", [], []))

    height = 0.9 + 0.62 * len(rows)
    fig, ax = plt.subplots(figsize=(args.width, height), dpi=args.dpi)
    labels = []
    marks_drawn = set()
    for r, (label, spans, kind, phases, marked) in enumerate(rows):
        y = len(rows) - 1 - r
        labels.append((y, label))
        if kind == "compute":
            # phases: a light labelled strip in the upper part of the row
            for start, dur, name in phases:
                ax.broken_barh([(start, dur)], (y + 0.18, 0.26), facecolors=PHASE_COLOUR,
                               edgecolors="#808080", linewidth=0.6)
                text = phase_label(name, dur, span_ms * CHAR_SHARE * 12.0 / args.width)
                if text:
                    ax.text(start + dur / 2, y + 0.31, text, ha="center", va="center", fontsize=7)
            for start, dur, c, _ in spans:
                ax.broken_barh([(start, dur)], (y - 0.38, 0.52), facecolors=c, linewidth=0)
            for start, dur, name in marked:
                ax.broken_barh([(start, dur)], (y - 0.42, 0.60), facecolors="none", edgecolors="black",
                               hatch="///", linewidth=0.8)
                marks_drawn.add(name)
        else:
            for start, dur, c, _ in spans:
                ax.broken_barh([(start, dur)], (y - 0.32, 0.64), facecolors=c, edgecolors="#404040",
                               linewidth=0.5)
    ax.set_yticks([y for y, _ in labels])
    ax.set_yticklabels([l for _, l in labels], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlim(0, span_ms * 1.01)
    ax.set_xlabel("time from the rank's step start (ms)", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.5)
    ax.set_axisbelow(True)
    for y in range(1, len(rows)):
        ax.axhline(y - 0.5, color="#BBBBBB", linewidth=0.5)
    title = args.title or os.path.basename(args.traces[0])
    ax.set_title(f"{title} — step {chosen}", fontsize=10)
    handles = [Patch(facecolor=PHASE_COLOUR, edgecolor="#808080", label="phase")]
    handles += [Patch(facecolor=c, label=l) for l, c in used_ops.items()]
    handles += [Patch(facecolor=c, edgecolor="#404040", label=l) for l, c in used_comm.items()]
    handles += [Patch(facecolor="none", edgecolor="black", hatch="///", label=n) for n in sorted(marks_drawn)]
    ncol = min(len(handles), 9)
    legend_in = 0.22 * ((len(handles) + ncol - 1) // ncol) + 0.1
    fig.set_size_inches(args.width, height + legend_in)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=7.5, frameon=False)
    fig.tight_layout(rect=(0, legend_in / (height + legend_in), 1, 1))
    out_dir = os.path.dirname(args.out)
    try:
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
        fig.savefig(args.out, dpi=args.dpi)
    except OSError as e:
        fail(f"--out '{args.out}': cannot write it: {e}")
    print(f"{args.out}: step {chosen}, {len(rows)} rows, {span_ms:.1f} ms, {os.path.getsize(args.out)} bytes")
    for name in sorted(set(args.mark) - marks_drawn):
        print(f"trace_timeline: --mark {name}: no lane-0 span of that name in the step drawn; nothing marked",
              file=sys.stderr)


if __name__ == "__main__":
    # Piped into head, a print after the reader has gone ends the tool quietly, not with
    # a BrokenPipeError traceback (only when run: a program importing this keeps its own).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
