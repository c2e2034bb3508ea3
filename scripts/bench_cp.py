#!/usr/bin/env python3
"""Attention time per context-parallel rank from stage 10's traces.

  bench_cp.py LABEL TRACE.rank0.json TRACE.rank1.json ...

Sums, per rank, the spans of the ring's attention blocks (ring_attention_block and
ring_attention_block_backward: the flash-attention work, without the waits for
messages) over the steps after the first, and prints each rank's time, the slowest,
the mean and the imbalance slowest / mean (1.00 is ideal: no rank waits for another).
"""
import signal
import sys

# Piped into head, a print after the reader has gone ends the program quietly, as a
# command-line tool does, not with a BrokenPipeError traceback.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)

import trace_spans  # scripts/, beside this file: the trace loader the trace tools share

if sys.argv[1:2] in (["-h"], ["--help"]):
    print(__doc__)
    sys.exit(0)
if len(sys.argv) < 3:
    print("usage: bench_cp.py LABEL TRACE [TRACE ...]  (one Chrome trace per cp rank; --help)", file=sys.stderr)
    sys.exit(2)
label, paths = sys.argv[1], sys.argv[2:]
times = []
for path in paths:
    spans = trace_spans.load_spans(path, "bench_cp")  # a bad file ends here, named, with status 2
    starts = trace_spans.step_starts(spans)
    after_first = starts[1] if len(starts) > 1 else 0  # the first step warms up
    blocks = [e for e in spans if e["name"].startswith("ring_attention_block")]
    if not blocks:
        print(f"bench_cp: '{path}' has no ring_attention_block spans: not a trace of stage 10 (or 11) at cp > 1",
              file=sys.stderr)
        sys.exit(2)
    times.append(sum(e["dur"] for e in blocks if e["ts"] >= after_first) / 1e3)
slowest, mean = max(times), sum(times) / len(times)
if mean == 0:
    print("bench_cp: no attention block after the first step in any trace (a run of one step?)", file=sys.stderr)
    sys.exit(2)
print(f"{label}: attention ms per rank " + " ".join(f"{t:.1f}" for t in times) +
      f" | slowest {slowest:.1f} ms, mean {mean:.1f} ms, slowest/mean {slowest / mean:.3f} (ideal 1.000)")
