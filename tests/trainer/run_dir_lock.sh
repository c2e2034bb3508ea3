#!/usr/bin/env bash
# One job per run directory: while a job trains in a run directory, a second job
# started on it (stage 01, and stage 02 at 2 ranks when given) stops at once with exit
# status 2 and a message naming the directory and the running job's pid, and touches
# nothing there: the checkpoint already in the directory keeps its bytes, no checkpoint
# is added or pruned, the metrics file is not truncated. Once the first job has ended
# (killed: the kernel drops its lock), the directory is free again.
# The metrics file has a lock of its own: a job in another run directory that names the
# running job's metrics.jsonl as its metrics_file stops with exit 2 too, and writes no line
# into it (its step 1 would land among the running job's steps); once the running job has
# ended it may. A device is no log to guard: two jobs both writing metrics to /dev/null
# (the running job's twin holds it meanwhile) both train.
# Usage: run_dir_lock.sh TRAIN01 PREPARE WORKDIR ROOT [TRAIN02 MPIEXEC]
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4 TRAIN02=${5:-} MPIEXEC=${6:-}
source "$(dirname "$0")/common.sh"
start_mpi_test "$WORK" "$PREPARE"
D="$WORK/data" RUN="$WORK/run"
quiet=(--set val_every=0 --set val_batches=0 --set sample_tokens=0)

# A finished first job leaves a checkpoint (keep all, so a pruning job would show).
"$TRAIN" $(tiny_args "$D" "$RUN") "${quiet[@]}" --set steps=2 --set keep_checkpoints=0 > "$WORK/first.log"
snapshot() { (cd "$RUN" && find . -path ./metrics.jsonl -prune -o -path ./.lock -prune -o -type f -print0 | sort -z | xargs -0 sha256sum); }
snapshot > "$WORK/before.txt"

# The running job: resumes it and trains for a long time, checkpointing only at the end.
"$TRAIN" $(tiny_args "$D" "$RUN") "${quiet[@]}" --set steps=1000000 --set resume=latest \
  --set keep_checkpoints=1 > "$WORK/running.log" 2>&1 &
running=$!
trap 'kill -9 $running 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  grep -q "pid $running " "$RUN/.lock" 2>/dev/null && break
  sleep 0.1
done
grep -q "pid $running " "$RUN/.lock" || { echo "FAIL: the running job never took the lock"; cat "$WORK/running.log"; exit 1; }
lines_before=$(wc -l < "$RUN/metrics.jsonl")

# expect_refused NAME COMMAND...: exit status 2, a message naming the directory and pid.
expect_refused() {
  local name=$1 status=0
  shift
  "$@" > "$WORK/$name.log" 2>&1 || status=$?
  [ "$status" -eq 2 ] || { echo "FAIL: $name exited $status, expected 2"; cat "$WORK/$name.log"; exit 1; }
  grep -q "run_dir '$RUN' is in use by another job (pid $running " "$WORK/$name.log" ||
    { echo "FAIL: $name's message does not name the directory and pid $running"; cat "$WORK/$name.log"; exit 1; }
  # Every rank learns the refusal from rank 0: said once, and the job ends without an abort.
  [ "$(grep -c "in use" "$WORK/$name.log")" -eq 1 ] && ! grep -q "MPI_ABORT" "$WORK/$name.log" ||
    { echo "FAIL: $name's refusal was not said once, or the job was aborted"; cat "$WORK/$name.log"; exit 1; }
  echo "ok: $name refused: $(grep -m1 'in use' "$WORK/$name.log")"
}
expect_refused second_stage01 "$TRAIN" $(tiny_args "$D" "$RUN") "${quiet[@]}" --set steps=3
if [ -n "$TRAIN02" ]; then
  expect_refused second_stage02 "$MPIEXEC" -np 2 --oversubscribe "$TRAIN02" $(tiny_args "$D" "$RUN") "${quiet[@]}" \
    --set steps=3
fi

step1_lines() { grep -c '"step":1,' "$RUN/metrics.jsonl" || true; }
step1_before=$(step1_lines)
status=0
"$TRAIN" $(tiny_args "$D" "$WORK/other") "${quiet[@]}" --set steps=3 --set "metrics_file=$RUN/metrics.jsonl" \
  > "$WORK/shared_metrics.log" 2>&1 || status=$?
[ "$status" -eq 2 ] &&
  grep -q "metrics_file '$RUN/metrics.jsonl' is being written by another job" "$WORK/shared_metrics.log" ||
  { echo "FAIL: a second job on the running job's metrics file exited $status"; cat "$WORK/shared_metrics.log"
    exit 1; }
[ "$(step1_lines)" = "$step1_before" ] || { echo "FAIL: the refused job wrote into the running job's metrics"; exit 1; }
echo "ok: shared metrics_file refused: $(grep -m1 'being written' "$WORK/shared_metrics.log")"
"$TRAIN" $(tiny_args "$D" "$WORK/null_a") "${quiet[@]}" --set steps=1000000 --set metrics_file=/dev/null \
  > "$WORK/null_a.log" 2>&1 &
null_a=$!
sleep 1
"$TRAIN" $(tiny_args "$D" "$WORK/null_b") "${quiet[@]}" --set steps=2 --set metrics_file=/dev/null \
  > "$WORK/null_b.log" 2>&1 || { echo "FAIL: a second job with metrics_file=/dev/null was refused"; tail -3 "$WORK/null_b.log"
                                  kill -9 $null_a; exit 1; }
kill -0 $null_a || { echo "FAIL: the first /dev/null job died"; tail -3 "$WORK/null_a.log"; exit 1; }
kill -9 $null_a; wait $null_a 2> /dev/null || true
echo "ok: two jobs with metrics_file=/dev/null both train"

kill -0 "$running" || { echo "FAIL: the running job died"; cat "$WORK/running.log"; exit 1; }
snapshot > "$WORK/after.txt"
diff "$WORK/before.txt" "$WORK/after.txt" || { echo "FAIL: the refused jobs changed the checkpoints"; exit 1; }
[ "$(wc -l < "$RUN/metrics.jsonl")" -ge "$lines_before" ] || { echo "FAIL: metrics.jsonl was truncated"; exit 1; }

# Negative control: the same second job, once the running one is gone, is not refused.
kill -9 "$running"
wait "$running" 2>/dev/null || true
"$TRAIN" $(tiny_args "$D" "$RUN") "${quiet[@]}" --set steps=3 --set resume=latest > "$WORK/after_end.log" 2>&1 ||
  { echo "FAIL: after the first job ended the directory is still locked"; cat "$WORK/after_end.log"; exit 1; }
"$TRAIN" $(tiny_args "$D" "$WORK/other") "${quiet[@]}" --set steps=1 --set "metrics_file=$RUN/metrics.jsonl" \
  > "$WORK/shared_after_end.log" 2>&1 ||
  { echo "FAIL: after the first job ended its metrics file is still locked"; cat "$WORK/shared_after_end.log"; exit 1; }
echo "PASS"
