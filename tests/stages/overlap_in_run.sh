#!/usr/bin/env bash
# Stage 02's gradient buckets are all-reduced while the backward still computes: the
# point of bucketing (stages/02_ddp/grad_sync.cpp). A stage 02 run at dp = 2 writes its
# traces (trace_file); scripts/trace_overlap.py measures, per rank and step, how long the
# communication thread's "allreduce_bucket" spans ran while the main thread ran a backward
# op. Some of it must have, on every rank: a backward that waited for each bucket it
# submitted (the same numbers, no overlap) measures exactly 0, since no op runs while the
# main thread waits. The model is the tiny one widened (4 layers of 128 channels) so that
# a step's backward lasts milliseconds, longer than a scheduler's time slice: with the
# tiny model's backward of well under a millisecond, a machine running six other busy
# processes on two cores showed no overlap on a rank in 4 runs of 12. Like this, each rank
# measured 5 to 67 ms of overlap under that load (5 buckets a step at bucket_mb 0.1, 8 steps).
#
# Usage: overlap_in_run.sh TRAIN02 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN02=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# An earlier job's trace of rank 3 is removed as the job starts (gptruns would read it as
# one of this job's ranks); a file of the user's under such a name is not a trace and stays.
mkdir -p "$WORK/run"
printf '{"traceEvents":[\n]}\n' > "$WORK/run/trace.json.rank3.json"
echo "my notes" > "$WORK/run/trace.json.rank5.json"
"$MPIEXEC" -np 2 --oversubscribe "$TRAIN02" $(tiny_args "$WORK/data" "$WORK/run") --set steps=8 --set n_layer=4 --set n_embd=128 \
  --set sample_tokens=0 --set val_every=0 --set val_batches=0 --set checkpoint_at_end=false --set bucket_mb=0.1 \
  --set "trace_file=$WORK/run/trace.json" > "$WORK/run.log" 2>&1 || { tail -20 "$WORK/run.log"; exit 1; }
[[ ! -e "$WORK/run/trace.json.rank3.json" ]] ||
  { echo "FAIL: the earlier job's trace of rank 3 is still there"; exit 1; }
[[ $(cat "$WORK/run/trace.json.rank5.json") == "my notes" ]] ||
  { echo "FAIL: the user's trace.json.rank5.json changed"; exit 1; }
/usr/bin/python3 - "$ROOT/scripts" "$WORK/run/trace.json.rank0.json" "$WORK/run/trace.json.rank1.json" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import trace_overlap  # noqa: E402

overlap_ms = []
for path in sys.argv[2:]:
    per_step = trace_overlap.analyse(path, "allreduce_bucket", 1, {"backward"}, "wait_buckets", False)
    if not per_step:
        sys.exit(f"FAIL: {path} holds no allreduce_bucket spans")
    # per step: (exposed us, exposed us by the phases, comm us); overlap = comm - exposed
    overlap_ms.append(sum(comm - exposed for exposed, _, comm in per_step.values()) / 1e3)
print(f"bucket all-reduce time that ran beside a backward op, per rank: {overlap_ms} ms")
if not all(ms > 0 for ms in overlap_ms):
    sys.exit("FAIL: on some rank no bucket's all-reduce ran while the backward computed: the buckets are not "
             "overlapped")
print("the gradient buckets are all-reduced while the backward computes")
PY
