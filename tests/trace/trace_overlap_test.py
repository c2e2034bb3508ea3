#!/usr/bin/env python3
"""scripts/trace_overlap.py on traces written by hand, whose overlaps are known exactly.

  trace_overlap_test.py ROOT WORK

Each case builds the Chrome-trace events of one step (lane 0: the main thread's phase
and op spans; lane 1: the communication thread's spans), runs the tool and compares
the overlap it prints, or the hidden share across ranks, with the value the intervals
give by hand. The cases that matter most are the ones where a phase span ("backward")
covers communication that no op covers: a gap between ops, the moments the main thread
waited for a core, a communication span on the main thread itself. Counted as overlap,
they made a single bucket started at the end of backward look half hidden.
"""
import json
import pathlib
import re
import subprocess
import sys

ROOT, WORK = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
TOOL = ROOT / "scripts" / "trace_overlap.py"
failures = 0


def span(name, ts, dur, tid=0, cat="op"):
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": 0, "tid": tid}


def write(name, events):
    path = WORK / f"{name}.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def run(paths, *args):
    out = subprocess.run([sys.executable, str(TOOL), *paths, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAIL: trace_overlap.py exited {out.returncode}:\n{out.stdout}{out.stderr}")
    return out.stdout


def step_overlap(text):
    """The overlap ms of step 1 in the first per-trace table."""
    row = re.search(r"^\s+1\s+\d+\s+([\d.]+)\s+([\d.]+)\s", text, re.M)
    return float(row.group(2))


def hidden_share(text):
    return float(re.search(r"hidden share: (-?[\d.]+)%", text).group(1))


def expect(name, got, want):
    global failures
    ok = got == want if isinstance(want, list) else abs(got - want) < 0.05
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} [{name}]: {got} (expected {want})")


# A step: zero_grads, then backward [0, 100) ms holding ops; times in microseconds.
def step(ops, comm, extra=()):
    events = [span("zero_grads", -1000, 500), span("backward", 0, 100_000, cat="phase")]
    events += [span(n, s * 1000, d * 1000) for n, s, d in ops]
    events += [span("allreduce_bucket", s * 1000, d * 1000, tid=1, cat="comm") for s, d in comm]
    return events + list(extra)


# 1. A bucket under one op: all of it overlapped.
one = write("under_op", step([("matmul_backward", 0, 100)], [(20, 30)]))
expect("bucket under an op", step_overlap(run([one])), 30.0)

# 2. The last op ends at 60 ms; backward's span runs on to 100 (the main thread waited for
#    its core). A bucket from 60 to 90 ran while no op did: none of it is overlapped.
gap = write("after_last_op", step([("matmul_backward", 0, 40), ("embedding_backward", 40, 20)], [(60, 30)]))
expect("bucket after the last op, inside backward's span", step_overlap(run([gap])), 0.0)

# 3. Half under an op, half in a gap between two ops.
half = write("half", step([("matmul_backward", 0, 40), ("layernorm_backward", 60, 40)], [(30, 20)]))
expect("bucket half under an op", step_overlap(run([half])), 10.0)

# 4. A parent op holding two children: the gap between the children is not compute.
nested = write("nested", step([("attention_backward", 10, 80), ("softmax_part", 10, 20), ("matmul_part", 70, 20)],
                              [(30, 40)]))
expect("gap between the children of a span", step_overlap(run([nested])), 0.0)

# 5. An op outside the phases (AdamW after backward) does not hide a bucket.
after = write("outside_phase", step([("matmul_backward", 0, 100), ("adamw_update", 100, 50)], [(100, 30)]))
expect("op outside the backward phase", step_overlap(run([after])), 0.0)

# 6. Gathers on the main thread itself (lane 0, category comm) inside forward: never compute,
#    nor is an op they run themselves (a ring's addition).
gathers = [span("zero_grads", -1000, 500), span("forward", 0, 100_000, cat="phase"),
           span("matmul_forward", 0, 40_000), span("gather_unit", 40_000, 20_000, cat="comm"),
           span("residual_forward", 45_000, 5_000), span("matmul_forward", 60_000, 40_000)]
main = write("main_thread_gather", gathers)
expect("a gather on the main thread", step_overlap(run([main], "--comm", "gather_unit", "--lane", "0",
                                                       "--during", "forward", "--wait", "gather_unit")), 0.0)

# 7. Across ranks: the bucket ends together on both; rank a arrived early (its span holds
#    20 ms of waiting for b), rank b arrived last and computed under 15 of its 25 ms. What
#    communication cost the step is b's 10 exposed ms of its 25: 60 % hidden. (The least
#    communication is b's 25 ms; a's exposed is 45 - 15 = 30 ms.)
a = write("rank_a", step([("matmul_backward", 0, 70)], [(55, 45)]))
b = write("rank_b", step([("matmul_backward", 0, 90)], [(75, 25)]))
expect("hidden share across ranks", hidden_share(run([a, b])), 60.0)

# 8. Both ranks as in case 2: nothing hidden, though all of it lies inside backward's span,
#    which the upper-bound line reports.
both = run([gap, write("after_last_op_b", step([("matmul_backward", 0, 60)], [(60, 30)]))])
expect("one bucket after the last op: hidden share", hidden_share(both), 0.0)
expect("one bucket after the last op: inside the spans",
       float(re.search(r"inside the backward spans: (-?[\d.]+)%", both).group(1)), 100.0)

# 9. Two model chunks (an interleaved pipeline): each step zeroes both, then runs its
#    optimizer. Two steps, numbered 1 and 2, each with its bucket.
def chunked_step(t0_ms):
    return [span("zero_grads", t0_ms * 1000, 500), span("zero_grads", t0_ms * 1000 + 500, 500),
            span("backward", (t0_ms + 1) * 1000, 100_000, cat="phase"),
            span("matmul_backward", (t0_ms + 1) * 1000, 100_000),
            span("allreduce_bucket", (t0_ms + 21) * 1000, 30_000, tid=1, cat="comm"),
            span("adamw", (t0_ms + 101) * 1000, 5000)]


chunked = run([write("chunked", chunked_step(0) + chunked_step(200))])
numbers = [int(n) for n in re.findall(r"^\s+(\d+)\s+1\s", chunked, re.M)]
expect("steps of two chunks each, numbered", numbers, [1, 2])

# 10. A --during or --wait name no lane-0 span has (misspelled) is an error naming it, not
#     a 0 % overlap; the control: the same trace with the right names is measured.
def refused(paths, *args):
    out = subprocess.run([sys.executable, str(TOOL), *paths, *args], capture_output=True, text=True)
    return out.returncode != 0 and all(f"'{n}'" in out.stderr for n in args[1::2])


for flag, name in (("--during", "bakward"), ("--wait", "wait_bucket")):
    if not refused([gap], flag, name):
        print(f"FAIL: {flag} {name} (no such lane-0 span) was not refused, naming it")
        failures += 1
waited = write("waited", step([("matmul_backward", 0, 60)], [(60, 30)], [span("wait_buckets", 100_000, 0)]))
run([waited], "--during", "backward", "--wait", "wait_buckets")

# 11. Piped into a reader that stops after a line (head -1), the tool ends quietly, with
#     no BrokenPipeError traceback: a trace of 20000 buckets lists more than a pipe holds.
many = write("many_buckets", step([("matmul_backward", 0, 100)], [(i * 0.004, 0.002) for i in range(20000)]))
reader = subprocess.Popen([sys.executable, str(TOOL), many, "--buckets"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
reader.stdout.readline()
reader.stdout.close()
_, stderr = reader.communicate()
if b"Traceback" in stderr or b"BrokenPipeError" in stderr:
    print(f"FAIL: piped into a reader that stopped, the tool printed: {stderr.decode()[-300:]}")
    failures += 1

print("all trace_overlap cases agree with the intervals" if failures == 0 else f"{failures} cases wrong")
sys.exit(1 if failures else 0)
