#!/usr/bin/env bash
# A rank lost mid-run makes the others exit within 60 s with an error naming the lost
# peer, not hang. A trainer (stage 02 at dp = 3 unless told otherwise, below) trains the
# tiny model for far more steps than the test lasts; once it has logged a few, the victim
# (rank 2 by default) is taken away (rank_lost.py):
#   kill  SIGKILL: mpirun notices the death and ends the job, naming the rank; the job
#         must end within 60 s, the bound this test sets for a lost rank;
#   stop  SIGSTOP: a hung rank; the peers' comm_timeout_s (12 s here) runs out, one of
#         them reports "no message from rank 2" (or, waiting in a point-to-point
#         exchange, "recv from rank 2 (tag N): no message within ...", or a neighbour's
#         roll call naming rank 2) and aborts the job; the job must end within
#         comm_timeout_s + its roll call (a quarter of it, 3 s here) + 10 s: one timeout,
#         then the abort (docs/distributed.md, "No operation waits forever"). The slack
#         is under one more timeout, so a rank that waits out a second operation after
#         the first timed out (one per bucket still queued, say) fails the test.
#   stop-collective  the same hang with allreduce=backend: the peers now time out inside
#         MPI's own all-reduce, which cannot say whom it waited for; their roll call
#         must name rank 2.
#
# Another stage or mesh: the optional arguments NP VICTIM KEY=VALUE... (default: 3 2
# batch_size=6 micro_batch_size=2, stage 02's dp = 3; an argument may hold several
# KEY=VALUE separated by spaces; they come last, so they may override the settings
# above, steps and sample_tokens included).
#
# Usage: rank_lost.sh MODE TRAIN PREPARE WORKDIR ROOT MPIEXEC [NP VICTIM KEY=VALUE...]
set -euo pipefail
MODE=$1 TRAIN=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
shift 6
NP=${1:-3} VICTIM=${2:-2}
shift $(($# >= 2 ? 2 : $#))
SHAPE=()
for kv in "${@:-batch_size=6 micro_batch_size=2}"; do
  read -ra words <<< "$kv"
  for word in "${words[@]}"; do SHAPE+=(--set "$word"); done
done
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

COMM_TIMEOUT_S=12
ALLREDUCE=ring
case "$MODE" in
  kill) LIMIT=60 ;;
  stop) LIMIT=$((COMM_TIMEOUT_S + COMM_TIMEOUT_S / 4 + 10)) ;;
  stop-collective) MODE=stop ALLREDUCE=backend LIMIT=$((COMM_TIMEOUT_S + COMM_TIMEOUT_S / 4 + 10)) ;;
  *) echo "rank_lost.sh: MODE is kill, stop or stop-collective, not '$MODE'"; exit 2 ;;
esac
RUN="$WORK/run"
/usr/bin/python3 "$ROOT/tests/zero/rank_lost.py" --mode "$MODE" --np "$NP" --victim "$VICTIM" --limit $LIMIT \
  --metrics "$RUN/metrics.jsonl" --log "$WORK/job.log" -- \
  "$MPIEXEC" -np "$NP" --oversubscribe "$TRAIN" $(tiny_args "$WORK/data" "$RUN") \
  --set steps=10000000 --set val_every=0 \
  --set val_batches=0 --set sample_tokens=0 --set checkpoint_at_end=false --set log_every=1000 \
  --set bucket_mb=0.02 --set comm_timeout_s=$COMM_TIMEOUT_S --set allreduce=$ALLREDUCE "${SHAPE[@]}"
