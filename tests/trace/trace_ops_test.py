#!/usr/bin/env python3
"""scripts/trace_ops.py on traces written by hand, whose times per step are known exactly.

  trace_ops_test.py ROOT WORK

The traces have three steps, their spans in the order a trace file writes them (inner
ones first). The first (the warm-up) has a matmul of 50 ms, the others one of 6 ms, so a
tool that counted the first step, or divided by the wrong number of steps, prints another
figure than 6.00 (--all-steps must print the mean of all three, 20.67: the control that
the first step is there to be left out). The other cases: what lies outside every step
(a validation, the sample, an unfinished step), a step that zeroes two model chunks, the
span that holds each one (two equal spans included), the communication thread's lane, a
name only one of two traces has, a trace of a single step, and bad input (exit 2 with the
file named).
"""
import json
import pathlib
import re
import subprocess
import sys

from trace_fixture import span  # beside this file

ROOT, WORK = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
TOOL = ROOT / "scripts" / "trace_ops.py"
WORK.mkdir(parents=True, exist_ok=True)
failures = 0


def step(t0, matmul_ms, chunks=1, extra=()):
    """One step at t0 ms, its spans in the order a trace file has them (a span is written
    when it ends: the inner ones first): zero_grads once per model chunk, a forward holding
    a matmul and two layernorms, two bucket all-reduces on the communication thread, a
    gradient norm whose one op lasts exactly as long as it (a tie), the optimizer, and the
    communication after it (an all-gather of the weights). 26 ms after t0 it is done, 76 ms
    when the matmul is longer than 10 ms (the forward then lasts 60)."""
    d = 50 if matmul_ms > 10 else 0
    zeroing = [span("zero_grads", t0 + c * 0.5, 0.5) for c in range(chunks)]
    t = t0 + chunks * 0.5
    return [*zeroing, span("matmul_forward", t + 1, matmul_ms), span("layernorm_forward", t + 7.5 + d, 0.5),
            span("layernorm_forward", t + 8.2 + d, 0.5), span("forward", t + 0.5, 10 + d),
            span("allreduce_bucket", t + 11.5 + d, 4, tid=1, cat="comm"),
            span("allreduce_bucket", t + 15.5 + d, 4, tid=1, cat="comm"),
            span("sum_of_squares", t + 19.5 + d, 1), span("grad_norm", t + 19.5 + d, 1),
            span("adamw_update", t + 20.5 + d, 3), span("adamw", t + 20.5 + d, 3),
            span("allgather_params", t + 23.5 + d, 2, cat="comm"), *extra]


def validation(t0):
    """A validation pass, or the sample: forwards (holding matmuls) outside any step."""
    return [span("matmul_forward", t0 + 1, 5), span("forward", t0, 7), span("matmul_forward", t0 + 11, 5),
            span("forward", t0 + 10, 7)]


def write(name, events):
    path = WORK / f"{name}.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def run(paths, *args, status=0):
    out = subprocess.run([sys.executable, str(TOOL), *paths, *args], capture_output=True, text=True)
    if out.returncode != status:
        sys.exit(f"FAIL: trace_ops.py {' '.join(args)} exited {out.returncode}, not {status}:\n{out.stdout}{out.stderr}")
    return out.stdout + out.stderr


def rows(text):
    """{span: (inside, [(ms, n) or None per trace])} from the table."""
    table = {}
    for line in text.splitlines():
        if " | " not in line or line.startswith("span"):
            continue
        head, *cells = line.split(" | ")
        words = head.split()
        name = words[0]
        inside = words[-1] if len(words) > 1 and not words[-1].endswith(")") else ""
        values = []
        for c in cells:
            parts = c.split()
            values.append(None if parts == ["-", "-"] else (float(parts[0]), float(parts[1])))
        table[name] = (inside, values)
    return table


def expect(name, got, want):
    global failures
    ok = got == want if not isinstance(want, float) else abs(got - want) < 0.005
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} [{name}]: {got!r} (expected {want!r})")


a = write("a", step(0, 50) + step(100, 6) + step(200, 6))
# b: a 3 ms matmul, and a span a has not.
b = write("b", step(0, 50) + step(100, 3, extra=[span("recompute", 110, 2)]) +
          step(200, 3, extra=[span("recompute", 210, 2)]))

out = run([a])
t = rows(out)
expect("matmul, steps 2-3", t["matmul_forward"][1][0], (6.0, 1.0))
expect("matmul inside", t["matmul_forward"][0], "forward")
expect("forward", t["forward"][1][0], (10.0, 1.0))
expect("two layernorms a step", t["layernorm_forward"][1][0], (1.0, 2.0))
expect("comm thread's buckets", t["allreduce_bucket"][1][0], (8.0, 2.0))
expect("lane 1 marked", "allreduce_bucket (lane 1)" in out, True)
expect("top-level span has no holder", t["adamw"][0], "")
expect("of two equal spans the later written holds the other", t["sum_of_squares"][0], "grad_norm")
expect("the communication after the optimizer is in the step", t["allgather_params"][1][0], (2.0, 1.0))
expect("steps counted, each to its all-gather's end",
       re.search(r"\[1\] \S+: (steps \d-\d) of the trace, ([\d.]+) ms a step", out).groups(), ("steps 2-3", "26.00"))
first = list(t).index("matmul_forward") < list(t).index("forward")
expect("rows by time (forward 10 ms before matmul 6 ms)", first, False)

# The control: counting the warm-up step moves the matmul to (50 + 6 + 6) / 3.
t_all = rows(run([a], "--all-steps"))
expect("--all-steps matmul", t_all["matmul_forward"][1][0][0], 20.67)

t2 = rows(run([a, b]))
expect("side by side: a's matmul", t2["matmul_forward"][1][0], (6.0, 1.0))
expect("side by side: b's matmul", t2["matmul_forward"][1][1], (3.0, 1.0))
expect("a span only b has", t2["recompute"][1], [None, (2.0, 1.0)])

# A validation between steps 2 and 3 and the sample after the last step belong to no
# step; nor does a step cut off before its optimizer (the run was stopped). Counted,
# each would add forwards and matmuls to a step.
c = write("c", step(0, 50) + step(100, 6) + validation(140) + step(200, 6) + validation(240) +
          [span("zero_grads", 300, 1), span("forward", 301, 10)])
out_c = run([c])
t_c = rows(out_c)
expect("validation and sample left out: forward", t_c["forward"][1][0], (10.0, 1.0))
expect("validation and sample left out: matmul", t_c["matmul_forward"][1][0], (6.0, 1.0))
expect("an unfinished step left out", "steps 2-3 of the trace, 26.00 ms" in out_c, True)

# Two model chunks (interleaved pipeline): each zeroes its gradients, one step all the same.
chunks = write("chunks", step(0, 50, chunks=2) + step(100, 6, chunks=2) + step(200, 6, chunks=2))
out_chunks = run([chunks])
t_chunks = rows(out_chunks)
expect("two zero_grads a step, one step", t_chunks["zero_grads"][1][0], (1.0, 2.0))
expect("two chunks: steps 2-3", "steps 2-3 of the trace, 26.50 ms" in out_chunks, True)

single = write("single", step(0, 6))
expect("a one-step trace counts its step", "step 1 of the trace" in run([single]), True)

top = run([a], "--top", "2")
expect("--top 2 keeps two rows", len(rows(top)), 2)
expect("--top says what it left", "more span names" in top, True)

# Bad input: exit 2, the file named.
bad = WORK / "bad.json"
bad.write_text("{not json")
expect("not JSON", str(bad) in run([str(bad)], status=2), True)
no_step = write("no_step", [span("forward", 0, 5)])
expect("no zero_grads", "no training step" in run([no_step], status=2), True)
expect("missing file", "nowhere.json" in run([str(WORK / "nowhere.json")], status=2), True)
expect("--top -1", "--top -1" in run([a], "--top", "-1", status=2), True)

print(f"{failures} failure(s)")
sys.exit(1 if failures else 0)
