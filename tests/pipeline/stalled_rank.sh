#!/usr/bin/env bash
# A pipeline rank that stops answering mid-schedule (GPT_TEST_PIPE_STALL_RANK) must not
# hang the job: the rank waiting for its message gives up after comm_timeout_s with an
# error naming the silent rank, and every rank ends. Passes when the job exits non-zero
# within 4 x the timeout (start-up included) and the message names the stalled rank.
# Negative control: the same run without the stall must succeed.
# Usage: stalled_rank.sh TRAIN PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
TIMEOUT=3
args=(--set pp=3 --set n_layer=3 --set steps=2 --set sample_tokens=0 --set val_batches=0 --set comm_timeout_s=$TIMEOUT)
"$MPIEXEC" -np 3 --oversubscribe "$TRAIN" $(tiny_args "$WORK/data" "$WORK/ok") "${args[@]}" > "$WORK/ok.log" 2>&1 ||
  { echo "FAIL: the run without a stalled rank failed"; tail -5 "$WORK/ok.log"; exit 1; }
start=$(date +%s)
status=0
GPT_TEST_PIPE_STALL_RANK=1 timeout $((10 * TIMEOUT)) "$MPIEXEC" -np 3 --oversubscribe "$TRAIN" \
  $(tiny_args "$WORK/data" "$WORK/stall") "${args[@]}" > "$WORK/stall.log" 2>&1 || status=$?
elapsed=$(($(date +%s) - start))
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || { echo "FAIL: exit status $status after ${elapsed}s"; tail -5 "$WORK/stall.log"; exit 1; }
[ "$elapsed" -le $((4 * TIMEOUT)) ] || { echo "FAIL: the job took ${elapsed}s to end (timeout ${TIMEOUT}s)"; exit 1; }
grep -q "from rank 1 .*no message within" "$WORK/stall.log" ||
  { echo "FAIL: no error names the silent rank 1"; grep -i error "$WORK/stall.log" | head -3; exit 1; }
echo "ok: ended after ${elapsed}s: $(grep -m1 'no message within' "$WORK/stall.log")"
