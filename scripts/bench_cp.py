#!/usr/bin/env python3
"""Attention time per context-parallel rank from stage 10's traces.

  bench_cp.py LABEL TRACE.rank0.json TRACE.rank1.json ...

Sums, per rank, the spans of the ring's attention blocks (ring_attention_block and
ring_attention_block_backward: the flash-attention work, without the waits for
messages) over the steps after the first, and prints each rank's time, the slowest,
the mean and the imbalance slowest / mean (1.00 is ideal: no rank waits for another).
"""
import json
import sys

if sys.argv[1:2] in (["-h"], ["--help"]):
    print(__doc__)
    sys.exit(0)
if len(sys.argv) < 3:
    print("usage: bench_cp.py LABEL TRACE [TRACE ...]  (one Chrome trace per cp rank; --help)", file=sys.stderr)
    sys.exit(2)
label, paths = sys.argv[1], sys.argv[2:]
times = []
for path in paths:
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    starts = sorted(e["ts"] for e in events if e.get("name") == "zero_grads")
    after_first = starts[1] if len(starts) > 1 else 0  # the first step warms up
    times.append(sum(e["dur"] for e in events if e.get("name", "").startswith("ring_attention_block")
                     and e["ts"] >= after_first) / 1e3)
slowest, mean = max(times), sum(times) / len(times)
print(f"{label}: attention ms per rank " + " ".join(f"{t:.1f}" for t in times) +
      f" | slowest {slowest:.1f} ms, mean {mean:.1f} ms, slowest/mean {slowest / mean:.3f} (ideal 1.000)")
