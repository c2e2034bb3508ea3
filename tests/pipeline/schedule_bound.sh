# shellcheck shell=bash
# Sourced by in_flight.sh and exact_pair.sh: a pipeline schedule's bound on the
# micro-batches a rank keeps in flight (forwarded, not yet backwarded), computed here from
# (p, r, m, v) and not read from the trainer, and the check of a run's log against it.
#   GPipe m; 1F1B min(p - r, m); ZB-H1 min(p, m) (a micro-batch leaves at its deferred
#   weight half); interleaved, counting (micro-batch, chunk) pairs, min(v m, (v - 1) g0 +
#   p - r), g0 the first group's size when the m micro-batches go in max(1, floor(m / p))
#   groups, largest first (at v = 1 it is 1F1B's).

# schedule_bound SCHEDULE P R M [V]
schedule_bound() {
  local v=${5:-1}
  case $1 in
    gpipe) echo $((v * $4)) ;;  # every (micro-batch, chunk) pair until the backwards
    1f1b) local b=$(($2 - $3)); echo $((b < $4 ? b : $4)) ;;
    zb-h1) echo $(($2 < $4 ? $2 : $4)) ;;  # min(p, m) on every rank: activations wait for the deferred W
    interleaved)
      local groups=$(($4 / $2)); ((groups >= 1)) || groups=1
      local g0=$((($4 + groups - 1) / groups)) all=$((v * $4))
      local b=$(((v - 1) * g0 + $2 - $3)); echo $((b < all ? b : all)) ;;
    *) echo "schedule_bound: unknown schedule '$1'" >&2; return 1 ;;
  esac
}

# check_in_flight SCHEDULE LOG P M [V]: 0 when every rank's line in LOG ("rank R (pipeline
# rank r of P): WHAT in flight N", printed after the first step; several world ranks share
# a pipeline rank under tp, cp or dp) counts SCHEDULE's bound for its pipeline rank, and
# every pipeline rank printed one; else 1, saying where. WHAT is "micro-batches" for one
# chunk per rank and "chunk activations" for several (V > 1): the line says how many
# chunks the run held.
check_in_flight() {
  local schedule=$1 log=$2 p=$3 m=$4 v=${5:-1} r count want bad=0 seen line what="micro-batches"
  ((v == 1)) || what="chunk activations"
  for ((r = 0; r < p; ++r)); do
    want=$(schedule_bound "$schedule" "$p" "$r" "$m" "$v") || return 1
    seen=0
    while IFS= read -r line; do
      count=$(sed -n 's/.* in flight \([0-9]*\) .*/\1/p' <<< "$line")
      seen=1
      [ "$count" = "$want" ] || { echo "  ${line%%:*}: counted '$count', $schedule's bound $want"; bad=1; }
    done < <(grep -E "^rank [0-9]+ \(pipeline rank $r of $p\): $what in flight" "$log")
    ((seen)) || { echo "  pipeline rank $r of $p printed no '$what in flight' line"; bad=1; }
  done
  return $bad
}
