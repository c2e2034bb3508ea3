#!/usr/bin/env python3
"""scripts/trace_timeline.py on traces written by hand: which step it draws and how long.

  trace_timeline_test.py ROOT WORK

The tool prints "OUT: step K, R rows, D ms, B bytes"; the step K it picked and the time D
the figure spans are known exactly for each trace below:
  * three steps of 26 ms (the default draws the last, K = 3; --step 1 the first);
  * a validation after each step, which no step may take in (D stays 26, not 44);
  * a rank holding two model chunks zeroes two gradient sets a step: still three steps
    (counting each zero_grads as a step start would find six, and draw half a step);
  * a bucket reduction on the communication thread that outlasts the optimizer: the step
    reaches its end (D = 30.5);
  * a step cut off before its optimizer: the default draws the last full one;
  * bad input: a step that does not exist, a file that is no trace, a span with a NaN,
    infinite or negative time, an --out with no image suffix or that is a directory, a
    width or dpi matplotlib cannot draw, a negative step (exit 2, named; these were
    tracebacks, or a figure saved under another name, or sums printed as nan).
Exits 77 (skipped) where this Python has no matplotlib.
"""
import json
import pathlib
import re
import subprocess
import sys

from trace_fixture import span  # beside this file

try:
    import matplotlib  # noqa: F401  (the tool draws with it)
except ImportError:
    print("trace_timeline_test: no matplotlib here: skipped")
    sys.exit(77)

ROOT, WORK = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
TOOL = ROOT / "scripts" / "trace_timeline.py"
WORK.mkdir(parents=True, exist_ok=True)
failures = 0


def step(t0, chunks=1, bucket_ms=4, optimizer=True):
    """A step at t0 ms, its spans in a trace file's order (inner ones first): zero_grads
    once per model chunk (0.5 ms each), a forward, a backward with a bucket reduction on
    the communication thread, the optimizer and an all-gather after it. Without a longer
    bucket it lasts 26 ms from its first zero_grads."""
    t = t0 + chunks * 0.5
    spans = [span("zero_grads", t0 + c * 0.5, 0.5) for c in range(chunks)]
    spans += [span("matmul_forward", t + 1, 6), span("forward", t + 0.5, 9),
              span("matmul_backward", t + 10, 8), span("backward", t + 9.5, 9),
              span("allreduce_bucket", t + 15, bucket_ms, tid=1, cat="comm")]
    if optimizer:
        spans += [span("adamw_update", t + 19, 4), span("adamw", t + 19, 4),
                  span("allgather_params", t + 23, 3 - chunks * 0.5, cat="comm")]
    return spans


def validation(t0):
    return [span("matmul_forward", t0 + 1, 5), span("forward", t0, 18)]


def write(name, events):
    path = WORK / f"trace.rank{name}.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True)


def expect_drawn(case, trace, step_no, ms, *flags):
    global failures
    out = run(trace, "--out", str(WORK / f"{case}.png"), *flags)
    m = re.search(r": step (\d+), \d+ rows, ([0-9.]+) ms", out.stdout)
    if out.returncode != 0 or not m:
        print(f"FAIL {case}: exit {out.returncode}\n{out.stdout}{out.stderr}")
        failures += 1
    elif (int(m.group(1)), float(m.group(2))) != (step_no, ms):
        print(f"FAIL {case}: drew step {m.group(1)} over {m.group(2)} ms, expected step {step_no} over {ms:.1f} ms")
        failures += 1
    else:
        print(f"ok   {case}: step {step_no}, {ms:.1f} ms")


def expect_refused(case, args, *words):
    global failures
    out = run(*args)
    if out.returncode != 2 or not all(w in out.stderr for w in words):
        print(f"FAIL {case}: exit {out.returncode}, stderr {out.stderr!r}; expected 2 naming {words}")
        failures += 1
    else:
        print(f"ok   {case}: refused, {out.stderr.strip()}")


plain = write(0, step(0) + step(100) + step(200))
expect_drawn("the last step by default", plain, 3, 26.0)
expect_drawn("--step 1", plain, 1, 26.0, "--step", "1")
with_validation = write(1, step(0) + validation(30) + step(100) + validation(130) + step(200) + validation(230))
expect_drawn("a validation after each step is no part of it", with_validation, 3, 26.0)
two_chunks = write(2, step(0, chunks=2) + step(100, chunks=2) + step(200, chunks=2))
expect_drawn("two model chunks, two zero_grads a step", two_chunks, 3, 26.0)
long_bucket = write(3, step(0) + step(100) + step(200, bucket_ms=15))
expect_drawn("a bucket outlasting the optimizer", long_bucket, 3, 30.5)
cut_off = write(4, step(0) + step(100) + step(200, optimizer=False))
expect_drawn("a step cut off before its optimizer is not the default", cut_off, 2, 26.0)

expect_refused("a step past the trace's", [plain, "--out", str(WORK / "x.png"), "--step", "4"], "--step 4", "3 steps")
not_a_trace = WORK / "not_a_trace.json"
not_a_trace.write_text("{\"traceEvents\": 3}")
expect_refused("a file that is no trace", [str(not_a_trace), "--out", str(WORK / "y.png")], "not_a_trace.json")

for name, bad in [("nan", float("nan")), ("inf", float("inf")), ("negative", -5.0)]:
    spans = step(0) + step(100)
    spans[1]["dur"] = bad
    path = WORK / f"{name}_dur.json"
    path.write_text(json.dumps({"traceEvents": spans}))  # Python writes NaN and Infinity as such
    expect_refused(f"a span of {name} duration", [str(path), "--out", str(WORK / "z.png")], f"{name}_dur.json",
                   "not a finite time")
(WORK / "a_dir.png").mkdir(exist_ok=True)
for case, flags, words in [
        ("--out without a suffix", ["--out", str(WORK / "fig")], ["ending in .png"]),
        ("--out a directory", ["--out", str(WORK / "a_dir.png")], ["is a directory"]),
        ("--width 0", ["--out", str(WORK / "w.png"), "--width", "0"], ["--width 0"]),
        ("--width nan", ["--out", str(WORK / "w.png"), "--width", "nan"], ["--width nan"]),
        ("--dpi 100000", ["--out", str(WORK / "w.png"), "--dpi", "100000"], ["--dpi 100000"]),
        ("--step -2", ["--out", str(WORK / "w.png"), "--step", "-2"], ["--step -2"])]:
    expect_refused(case, [plain, *flags], *words)

# Two traces of one rank are two runs: refused, naming both (rows would share a label).
other_run = WORK / "other" / "trace.rank0.json"
other_run.parent.mkdir(exist_ok=True)
other_run.write_text(json.dumps({"traceEvents": step(0)}))
expect_refused("two traces of rank 0", [plain, str(other_run), "--out", str(WORK / "two.png")], "both rank 0",
               str(other_run))
# A --mark that matches no span is said (a misspelled name marked nothing); the control:
# one that matches is not.
for mark, said in (("bakward", True), ("backward", False)):
    out = run(plain, "--out", str(WORK / "mark.png"), "--mark", mark)
    if out.returncode != 0 or (f"--mark {mark}: no lane-0 span" in out.stderr) != said:
        print(f"FAIL --mark {mark}: exit {out.returncode}, stderr {out.stderr!r}; expected the note {said}")
        failures += 1
    else:
        print(f"ok   --mark {mark}: {'said' if said else 'no note'}")

sys.exit(1 if failures else 0)
