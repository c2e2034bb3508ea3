#!/usr/bin/env python3
"""The table of scripts/bench_recompute.sh, from its runs.

  bench_recompute.py WORK

WORK holds one run directory per (schedule, mode), named SCHEDULE-MODE (gpipe, 1f1b,
interleaved, zb-h1; none, selective, full; zb-h1 has no full), each with the trainer's
stdout.txt, its metrics.jsonl and a checkpoint (whose manifest gives the model's shape).
Prints, per schedule and pipeline rank, what each rank held in flight after the first
step and its activation MiB in each mode (the line every pipeline rank prints), the mean
step time after the first step, the shares of `none` on rank 0, and the measured bubble;
above it, the bytes of one block's activations against what full and selective recompute
keep of them (notebooks/gptruns.py: block_activation_bytes).
"""
import os
import signal
import sys

# Piped into head, a print after the reader has gone ends the program quietly, as a
# command-line tool does, not with a BrokenPipeError traceback.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)

if sys.argv[1:2] in (["-h"], ["--help"]):
    print(__doc__)
    sys.exit(0)
if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
    print("usage: bench_recompute.py WORK  (the directory of bench_recompute.sh's runs; --help)", file=sys.stderr)
    sys.exit(2)
# gptruns.Run(name) reads WORK/name; a relative WORK is the current directory's (gptruns
# would take it from the repository root).
os.environ["GPT_NOTEBOOK_RUNS"] = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "notebooks"))
import gptruns  # noqa: E402  (the run reader the notebooks use)

SCHEDULES = {"gpipe": ("none", "selective", "full"), "1f1b": ("none", "selective", "full"),
             "interleaved": ("none", "selective", "full"), "zb-h1": ("none", "selective")}  # zb-h1 refuses full


def measure(name):
    """(report of the pipeline lines, mean step ms after the first step) of run `name`."""
    run = gptruns.Run(name)
    ms = [line["ms"] for line in run.train[1:]]
    return gptruns.pipeline_report(run), sum(ms) / len(ms)


def main():
    first = gptruns.Run("gpipe-none")
    block, output, cheap = gptruns.block_activation_bytes(first.config, first.layout)
    kept = block - cheap  # what selective recompute keeps
    print(f"one block, one micro-batch: {block / 2**20:.2f} MiB of activations; "
          f"full recompute keeps {output / 2**20:.2f} MiB ({output / block:.3f}), "
          f"selective {kept / 2**20:.2f} MiB ({kept / block:.3f})")
    print(f"{'schedule':12s} {'rank':>4s} {'in flight':>9s} {'act. MiB none':>13s} {'selective':>9s} {'full':>8s} "
          f"{'step ms none':>12s} {'selective':>9s} {'full':>8s}")
    for schedule, modes in SCHEDULES.items():
        report, ms = {}, {}
        for mode in modes:
            report[mode], ms[mode] = measure(f"{schedule}-{mode}")
        mib = {mode: {r: line["activations_mib"] for r, line in report[mode]["ranks"].items()} for mode in modes}
        full_ms = f"{ms['full']:8.1f}" if "full" in ms else f"{'-':>8s}"
        for r, line in report["none"]["ranks"].items():
            full_mib = f"{mib['full'][r]:8.2f}" if "full" in mib else f"{'-':>8s}"
            print(f"{schedule:12s} {r:4d} {line['in_flight']:9d} {mib['none'][r]:13.2f} {mib['selective'][r]:9.2f} "
                  f"{full_mib} {ms['none']:12.1f} {ms['selective']:9.1f} {full_ms}")
        shares = [f"memory selective {mib['selective'][0] / mib['none'][0]:.3f}"]
        if "full" in mib:
            shares.append(f"full {mib['full'][0] / mib['none'][0]:.3f}")
        shares.append(f"step time selective {ms['selective'] / ms['none']:.3f}")
        if "full" in ms:
            shares.append(f"full {ms['full'] / ms['none']:.3f}")
        bubbles = ", ".join(f"{mode} {100 * report[mode]['bubble_mean']:.1f}%" for mode in modes)
        print(f"{'':12s} shares of none on rank 0: {', '.join(shares)}; mean bubble {bubbles}")


missing = [f"{schedule}-{mode}" for schedule, modes in SCHEDULES.items() for mode in modes
           if not os.path.isdir(os.path.join(sys.argv[1], f"{schedule}-{mode}"))]
if missing:
    print(f"bench_recompute.py: {sys.argv[1]} does not hold bench_recompute.sh's runs: no {', '.join(missing)}; "
          "make them with scripts/bench_recompute.sh", file=sys.stderr)
    sys.exit(2)
main()
