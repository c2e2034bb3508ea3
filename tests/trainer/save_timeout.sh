#!/usr/bin/env bash
# While a checkpoint is saved the ranks wait on rank 0's disk work (its writes, fsyncs
# and read-back), which grows with the model and the disk: those waits are bounded by
# save_timeout_s, not by comm_timeout_s, which is sized for compute. Rank 0 is held
# DELAY seconds before each of its saves (GPT_TEST_SAVE_DELAY_S, as a slow disk would),
# with comm_timeout_s below DELAY:
#   stage 02 (rank 0 writes alone, the others wait in a barrier) and stage 03 (every rank
#   writes its shard, then waits in the agreement while rank 0 checksums) must train a
#   step and save it;
#   negative control: stage 02 with save_timeout_s below DELAY must stop (exit 2), the
#   waiting rank naming the timeout it ran out of.
# The end-of-run sample is the lead's work too, and it may outlast any timeout: rank 0 is
# held SAMPLE_DELAY seconds a token (GPT_TEST_SAMPLE_TOKEN_DELAY_S), its sample lasting
# one and a half times save_timeout_s, and the run must end well, rank 1 waiting on its
# reports (common/lead_work.h). The hung sample, which must still be named, is
# zero_lead_hung_at_end's (tests/zero).
# Usage: save_timeout.sh TRAIN02 TRAIN03 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN02=$1 TRAIN03=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# comm_timeout_s 4 s: healthy ranks on an oversubscribed machine reach a collective well within it.
DELAY=8 COMM_TIMEOUT_S=4

# run NAME BIN key=value...: 2 ranks, one step and its checkpoint; status in $status.
run() {
  local name=$1 bin=$2 sets=() kv
  shift 2
  for kv in "$@"; do sets+=(--set "$kv"); done
  status=0
  GPT_TEST_SAVE_DELAY_S=$DELAY "$MPIEXEC" -np 2 --oversubscribe "$bin" $(tiny_args "$WORK/data" "$WORK/$name") \
    --set steps=1 --set sample_tokens=0 --set val_batches=0 \
    --set comm_timeout_s=$COMM_TIMEOUT_S "${sets[@]}" > "$WORK/$name.log" 2>&1 || status=$?
}
failures=0
for stage in 02 03; do
  bin=$TRAIN02
  [ "$stage" = 03 ] && bin=$TRAIN03
  run "s$stage" "$bin"
  if [ "$status" = 0 ] && [ -f "$WORK/s$stage/step_00000001/manifest.json" ]; then
    echo "ok   stage $stage: rank 0 held ${DELAY} s in its save, comm_timeout_s ${COMM_TIMEOUT_S}: the save completes"
  else
    echo "FAIL stage $stage: status $status"; tail -5 "$WORK/s$stage.log" | sed 's/^/    /'; failures=$((failures + 1))
  fi
done
run neg "$TRAIN02" save_timeout_s=$COMM_TIMEOUT_S
if [ "$status" = 2 ] && grep -q "within $COMM_TIMEOUT_S s" "$WORK/neg.log"; then
  echo "ok   control: save_timeout_s $COMM_TIMEOUT_S: $(grep -m1 "within $COMM_TIMEOUT_S s" "$WORK/neg.log")"
else
  echo "FAIL control: save_timeout_s $COMM_TIMEOUT_S gave status $status"; tail -5 "$WORK/neg.log" | sed 's/^/    /'
  failures=$((failures + 1))
fi
SAMPLE_DELAY=0.6 SAMPLE_TOKENS=10  # 6 s of sampling against save_timeout_s = comm_timeout_s = 4 s
status=0
GPT_TEST_SAMPLE_TOKEN_DELAY_S=$SAMPLE_DELAY "$MPIEXEC" -np 2 --oversubscribe "$TRAIN02" \
  $(tiny_args "$WORK/data" "$WORK/sample") --set steps=1 --set val_batches=0 --set checkpoint_at_end=false \
  --set sample_tokens=$SAMPLE_TOKENS --set comm_timeout_s=$COMM_TIMEOUT_S --set save_timeout_s=$COMM_TIMEOUT_S \
  > "$WORK/sample.log" 2>&1 || status=$?
if [ "$status" = 0 ] && grep -q -- "---- sample" "$WORK/sample.log"; then
  echo "ok   stage 02: rank 0 sampled $SAMPLE_TOKENS tokens of $SAMPLE_DELAY s," \
    "save_timeout_s $COMM_TIMEOUT_S: the run ends"
else
  echo "FAIL stage 02: a sample of $SAMPLE_TOKENS tokens of $SAMPLE_DELAY s gave status $status"
  tail -5 "$WORK/sample.log" | sed 's/^/    /'; failures=$((failures + 1))
fi
[ "$failures" = 0 ]
