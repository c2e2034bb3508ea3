"""Reading the communication table a stage prints after its first step (common/comm_counter.h's
comm_table): what the traffic tests (tests/stages/dp_traffic.sh, tests/pipeline/traffic.sh,
tests/cp/ring_traffic.sh) and the notebooks (notebooks/gptruns.py) share.

    KIND communication in step N, rank 0 (counted | formula, README):
      NAME   CALLS | CALLS calls   BYTES | BYTES bytes

The table ends at the first line that does not start with two spaces; it is empty where the
step moved nothing (a group of one). The pipeline stages (07-11) add a line per rank, all
operations together, after rank 0's table (pipeline_report.h, print_traffic_by_rank):

    KIND communication in step N by rank, all operations (counted | formula):
      rank R: CALLS | CALLS calls  BYTES | BYTES bytes
"""
import re
import sys

ROW = re.compile(r"\s+(\w+)\s+(\d+) \|\s+(\d+) calls\s+(\d+) \|\s+(\d+) bytes$")


def read_comm_table(text, kind, where):
    """{operation: {"calls", "formula_calls", "bytes", "formula_bytes"}} of KIND's table in
    `text`; ValueError naming `where` when there is none or a row cannot be read."""
    table = re.search(re.escape(kind) + r" communication in step \d+, rank 0 \(counted \| formula, README\):\n"
                      r"((?:  .*\n)*)", text)
    if not table:
        raise ValueError(f"{where}: no {kind} communication table")
    rows = {}
    for line in table.group(1).splitlines():
        found = ROW.match(line)
        if not found:
            raise ValueError(f"{where}: unreadable row {line!r}")
        calls, formula_calls, nbytes, formula_bytes = map(int, found.groups()[1:])
        rows[found.group(1)] = {"calls": calls, "formula_calls": formula_calls, "bytes": nbytes,
                                "formula_bytes": formula_bytes}
    return rows


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


RANK_ROW = re.compile(r"  rank (\d+): (\d+) \| (\d+) calls  (\d+) \| (\d+) bytes$")


def read_by_rank(text, kind, where):
    """{rank: (calls, formula_calls, bytes, formula_bytes)} of KIND's lines by rank in `text`;
    ValueError naming `where` when there are none or a line cannot be read."""
    table = re.search(re.escape(kind) + r" communication in step \d+ by rank, all operations \(counted \| formula\):\n"
                      r"((?:  .*\n)*)", text)
    if not table:
        raise ValueError(f"{where}: no {kind} communication lines by rank")
    ranks = {}
    for line in table.group(1).splitlines():
        found = RANK_ROW.match(line)
        if not found:
            raise ValueError(f"{where}: unreadable line by rank {line!r}")
        ranks[int(found.group(1))] = tuple(map(int, found.groups()[1:]))
    return ranks
