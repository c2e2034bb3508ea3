#!/usr/bin/env python3
"""Checks stage 06's printed budget: measured against formula, per rank 0.

  check_tp_budget.py LOG [LOG ...]        exit 1 when a LOG misses a target
  check_tp_budget.py --self-test LOG      the checks must reject LOG with one byte changed

Stage 06 prints, after its first step, two tables (train.cpp, tp_budget.h):
  memory by kind ... (allocated | formula, README):
    params    <allocated> | <formula> bytes  (...)
  tensor-parallel communication in step N ... (counted | formula, README):
    all_reduce  <calls> | <calls> calls  <bytes> | <bytes> bytes
Targets: every kind of memory (parameters, gradients, optimizer state, activations)
and every collective's calls and bytes equal the formula exactly. The tracker counts
the bytes the arrays hold and the formula counts the same arrays' elements, so nothing
is estimated and no tolerance is due (in bf16 mode weights and activations are 2 bytes,
their statistics 4, on the CPU as on a GPU, as the formula counts them).
"""
import re
import signal
import sys

MEM = re.compile(r"^\s+(params|grads|optimizer|activations)\s+(\d+) \|\s+(\d+) bytes")
COMM = re.compile(r"^\s+(\w+)\s+(\d+) \|\s+(\d+) calls\s+(\d+) \|\s+(\d+) bytes")


def check(text, name):
    problems, rows = [], 0
    # The communication table lists the collectives counted or expected; at tp = 1, where
    # a group of one calls none, it is empty but for its header.
    if "tensor-parallel communication in step" not in text:
        problems.append(f"{name}: no communication table")
    for line in text.splitlines():
        m = MEM.match(line)
        if m:
            kind, got, want = m.group(1), int(m.group(2)), int(m.group(3))
            rows += 1
            if got != want:
                problems.append(f"{name}: {kind} {got} bytes, formula {want}")
            continue
        m = COMM.match(line)
        if m:
            op, calls, want_calls, got, want = m.group(1), *map(int, m.groups()[1:])
            if calls != want_calls or got != want:
                problems.append(f"{name}: {op} {calls} calls {got} bytes, formula {want_calls} calls {want} bytes")
    if rows < 4:
        problems.append(f"{name}: no memory table found ({rows} of its 4 rows)")
    return problems


def read_log(path):
    """A log's text; an unreadable one ends the check with status 2, named."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        print(f"check_tp_budget: cannot read the log '{path}': {e.strerror}", file=sys.stderr)
        sys.exit(2)


def main():
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    if not args or args == ["--self-test"] or (args[0] == "--self-test" and len(args) != 2) or \
            any(a.startswith("-") for a in args[1 if args[0] == "--self-test" else 0:]):
        print("usage: check_tp_budget.py LOG [LOG ...] | --self-test LOG  (--help)", file=sys.stderr)
        sys.exit(2)
    if args[0] == "--self-test":
        text = read_log(args[1])
        if check(text, args[1]):
            sys.exit(f"self-test: {args[1]} fails before any change")
        # Negative controls: one byte more in the parameters or the activations, one call
        # more in a collective.
        def one_more(kind):
            return re.sub(rf"({kind}\s+)(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 1), text, count=1)
        for label, bad in (("params + 1 byte", one_more("params")), ("activations + 1 byte", one_more("activations")),
                           ("one call more", re.sub(r"^(\s+\w+\s+)(\d+)( \|\s+\d+ calls)", lambda m: m.group(1) + str(int(m.group(2)) + 1) + m.group(3), text, count=1, flags=re.M))):
            if not check(bad, label):
                sys.exit(f"self-test: '{label}' was accepted")
        print("self-test: the checks reject one byte (params, activations) and one call off")
        return
    problems = []
    for log in args:
        problems += check(read_log(log), log)
    for p in problems:
        print("MISS", p)
    if problems:
        sys.exit(1)
    print(f"all {len(args)} runs: memory and communication as the formulas say")


if __name__ == "__main__":
    # Piped into head, a print after the reader has gone ends the tool quietly, not with
    # a BrokenPipeError traceback (only when run: a program importing this keeps its own).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
