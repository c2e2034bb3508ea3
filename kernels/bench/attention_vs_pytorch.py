#!/usr/bin/env python3
"""Our attention ladder against PyTorch's, row by row, and the speed targets set for it.

  attention_vs_pytorch.py OURS.jsonl PYTORCH.jsonl

OURS.jsonl is what `bench_attention --json FILE` writes (kernels/bench/bench_attention.cu),
PYTORCH.jsonl what `bench_sdpa.py --json FILE` writes (kernels/bench/bench_sdpa.py): one
JSON object per line, one line per timed row, with the same field names. Both programs
time the same shapes (head size hs, sequence length T, B = tokens / T) with the same
method (L2 flushed, CUDA events, median) and count FLOPs by the same convention
(forward 4 B T^2 NH hs / 2 causal, backward 2.5x, fwd+bwd 3.5x), so their TFLOP/s
compare directly. The rows are joined on (hs, T, pass) (and dtype: PyTorch's rows are
bf16, so our fp32 rows find no partner), and for every version and pass it prints

  ours       our TFLOP/s
  flash      PyTorch's flash backend (SDPBackend.FLASH_ATTENTION)
  cudnn      PyTorch's cuDNN backend, "n/a" where that PyTorch did not offer it
  % flash    ours / flash

then the attention targets (listed in docs/benchmarks/README.md), each for our best
version at that shape (the fastest row whose correctness check did not fail):

  forward + backward, causal, hs = 64, T = 1024 and 2048:  >= 70% of PyTorch flash
  forward alone,      causal, hs = 64, T = 1024 and 2048:  >= 80% of PyTorch flash

each marked PASS or MISS (NO DATA where a needed row is missing). A report, not a
test: it exits 0 whatever the verdicts, and 2 when a file is missing, unreadable, not
JSON lines, or has no rows of the kind expected. Uses only the standard library.
"""
import argparse
import json
import sys

PASS_ORDER = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}
FAILED_CHECKS = ("WRONG", "NaN")  # rows with these verdicts cannot be our "best"
# (pass, hs, T, minimum fraction of PyTorch flash's TFLOP/s): the attention targets.
TARGETS = [
    ("fwd+bwd", 64, 1024, 0.70),
    ("fwd+bwd", 64, 2048, 0.70),
    ("fwd", 64, 1024, 0.80),
    ("fwd", 64, 2048, 0.80),
]


class InputError(Exception):
    pass


def read_rows(path, role):
    """The JSON objects of a JSON-lines file; InputError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise InputError(f"{role} file '{path}': cannot read: {e.strerror}")
    except UnicodeDecodeError:
        raise InputError(f"{role} file '{path}': not text (not UTF-8)")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{role} file '{path}', line {number}: not JSON: {e.msg}")
        if not isinstance(row, dict):
            raise InputError(f"{role} file '{path}', line {number}: not a JSON object")
        missing = [k for k in ("pass", "hs", "T", "tflops") if k not in row]
        if missing:
            raise InputError(f"{role} file '{path}', line {number}: no field {', '.join(missing)}")
        rows.append(row)
    if not rows:
        raise InputError(f"{role} file '{path}': empty (no JSON lines)")
    return rows


def key(row):
    return (row.get("dtype", "bf16"), row["hs"], row["T"], row["pass"])


def version_number(row):
    """'v4' -> 4, for ordering; unknown names last."""
    name = str(row.get("impl", ""))
    return int(name[1:]) if name[:1] == "v" and name[1:].isdigit() else 1 << 30


def tflops_text(row):
    if row is None:
        return "-"
    if row.get("tflops") is None:
        return "n/a"  # present, but refused (unavailable) or not timed
    return f"{row['tflops']:.1f}"


def percent_of(ours, theirs):
    if ours is None or theirs is None or ours.get("tflops") is None or not theirs.get("tflops"):
        return None
    return 100.0 * ours["tflops"] / theirs["tflops"]


def print_table(headers, rows, left_columns):
    """Columns as wide as their widest cell; the columns numbered in left_columns (text)
    left-aligned, the others (numbers) right-aligned."""
    widths = [max([len(h)] + [len(r[c]) for r in rows]) for c, h in enumerate(headers)]

    def line(cells):
        return "  ".join(cell.ljust(widths[c]) if c in left_columns else cell.rjust(widths[c])
                         for c, cell in enumerate(cells)).rstrip()

    print(line(headers))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for r in rows:
        print(line(r))


def main(argv):
    p = argparse.ArgumentParser(prog="attention_vs_pytorch.py",
                                description="Join bench_attention's and bench_sdpa.py's JSON lines.")
    p.add_argument("ours", metavar="OURS.jsonl", help="bench_attention --json output")
    p.add_argument("pytorch", metavar="PYTORCH.jsonl", help="bench_sdpa.py --json output")
    opt = p.parse_args(argv)

    try:
        ours = [r for r in read_rows(opt.ours, "OURS") if r.get("bench", "attention") == "attention"]
        theirs = [r for r in read_rows(opt.pytorch, "PYTORCH") if "backend" in r]
        if not ours:
            raise InputError(f"OURS file '{opt.ours}' has no bench_attention rows"
                             " (were the two files given in the other order?)")
        if not theirs:
            raise InputError(f"PYTORCH file '{opt.pytorch}' has no bench_sdpa.py rows (no \"backend\" field)")
    except InputError as e:
        print(f"attention_vs_pytorch: {e}", file=sys.stderr)
        return 2

    # PyTorch's rows by join key, then by backend.
    pytorch = {}
    for r in theirs:
        pytorch.setdefault(key(r), {})[r["backend"]] = r

    # Rows that join but were not timed on the same shape or device do not compare.
    warnings = set()
    for r in ours:
        for other in pytorch.get(key(r), {}).values():
            for field in ("B", "NH", "causal", "device"):
                if field in r and field in other and r[field] != other[field]:
                    warnings.add(f"hs={r['hs']} T={r['T']}: {field} differs: ours {r[field]}, "
                                 f"PyTorch {other[field]} (the rows do not compare)")

    print(f"attention_vs_pytorch: {opt.ours} against {opt.pytorch}")
    devices = sorted({str(r.get("device")) for r in ours + theirs if r.get("device")})
    torches = sorted({str(r["torch"]) for r in theirs if r.get("torch")})
    if devices:
        print(f"device      {', '.join(devices)}")
    if torches:
        print(f"torch       {', '.join(torches)}")
    print("TFLOP/s     by bench_attention's convention (fwd 4*B*T^2*NH*hs/2 causal, bwd 2.5x, fwd+bwd 3.5x)\n")

    table = []
    ordered = sorted(ours, key=lambda r: (version_number(r), str(r.get("impl")), PASS_ORDER.get(r["pass"], 9),
                                          r.get("dtype", "bf16"), r["hs"], r["T"]))
    previous_version = None
    for r in ordered:
        if previous_version is not None and r.get("impl") != previous_version:
            table.append([""] * 11)
        previous_version = r.get("impl")
        partners = pytorch.get(key(r), {})
        flash, cudnn = partners.get("flash"), partners.get("cudnn")
        pct = percent_of(r, flash)
        table.append([str(r.get("impl", "?")), r["pass"], str(r.get("kernels", "")), r.get("dtype", "bf16"),
                      str(r["hs"]), str(r["T"]), tflops_text(r), tflops_text(flash), tflops_text(cudnn),
                      "-" if pct is None else f"{pct:.0f}%", str(r.get("check", ""))])
    print_table(["version", "pass", "kernels", "dtype", "hs", "T", "ours", "flash", "cudnn", "% flash", "check"],
                table, left_columns={0, 1, 2, 3, 10})

    print("\ntargets (our best version at each shape: the fastest row whose check did not fail)")
    target_rows = []
    for pass_name, hs, T, fraction in TARGETS:
        candidates = [r for r in ours if key(r) == ("bf16", hs, T, pass_name)
                      and r.get("tflops") is not None and r.get("check") not in FAILED_CHECKS]
        best = max(candidates, key=lambda r: r["tflops"], default=None)
        flash = pytorch.get(("bf16", hs, T, pass_name), {}).get("flash")
        pct = percent_of(best, flash)
        if best is None:
            verdict = "NO DATA (no timed, correct row of ours)"
        elif pct is None:
            verdict = "NO DATA (no PyTorch flash row)"
        else:
            verdict = "PASS" if pct >= 100.0 * fraction else "MISS"
        target_rows.append([pass_name, str(hs), str(T), f">= {100 * fraction:.0f}%",
                            str(best.get("impl")) if best else "-", tflops_text(best), tflops_text(flash),
                            "-" if pct is None else f"{pct:.0f}%", verdict])
    print_table(["pass", "hs", "T", "target", "best", "ours", "flash", "% flash", "verdict"], target_rows,
                left_columns={0, 4, 8})

    if warnings:
        print()
        for w in sorted(warnings):
            print(f"warning: {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
