#!/usr/bin/env bash
# The micro-batches a pipeline rank keeps in flight (forwarded, not yet backwarded), as
# the executor counts them and every rank prints after the first step, must equal the
# schedule's bound on every rank: GPipe m, 1F1B min(p - r, m), ZB-H1 min(p, m) (a
# micro-batch leaves at its deferred weight half), interleaved (counting
# (micro-batch, chunk) pairs) min(v m, (v - 1) g0 + p - r), g0 the first group's size
# when the m micro-batches go in max(1, floor(m / p)) groups, largest first. The bound is
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

bound() {  # bound SCHEDULE P R M [V]
  local v=${5:-1}
  case $1 in
    gpipe) echo $((v * $4)) ;;  # every (micro-batch, chunk) pair until the backwards
    1f1b) local b=$(($2 - $3)); echo $((b < $4 ? b : $4)) ;;
    zb-h1) echo $(($2 < $4 ? $2 : $4)) ;;  # min(p, m) on every rank: activations wait for the deferred W
    interleaved)
      local groups=$(($4 / $2)); ((groups >= 1)) || groups=1
      local g0=$((($4 + groups - 1) / groups)) all=$((v * $4))
      local b=$(((v - 1) * g0 + $2 - $3)); echo $((b < all ? b : all)) ;;
  esac
}
# check SCHEDULE LOG P M: 0 when every rank's counted in-flight equals SCHEDULE's bound
check() {
  local schedule=$1 log=$2 p=$3 m=$4 v=${5:-1} r count want bad=0
  for ((r = 0; r < p; ++r)); do
    # One chunk per rank counts micro-batches; several count (micro-batch, chunk) pairs.
    local what="micro-batches"; ((v == 1)) || what="chunk activations"
    count=$(sed -n "s/^rank $r (pipeline rank $r of $p): $what in flight \([0-9]*\) .*/\1/p" "$log")
    want=$(bound "$schedule" "$p" "$r" "$m" "$v")
    [ -n "$count" ] || { echo "  rank $r printed no '$what in flight' line"; return 1; }
    [ "$count" = "$want" ] || { echo "  rank $r: counted $count, $schedule's bound $want"; bad=1; }
  done
  return $bad
}

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
  if check "$SCHEDULE" "$log" "$p" "$m" "$v"; then echo "ok   p=$p m=$m v=$v: every rank holds its $SCHEDULE bound"
  else echo "FAIL p=$p m=$m v=$v"; failures=$((failures + 1)); fi
  differs=0  # the control can only be told apart where its bound differs on some rank
  if [ -n "$CONTROL" ]; then
    for ((r = 0; r < p; ++r)); do
      [ "$(bound "$CONTROL" "$p" "$r" "$m" "$v")" != "$(bound "$SCHEDULE" "$p" "$r" "$m" "$v")" ] && differs=1
    done
  fi
  if ((differs)); then
    if check "$CONTROL" "$log" "$p" "$m" "$v" > /dev/null; then
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
