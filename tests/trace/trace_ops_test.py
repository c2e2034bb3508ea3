#!/usr/bin/env python3
"""scripts/trace_ops.py on traces written by hand, whose times per step are known exactly.

  trace_ops_test.py ROOT WORK

The traces have three steps. The first (the warm-up) has a matmul of 50 ms, the others
one of 6 ms, so a tool that counted the first step, or divided by the wrong number of
steps, prints another figure than 6.00 (--all-steps must print the mean of all three,
20.67: the control that the first step is there to be left out). The other cases: the
span that holds each one, the communication thread's lane, a name only one of two traces
has, a trace of a single step, and bad input (exit 2 with the file named).
"""
import json
import pathlib
import re
import subprocess
import sys

ROOT, WORK = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
TOOL = ROOT / "scripts" / "trace_ops.py"
WORK.mkdir(parents=True, exist_ok=True)
failures = 0


def span(name, start_ms, dur_ms, tid=0):
    return {"name": name, "cat": "op", "ph": "X", "ts": start_ms * 1000, "dur": dur_ms * 1000, "pid": 0, "tid": tid}


def step(t0, matmul_ms, extra=()):
    """One step starting at t0 ms: zero_grads, a forward holding a matmul and two layernorms,
    two bucket all-reduces on the communication thread, the optimizer."""
    return [span("zero_grads", t0, 1), span("forward", t0 + 1, 60 if matmul_ms > 10 else 10),
            span("matmul_forward", t0 + 2, matmul_ms), span("layernorm_forward", t0 + 8.5, 0.5),
            span("layernorm_forward", t0 + 9.2, 0.5), span("allreduce_bucket", t0 + 12, 4, tid=1),
            span("allreduce_bucket", t0 + 16, 4, tid=1), span("adamw", t0 + 70 if matmul_ms > 10 else t0 + 20, 3),
            *extra]


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
# b: the same steps with a 3 ms matmul, and a span a has not.
b = write("b", step(0, 50) + step(100, 3, [span("recompute", 150, 2)]) + step(200, 3, [span("recompute", 250, 2)]))

out = run([a])
t = rows(out)
expect("matmul, steps 2-3", t["matmul_forward"][1][0], (6.0, 1.0))
expect("matmul inside", t["matmul_forward"][0], "forward")
expect("forward", t["forward"][1][0], (10.0, 1.0))
expect("two layernorms a step", t["layernorm_forward"][1][0], (1.0, 2.0))
expect("comm thread's buckets", t["allreduce_bucket"][1][0], (8.0, 2.0))
expect("lane 1 marked", "allreduce_bucket (lane 1)" in out, True)
expect("top-level span has no holder", t["adamw"][0], "")
# Step 2 runs 100 ms (to step 3's zero_grads), step 3 to its last span's end: 23 ms.
expect("steps counted", re.search(r"\[1\] \S+: (steps \d-\d), ([\d.]+) ms a step", out).groups(),
       ("steps 2-3", "61.50"))
first = list(t).index("matmul_forward") < list(t).index("forward")
expect("rows by time (forward 10 ms before matmul 6 ms)", first, False)

# The control: counting the warm-up step moves the matmul to (50 + 6 + 6) / 3.
t_all = rows(run([a], "--all-steps"))
expect("--all-steps matmul", t_all["matmul_forward"][1][0][0], 20.67)

t2 = rows(run([a, b]))
expect("side by side: a's matmul", t2["matmul_forward"][1][0], (6.0, 1.0))
expect("side by side: b's matmul", t2["matmul_forward"][1][1], (3.0, 1.0))
expect("a span only b has", t2["recompute"][1], [None, (2.0, 1.0)])

single = write("single", step(0, 6))
expect("a one-step trace counts its step", "step 1," in run([single]), True)

top = run([a], "--top", "2")
expect("--top 2 keeps two rows", len(rows(top)), 2)
expect("--top says what it left", "more span names" in top, True)

# Bad input: exit 2, the file named.
bad = WORK / "bad.json"
bad.write_text("{not json")
expect("not JSON", str(bad) in run([str(bad)], status=2), True)
no_step = write("no_step", [span("forward", 0, 5)])
expect("no zero_grads", "no step" in run([no_step], status=2), True)
expect("missing file", "nowhere.json" in run([str(WORK / "nowhere.json")], status=2), True)
expect("--top -1", "--top -1" in run([a], "--top", "-1", status=2), True)

print(f"{failures} failure(s)")
sys.exit(1 if failures else 0)
