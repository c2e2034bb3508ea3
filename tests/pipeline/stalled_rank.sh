#!/usr/bin/env bash
# A pipeline rank that stops answering mid-schedule (GPT_TEST_PIPE_STALL_RANK) must not
# hang the job: the rank waiting for its message gives up after comm_timeout_s with an
# error naming the silent rank, and every rank ends. Passes when the job exits non-zero
# within 5 x the timeout (start-up and the roll call's grace included) and the message
# names the stalled rank:
#   pp = 3, rank 1 stalled: both its neighbours wait for it, and name it as their peer;
#   pp = 4, rank 3 stalled: rank 2 waits for it, but rank 1 waits for rank 2 and rank 0
#   for rank 1. Every error must name rank 3 as the one silent at the roll call, which
#   the other ranks answer (from inside their wait, or from their own roll call).
#   (comm_mpi_p2p_hung_peer checks the answer from inside a wait alone.)
# Negative control: the same run without the stall must succeed.
# Usage: stalled_rank.sh TRAIN PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
TIMEOUT=3
args=(--set steps=2 --set sample_tokens=0 --set val_batches=0 --set comm_timeout_s=$TIMEOUT)
"$MPIEXEC" -np 3 --oversubscribe "$TRAIN" $(tiny_args "$WORK/data" "$WORK/ok") "${args[@]}" --set pp=3 --set n_layer=3 \
  > "$WORK/ok.log" 2>&1 ||
  { echo "FAIL: the run without a stalled rank failed"; tail -5 "$WORK/ok.log"; exit 1; }
# stall PP RANK: the run at pp = PP with pipeline rank RANK stalled, into $WORK/stall_PP.log.
stall() {
  local pp=$1 rank=$2 start elapsed status=0
  start=$(date +%s)
  GPT_TEST_PIPE_STALL_RANK=$rank timeout $((10 * TIMEOUT)) "$MPIEXEC" -np "$pp" --oversubscribe "$TRAIN" \
    $(tiny_args "$WORK/data" "$WORK/stall_$pp") "${args[@]}" --set pp="$pp" --set n_layer="$pp" \
    > "$WORK/stall_$pp.log" 2>&1 || status=$?
  elapsed=$(($(date +%s) - start))
  [ "$status" -ne 0 ] && [ "$status" -ne 124 ] ||
    { echo "FAIL: pp=$pp: exit status $status after ${elapsed}s"; tail -5 "$WORK/stall_$pp.log"; exit 1; }
  [ "$elapsed" -le $((5 * TIMEOUT)) ] ||
    { echo "FAIL: pp=$pp: the job took ${elapsed}s to end (timeout ${TIMEOUT}s)"; exit 1; }
  echo "ok: pp=$pp, rank $rank stalled: ended after ${elapsed}s: $(grep -m1 'no message within' "$WORK/stall_$pp.log")"
}
stall 3 1
grep -q "from rank 1 .*no message within" "$WORK/stall_3.log" ||
  { echo "FAIL: no error names the silent rank 1"; grep -i error "$WORK/stall_3.log" | head -3; exit 1; }
stall 4 3
errors=$(grep "no message within" "$WORK/stall_4.log" || true)
[ -n "$errors" ] || { echo "FAIL: pp=4: no rank reported a timeout"; tail -5 "$WORK/stall_4.log"; exit 1; }
if grep -v "roll call: no message from rank 3 within" <<< "$errors"; then
  echo "FAIL: pp=4: the error(s) above do not name rank 3 as the silent one"
  exit 1
fi
echo "ok: pp=4: each of the $(wc -l <<< "$errors") error(s) names rank 3 at the roll call"
