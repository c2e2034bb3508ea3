"""Figures several notebooks share: a run's loss curve and one traced step as a timeline.

Needs matplotlib (Debian: python3-matplotlib) and numpy.
"""
import pathlib
import sys

import numpy as np

import gptruns

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
import trace_overlap  # noqa: E402  (scripts/: the one definition of what overlap is)

# Colours of the spans a timeline draws, by name prefix; the rest are grey.
SPAN_COLOURS = [
    ("forward", "#4C72B0"),
    ("backward", "#8172B3"),
    ("adamw", "#937860"),
    ("grad_norm", "#CCB974"),
    ("zero_grads", "#DDDDDD"),
    ("wait", "#E17C05"),
    ("allreduce", "#C44E52"),
    ("reduce_scatter", "#DD8452"),
    ("gather", "#2A9D8F"),
    ("ring_attention_block", "#55A868"),
    ("ring_", "#64B5CD"),
    ("recv_", "#F2B880"),
]


def colour(name):
    for prefix, c in SPAN_COLOURS:
        if name.startswith(prefix):
            return c
    return "#A0A0A0"


def loss_curve(ax, run, label=None, **style):
    """The run's training loss per step, and its validation losses as dots of the same colour."""
    line, = ax.plot(run.steps(), run.losses(), label=label or run.name, **style)
    if run.val:
        ax.plot([v["step"] for v in run.val], [v["val_loss"] for v in run.val], "o", color=line.get_color(),
                ms=4, label=f"{label or run.name}, validation")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    return line


def step_window(events, step=-1):
    """(start, end) in microseconds of one step of a rank's trace: from its zero_grads span
    to the next one (the last step: to the end of the trace). step counts from 0; -1 is the last."""
    starts = gptruns.step_starts(events)
    if not starts:
        raise ValueError("the trace has no zero_grads span: no step to show")
    if not -len(starts) <= step < len(starts):
        raise ValueError(f"step {step}: the trace has {len(starts)} steps (0 to {len(starts) - 1}, or -1 for the last)")
    k = range(len(starts))[step]
    end = starts[k + 1] if k + 1 < len(starts) else max(e["ts"] + e["dur"] for e in events)
    return starts[k], end


def quietest_step(traces, wait_name):
    """The step (0-based) whose slowest rank spent the least time in `wait_name` spans,
    the first step left out when there are others (it pays for warm-up): the step that
    other work on the machine disturbed least, to draw as the typical one."""
    n = min((len(gptruns.step_starts(events)) for events in traces.values()), default=0)
    if n == 0:
        raise ValueError("the traces have no step")

    def worst_wait(k):
        waits = []
        for events in traces.values():
            t0, t1 = step_window(events, k)
            waits.append(sum(e["dur"] for e in events if e["name"] == wait_name and t0 <= e["ts"] < t1))
        return max(waits)

    return min(range(1, n) if n > 1 else range(n), key=worst_wait)


def top_level(events, lane=0):
    """The spans of one lane that no other span of that lane contains (a step's phases)."""
    spans = sorted((e for e in events if e.get("tid", 0) == lane), key=lambda e: (e["ts"], -e["dur"]))
    out, end = [], -1
    for e in spans:
        if e["ts"] >= end:
            out.append(e)
            end = e["ts"] + e["dur"]
    return out


def timeline(ax, traces, step=-1, lanes=((0, "main"), (1, "comm thread")), label_lanes=(1,)):
    """Draws one step of every rank: a row per rank and lane, holding that lane's top-level
    spans, times in ms from the rank's own step start (each rank's clock has its own
    origin). Spans of the lanes in label_lanes are numbered in time order (1, 2, ...).
    Returns {rank: (start, end)} of the step drawn, in microseconds of that rank's clock."""
    rows, windows, y = [], {}, 0
    drawn = set()
    for rank, events in traces.items():
        t0, t1 = step_window(events, step)
        windows[rank] = (t0, t1)
        for lane, lane_name in lanes:
            spans = [e for e in top_level(events, lane) if t0 <= e["ts"] < t1]
            if not spans:
                continue
            for i, e in enumerate(spans):
                start, width = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
                name = e["name"]
                ax.broken_barh([(start, width)], (y - 0.4, 0.8), facecolor=colour(name), edgecolor="white",
                               linewidth=0.5, label=None if name in drawn else name)
                drawn.add(name)
                if lane in label_lanes:
                    ax.text(start + width / 2, y, str(i + 1), ha="center", va="center", fontsize=7, color="white")
            rows.append(f"rank {rank} {lane_name}")
            y += 1
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("ms from the step's start (each rank's own clock)")
    return windows


def typical_step(bubbles):
    """The step to draw of a pipeline run: of the steps after the first (it pays for first
    touches), the one whose bubble, averaged over the ranks, is the median. bubbles: the
    {rank: [bubble per step]} of gptruns.pipeline_bubbles."""
    n = min(len(b) for b in bubbles.values())
    steps = list(range(1, n)) if n > 1 else [0]
    steps.sort(key=lambda k: np.mean([b[k] for b in bubbles.values()]))
    return steps[len(steps) // 2]


def pipeline_timeline(ax, traces, step=-1, labels=None, colour_of=None, idle="#EFEFEF"):
    """Draws one step of a pipeline's schedule: a row per rank, from the step's barrier (each
    rank's own clock) to the end of the slowest rank's schedule. The light background is
    the step's makespan: where it shows, the rank computes nothing (idle); on it, the
    rank's computation spans (gptruns.COMPUTE_SPANS), and thin bars where it waits for a
    message or for its sends (idle too).

    step: the step (0-based, -1 the last) of gptruns.pipeline_windows. labels: {rank: [text
    of the rank's n-th computation span]} (from gptruns.read_schedule), written on the
    spans. colour_of(span, rank, n) -> (colour, legend label) of the rank's n-th
    computation span; by default by the span's name. Returns ({rank: (start, end)} of the
    windows drawn, in microseconds of each rank's clock; the makespan in ms)."""
    windows = {r: gptruns.pipeline_windows(ev)[step] for r, ev in traces.items()}
    makespan = max(t1 - t0 for t0, t1 in windows.values()) / 1e3
    drawn = set()

    def bar(start, width, y, height, face, name):
        ax.broken_barh([(start, width)], (y - height / 2, height), facecolor=face, edgecolor="white", linewidth=0.5,
                       label=None if name in drawn else name)
        drawn.add(name)

    for y, (rank, events) in enumerate(traces.items()):
        t0, t1 = windows[rank]
        bar(0, makespan, y, 0.9, idle, "idle (the step's makespan)")
        n = 0
        for e in top_level(events):
            if not (t0 <= e["ts"] < t1 and e["name"] in gptruns.SCHEDULE_SPANS):
                continue
            start, width = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
            if e["name"] in gptruns.COMPUTE_SPANS:
                face, name = colour_of(e, rank, n) if colour_of else (colour(e["name"]), e["name"])
                bar(start, width, y, 0.8, face, name)
                if labels and n < len(labels.get(rank, [])) and width > makespan * 0.02:
                    ax.text(start + width / 2, y, labels[rank][n], ha="center", va="center", fontsize=7, color="white")
                n += 1
            else:
                bar(start, width, y, 0.25, colour(e["name"]),
                    "waiting for a message" if e["name"].startswith("recv") else "waiting for sends")
    ax.set_yticks(range(len(traces)))
    ax.set_yticklabels([f"rank {r}" for r in traces])
    ax.set_ylim(len(traces) - 0.5, -0.5)
    ax.set_xlim(0, makespan * 1.01)
    ax.set_xlabel("ms from the step's barrier (each rank's own clock)")
    return windows, makespan


def overlap_ms(events, comm_name, during_name, window, comm_lane=1):
    """(communication ms, ms of it under the main thread's ops inside `during_name` spans) of
    one rank in a window: the spans named comm_name on comm_lane, against what
    scripts/trace_overlap.py counts as compute (its ops, not the phase spans' gaps)."""
    t0, t1 = window
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in events
            if e.get("tid", 0) == comm_lane and e["name"] == comm_name and t0 <= e["ts"] < t1]
    ops = trace_overlap.compute_ops(events, {during_name}, {comm_name})
    union = trace_overlap.merge((e["ts"], e["ts"] + e["dur"]) for e in ops if t0 <= e["ts"] < t1)
    total = sum(b - a for a, b in comm)
    inside = sum(trace_overlap.covered(a, b, union) for a, b in comm)
    return total / 1e3, inside / 1e3


def bytes_label(n):
    """A byte count for a label: B, KiB or MiB."""
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def kib(values):
    return np.asarray(values, dtype=float) / 1024
