"""What the trace tools' tests share: one span of a hand-written trace, in the form a stage
writes it (common/trace.h), its times given in milliseconds."""


def span(name, start_ms, dur_ms, tid=0, cat="op"):
    """A complete event ("ph": "X") of rank 0, on lane `tid`, times in microseconds."""
    return {"name": name, "cat": cat, "ph": "X", "ts": start_ms * 1000, "dur": dur_ms * 1000, "pid": 0, "tid": tid}
