#!/usr/bin/env bash
# The micro-batches a pipeline rank keeps in flight (forwarded, not yet backwarded), as
# the executor counts them and every rank prints after the first step, must equal the
# schedule's bound on every rank (the formulas: schedule_bound.sh). The bound is
# computed here from (p, r, m, v), not read from the trainer's line. Negative control: the
# counts must NOT match another schedule's bound (GPipe's: v m pairs) wherever the two
# bounds differ on some rank (a counter that printed the bound it was given would pass
# both).
# Usage: in_flight.sh TRAIN SCHEDULE PREPARE WORKDIR ROOT MPIEXEC "P:M[:V] ..." [CONTROL]
#   SCHEDULE: gpipe, 1f1b, interleaved or zb-h1, the bound to expect; CONTROL: another
#   schedule's bound that must be rejected on some rank.
# Then the bubble report: each run above prints its measured bubble and the theory as
# numbers; a run of 0 steps, which measures nothing, prints no bubble line (a theory of
# zero costs would be 0/0: nan).
set -euo pipefail
TRAIN=$1 SCHEDULE=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6 SHAPES=$7 CONTROL=${8:-}
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

source "$ROOT/tests/pipeline/schedule_bound.sh"  # schedule_bound, check_in_flight

# run_shape NAME P M V STEPS: SCHEDULE's run of m micro-batches on p ranks of v chunks
# each (one layer per chunk), its output in $WORK/NAME.log; a failed run ends the test.
run_shape() {
  local name=$1 p=$2 m=$3 v=$4 steps=$5 chunks=()
  ((v > 1)) && chunks=(--set virtual_stages="$v")
  [ "$SCHEDULE" = zb-h1 ] && chunks+=(--set schedule=zb-h1)
  "$MPIEXEC" -np "$p" --oversubscribe "$TRAIN" $(tiny_args "$WORK/data" "$WORK/$name") --set steps="$steps" \
    --set n_layer=$((p * v)) --set pp="$p" "${chunks[@]}" --set micro_batch_size=1 --set batch_size="$m" \
    --set sample_tokens=0 --set val_batches=0 > "$WORK/$name.log" 2>&1 ||
    { echo "FAIL: the run $name"; tail -5 "$WORK/$name.log"; exit 1; }
}

failures=0
for shape in $SHAPES; do
  IFS=: read -r p m v <<< "$shape"
  v=${v:-1}
  log="$WORK/run_${p}_${m}_${v}.log"
  run_shape "run_${p}_${m}_${v}" "$p" "$m" "$v" 1
  if check_in_flight "$SCHEDULE" "$log" "$p" "$m" "$v"; then
    echo "ok   p=$p m=$m v=$v: every rank holds its $SCHEDULE bound"
  else echo "FAIL p=$p m=$m v=$v"; failures=$((failures + 1)); fi
  differs=0  # the control can only be told apart where its bound differs on some rank
  if [ -n "$CONTROL" ]; then
    for ((r = 0; r < p; ++r)); do
      [ "$(schedule_bound "$CONTROL" "$p" "$r" "$m" "$v")" != "$(schedule_bound "$SCHEDULE" "$p" "$r" "$m" "$v")" ] &&
        differs=1
    done
  fi
  if ((differs)); then
    if check_in_flight "$CONTROL" "$log" "$p" "$m" "$v" > /dev/null; then
      echo "FAIL negative control p=$p m=$m: the counts also match $CONTROL's bound"; failures=$((failures + 1))
    else echo "ok   negative control p=$p m=$m: $CONTROL's bound rejected"; fi
  fi
done

IFS=: read -r p m v <<< "${SHAPES%% *}"  # the first shape again
v=${v:-1}
number='[0-9]+\.[0-9]%'
if grep -qE "^pipeline bubble .*\| mean $number \| theory $number" "$WORK/run_${p}_${m}_${v}.log"; then
  echo "ok   p=$p m=$m v=$v, 1 step: the bubble and its theory are numbers"
else
  echo "FAIL p=$p m=$m v=$v: no bubble line with numbers"; grep "bubble" "$WORK/run_${p}_${m}_${v}.log"
  failures=$((failures + 1))
fi
run_shape run_0_steps "$p" "$m" "$v" 0
if grep -qiE "^pipeline bubble|\bnan\b" "$WORK/run_0_steps.log"; then
  echo "FAIL 0 steps: $(grep -iE "^pipeline bubble|\bnan\b" "$WORK/run_0_steps.log" | head -2)"
  failures=$((failures + 1))
else echo "ok   p=$p m=$m v=$v, 0 steps: no bubble line, no nan"; fi
[ "$failures" = 0 ] || exit 1
