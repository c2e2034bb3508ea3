"""Reading the communication table a stage prints after its first step (common/comm_counter.h's
comm_table): what the traffic tests (tests/stages/dp_traffic.sh, tests/pipeline/traffic.sh,
tests/cp/ring_traffic.sh) and the notebooks (notebooks/gptruns.py) share.

    KIND communication in step N, rank 0 (counted | formula, README):
      NAME   CALLS | CALLS calls   BYTES | BYTES bytes

KIND may name its group after it in parentheses, "data-parallel (dp x cp)" where the
gradients are reduced over the context-parallel ranks too (stages 10, 11); it is read as
KIND alone.

The table ends at the first line that does not start with two spaces; it is empty where the
step moved nothing (a group of one). The pipeline stages (07-11) add a line per rank, all
operations together, after rank 0's table (pipeline_report.h, print_traffic_by_rank):

    KIND communication in step N by rank, all operations (counted | formula):
      rank R: CALLS | CALLS calls  BYTES | BYTES bytes
"""
import re
import sys

ROW = re.compile(r"\s+(\w+)\s+(\d+) \|\s+(\d+) calls\s+(\d+) \|\s+(\d+) bytes$")
GROUP = r"(?: \([^)]*\))?"  # the group a kind may name after it
RANK_ROW = re.compile(r"  rank (\d+): (\d+) \| (\d+) calls  (\d+) \| (\d+) bytes$")


def _block(text, header, row, what, where):
    """Each indented line after the line HEADER (a regex) in `text`, matched by `row`: the
    match's groups, the first as read, the rest as ints. ValueError naming `where` when the
    header is missing (`what`: the thing missing) or a line does not match."""
    block = re.search(header + r"\n((?:  .*\n)*)", text)
    if not block:
        raise ValueError(f"{where}: no {what}")
    lines = []
    for line in block.group(1).splitlines():
        found = row.match(line)
        if not found:
            raise ValueError(f"{where}: unreadable line {line!r} under the {what}")
        lines.append((found.group(1), *map(int, found.groups()[1:])))
    return lines


def read_comm_table(text, kind, where):
    """{operation: {"calls", "formula_calls", "bytes", "formula_bytes"}} of KIND's table in
    `text`; ValueError naming `where` when there is none or a row cannot be read."""
    header = re.escape(kind) + GROUP + r" communication in step \d+, rank 0 \(counted \| formula, README\):"
    return {name: {"calls": calls, "formula_calls": formula_calls, "bytes": nbytes, "formula_bytes": formula_bytes}
            for name, calls, formula_calls, nbytes, formula_bytes
            in _block(text, header, ROW, f"{kind} communication table", where)}


def counted_rows(text, kind, where):
    """{operation: (calls, bytes)} of KIND's table, after checking that every row's count
    equals its formula; exits with a message naming `where` otherwise (for the tests)."""
    try:
        rows = read_comm_table(text, kind, where)
    except ValueError as e:
        sys.exit(str(e))
    for name, row in rows.items():
        if (row["calls"], row["bytes"]) != (row["formula_calls"], row["formula_bytes"]):
            sys.exit(f"{where}: {name} counted {row['calls']} calls {row['bytes']} bytes, "
                     f"formula {row['formula_calls']} calls {row['formula_bytes']} bytes")
    return {name: (row["calls"], row["bytes"]) for name, row in rows.items()}


def read_by_rank(text, kind, where):
    """{rank: (calls, formula_calls, bytes, formula_bytes)} of KIND's lines by rank in `text`;
    ValueError naming `where` when there are none or a line cannot be read."""
    header = re.escape(kind) + GROUP + r" communication in step \d+ by rank, all operations \(counted \| formula\):"
    return {int(rank): tuple(counts)
            for rank, *counts in _block(text, header, RANK_ROW, f"{kind} communication lines by rank", where)}
