"""The communication table a stage prints after its first step (common/comm_counter.h's
comm_table), read back for a test:

    KIND communication in step N, rank 0 (counted | formula, README):
      NAME   CALLS | CALLS calls   BYTES | BYTES bytes

counted_rows(text, kind, where) returns {NAME: (calls, bytes)} after checking that every
row's count equals its formula; it exits with a message naming `where` when the table is
missing, a row unreadable, or a count off its formula.
"""
import re
import sys


def counted_rows(text, kind, where):
    table = re.search(kind + r" communication in step \d+, rank 0 \(counted \| formula, README\):\n((?:  .*\n)+)",
                      text)
    if not table:
        sys.exit(f"{where}: no {kind} communication table")
    rows = {}
    for line in table.group(1).splitlines():
        found = re.match(r"\s+(\w+)\s+(\d+) \|\s+(\d+) calls\s+(\d+) \|\s+(\d+) bytes$", line)
        if not found:
            sys.exit(f"{where}: unreadable row {line!r}")
        name, calls, calls_f, nbytes, nbytes_f = found.group(1), *map(int, found.groups()[1:])
        if (calls, nbytes) != (calls_f, nbytes_f):
            sys.exit(f"{where}: {name} counted {calls} calls {nbytes} bytes, formula {calls_f} calls {nbytes_f} bytes")
        rows[name] = (calls, nbytes)
    return rows
