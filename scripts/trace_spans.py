"""Reading the traces a stage writes (trace_file; the format is in common/trace.h), and
finding their training steps: what scripts/trace_ops.py, trace_overlap.py and trace_timeline.py
share.

A step starts at a "zero_grads" span on lane 0 (the first of them: a rank holding several
model chunks, an interleaved pipeline, zeroes each chunk's gradients) and ends with its
optimizer (the "adamw..." spans, SGD included) and the communication right after it (stage
03's all-gather of the weights). What runs between two steps, a validation or the sample at
the end, belongs to none.
"""
import json
import math
import sys

OPTIMIZER_PREFIX = "adamw"


class TraceError(ValueError):
    """A trace file that cannot be read as one; the message names the file."""


def load_spans(path, tool):
    """The complete events ("ph": "X") of a trace file; bad input ends `tool` with status 2."""
    try:
        return read_spans(path)
    except TraceError as e:
        print(f"{tool}: {e}", file=sys.stderr)
        sys.exit(2)


def read_spans(path):
    """The complete events ("ph": "X") of a trace file; bad input raises TraceError (for a
    library, such as the notebooks' gptruns)."""
    def fail(message):
        raise TraceError(message)

    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read the trace '{path}': {e}")
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        fail(f"'{path}' is not a trace: no list of trace events (common/trace.h)")
    spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    for e in spans:
        if not isinstance(e.get("name"), str) or not all(isinstance(e.get(k), (int, float)) for k in ("ts", "dur")):
            fail(f"'{path}': a span without a name, a start (ts) or a duration (dur): {json.dumps(e)[:200]}")
        # Python's json reads NaN and Infinity; a trace the stages write has neither, nor a
        # negative duration, and sums over such spans would print nonsense, not fail.
        if not (math.isfinite(e["ts"]) and math.isfinite(e["dur"]) and e["dur"] >= 0):
            fail(f"'{path}': a span whose start or duration is not a finite time >= 0: {json.dumps(e)[:200]}")
        if not all(isinstance(e.get(k, 0), (int, str)) and not isinstance(e.get(k, 0), bool) for k in ("pid", "tid")):
            fail(f"'{path}': a span whose pid or tid is not a number or a name: {json.dumps(e)[:200]}")
    return spans


def outer_first(spans, indices):
    """`indices` of spans sorted by start, the span holding another before it: the longer
    of two that start together, and of two equal ones the later in the file (a span is
    written when it ends)."""
    return sorted(indices, key=lambda i: (spans[i]["ts"], -spans[i]["dur"], -i))


def top_level(spans):
    """The lane-0 spans no other lane-0 span holds: the phases of the steps, in order."""
    tops, reach = [], None
    for i in outer_first(spans, (i for i, e in enumerate(spans) if e.get("tid", 0) == 0)):
        if reach is None or spans[i]["ts"] >= reach:
            tops.append(spans[i])
            reach = spans[i]["ts"] + spans[i]["dur"]
    return tops


def all_steps(spans):
    """[(start, end, optimized)] in us of every step, a last one cut off before its
    optimizer included (optimized false; its end is its last phase's)."""
    out, start, end, optimized = [], None, None, False
    for e in top_level(spans):
        if optimized and not e["name"].startswith(OPTIMIZER_PREFIX) and e.get("cat") != "comm":
            out.append((start, end, True))  # the step's optimizer and its communication are done
            start, optimized = None, False
        if start is None:
            if e["name"] != "zero_grads":
                continue  # between steps: a validation, the sample
            start = e["ts"]
        optimized |= e["name"].startswith(OPTIMIZER_PREFIX)
        end = e["ts"] + e["dur"]
    if start is not None:
        out.append((start, end, optimized))
    return out


def steps(spans):
    """[(start, end)] in us of every step that reached its optimizer."""
    return [(start, end) for start, end, optimized in all_steps(spans) if optimized]


def step_starts(spans):
    """Start times (us) of every step, one cut off before its optimizer included."""
    return [start for start, _, _ in all_steps(spans)]
