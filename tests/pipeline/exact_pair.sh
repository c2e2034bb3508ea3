#!/usr/bin/env bash
# Two pipeline schedules compute the same bits: a schedule changes when each micro-batch's
# forward and backward run, never what they compute or the order in which a stage
# accumulates its gradients (backwards run in micro-batch order in every schedule). So
# the candidate stage (e.g. 08, 1F1B) must give the reference stage's (07, GPipe) losses,
# gradient norms, weights and moments bit for bit after 10 AdamW steps (3 in a quick run,
# below), and after one SGD step, for every shape; and so must a candidate run whose
# ranks are delayed at random before every action (GPT_TEST_PIPE_JITTER_MS: messages
# arrive in another order).
# Each run must also have kept its schedule's micro-batches in flight (require_schedule),
# and a candidate told to recompute must keep fewer activations than the reference: a
# candidate that ignored its own keys would run the reference's code and pass the
# comparison. Control: where the two runs' schedules (or chunks) differ, the reference's
# counts must fail the candidate's bound, or the test says the shape cannot tell them apart.
# Negative controls: one weight 10 ulps off must be rejected; and where interleaving
# reshards the tensors (below), a gradient norm 1e-9 off.
# With GPT_TEST_QUICK=1 (the sanitizer pass of scripts/test.sh, which looks for memory
# errors and undefined behaviour) the SGD step is left out and the runs take 3 steps, not
# 10 (compared_steps, tests/trainer/common.sh): every shape still trains under the
# sanitizers, with random delays too, and is compared bit for bit.
# Usage: exact_pair.sh REF CAND PREPARE WORK ROOT MPIEXEC SPECS [JITTER_SPEC]
#   a SPEC is NP:BATCH:MICRO_BATCH[:key=value...]; a key written cand.key=value is given to
#   the candidate only (virtual_stages=2: the reference has no chunks), so REF and CAND may
#   be one binary run two ways; COMMON="key=value ..." applies to every run.
set -euo pipefail
REF=$1 CAND=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6 SPECS=$7 JITTER_SPEC=${8:-}
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
COMPARE=(/usr/bin/python3 "$ROOT/tests/stages/compare_runs.py" --exact)
source "$ROOT/tests/pipeline/schedule_bound.sh"  # check_in_flight

# require_schedule ROLE SPEC DIR: the run's pipeline ranks kept in flight what its
# schedule allows (the key schedule=, else the stage's own: 07 gpipe, 08 1f1b, 09 and 11
# interleaved, which at one chunk per rank is 1F1B), or the test ends. A candidate that
# ignored cand.schedule or cand.virtual_stages would run the reference's schedule, compute
# the reference's bits and pass the comparison; its counts give it away wherever the two
# schedules' bounds differ.
require_schedule() {
  local schedule p m v
  read -r schedule p m v <<< "$(schedule_of "$1" "$2")"
  check_in_flight "$schedule" "$3.log" "$p" "$m" "$v" ||
    { echo "FAIL: $3 did not keep $schedule's micro-batches in flight (p $p, m $m, v $v)"; exit 1; }
}
# schedule_of ROLE SPEC: "SCHEDULE P M V" of the role's run of SPEC (M: micro-batches a
# step on each pipeline).
schedule_of() {
  local role=$1 spec=$2 bin=$REF np batch mb kv pp=1 tp=1 cp=1 v=1 schedule=""
  [ "$role" = cand ] && bin=$CAND
  IFS=: read -r np batch mb _ <<< "$spec"
  for kv in $(role_keys "$role" "$spec"); do
    case $kv in
      pp=*) pp=${kv#pp=} ;;
      tp=*) tp=${kv#tp=} ;;
      cp=*) cp=${kv#cp=} ;;
      virtual_stages=*) v=${kv#virtual_stages=} ;;
      schedule=*) schedule=${kv#schedule=} ;;
    esac
  done
  if [ -z "$schedule" ]; then
    case $bin in
      *07_pipeline_gpipe*) schedule=gpipe ;;
      *08_pipeline_1f1b*) schedule=1f1b ;;
      *) schedule=interleaved ;;
    esac
  fi
  echo "$schedule $pp $((batch / (mb * (np / (pp * tp * cp))))) $v"
}

# role_keys ref|cand SPEC [key=value...]: the key=value words that role's run of SPEC
# is given, COMMON's first, a cand.key as key to the candidate only.
role_keys() {
  local role=$1 spec=$2 rest keys=() kv
  shift 2
  IFS=: read -r _ _ _ rest <<< "$spec"
  [ -n "${rest:-}" ] && IFS=: read -r -a keys <<< "$rest"
  for kv in ${COMMON:-} "${keys[@]}" "$@"; do
    if [[ "$kv" == cand.* ]]; then [ "$role" = cand ] && echo "${kv#cand.}"
    else echo "$kv"; fi
  done
  return 0
}

# run ref|cand SPEC DIR STEPS [key=value...]
run() {
  local role=$1 spec=$2 dir=$3 steps=$4 bin=$REF np batch mb extra=() kv
  [ "$role" = cand ] && bin=$CAND
  shift 4
  IFS=: read -r np batch mb _ <<< "$spec"
  for kv in $(role_keys "$role" "$spec" "$@"); do extra+=(--set "$kv"); done
  "$MPIEXEC" -np "$np" --oversubscribe "$bin" $(tiny_args "$WORK/data" "$dir") --set steps="$steps" \
    --set batch_size="$batch" --set micro_batch_size="$mb" --set val_every=0 --set val_batches=0 \
    --set sample_tokens=0 "${extra[@]}" > "$dir.log" 2>&1 || { echo "FAIL: run $bin $spec $*"; tail -20 "$dir.log"; exit 1; }
  require_layout "$dir" "$np" "${extra[@]#--set}"
  require_schedule "$role" "$spec" "$dir"
}

# kept RUN_DIR: the MiB of activations rank 0 of the run kept, as its in-flight line says.
kept() { sed -n 's/^rank 0 (.* activations \([0-9.]*\) MiB.*/\1/p' "$1.log"; }

# reshards SPEC: whether the candidate's chunks are sharded over data-parallel ranks
# (virtual stages under ZeRO 1-3 with dp > 1), the one case where a tensor's shard
# boundary can fall elsewhere than in the reference's.
reshards() {
  local spec=$1 np pp=1 tp=1 zero=0 kv
  [[ "$spec" == *cand.virtual_stages=* ]] || return 1
  np=${spec%%:*}
  for kv in $(role_keys cand "$spec"); do
    case $kv in
      pp=*) pp=${kv#pp=} ;;
      tp=*) tp=${kv#tp=} ;;
      zero=*) ((${kv#zero=} > zero)) && zero=${kv#zero=} ;;
    esac
  done
  ((np / (pp * tp) > 1 && zero >= 1))
}

failures=0
i=0
sgd=1  # the one-step SGD comparison, left out of quick runs
STEPS=$(compared_steps)
quick_run && sgd=0
resharded=""  # the first candidate run whose norm is compared as resharded
for spec in $SPECS; do
  i=$((i + 1))
  run ref "$spec" "$WORK/$i-ref" "$STEPS"
  run cand "$spec" "$WORK/$i-cand" "$STEPS"
  if ((sgd)); then
    run ref "$spec" "$WORK/$i-sgd-ref" 1 optimizer=sgd grad_clip=0
    run cand "$spec" "$WORK/$i-sgd-cand" 1 optimizer=sgd grad_clip=0
  fi
  # Under ZeRO, interleaved chunks are sharded over the data-parallel ranks one chunk at a
  # time, so a tensor's shard boundary can fall elsewhere than in the reference: its sum of
  # squares is then grouped otherwise, and the norm is held to that rounding
  # (compare_runs.py --norm-resharded); every weight and moment stays compared bit for
  # bit, and so does the norm of every other shape.
  # The schedule check's control: the reference's counts against the candidate's schedule.
  read -r cand_schedule p m v <<< "$(schedule_of cand "$spec")"
  read -r ref_schedule _ _ ref_v <<< "$(schedule_of ref "$spec")"
  if [ "$cand_schedule $v" != "$ref_schedule $ref_v" ]; then
    if check_in_flight "$cand_schedule" "$WORK/$i-ref.log" "$p" "$m" "$v" > /dev/null; then
      echo "note $spec: at m = $m $cand_schedule (v $v) keeps what $ref_schedule (v $ref_v) keeps: not told apart"
    else
      echo "ok   $spec: the reference's counts fail $cand_schedule's (v $v) bound: the schedules are told apart"
    fi
  fi
  # A candidate told to recompute activations (cand.activation_checkpointing) keeps fewer
  # of them on rank 0 than the reference: one that ignored the key would keep as many,
  # and compute the same bits.
  if [[ "$spec" =~ cand\.activation_checkpointing=(full|selective) ]]; then
    ref_mib=$(kept "$WORK/$i-ref") cand_mib=$(kept "$WORK/$i-cand")
    if awk -v r="$ref_mib" -v c="$cand_mib" 'BEGIN { exit !(r != "" && c != "" && c + 0 < r + 0) }'; then
      echo "ok   $spec: rank 0 keeps $cand_mib MiB of activations, the reference $ref_mib"
    else
      echo "FAIL: $spec: rank 0 keeps '$cand_mib' MiB of activations with recompute, the reference '$ref_mib'"
      failures=$((failures + 1))
    fi
  fi
  norm=()
  if reshards "$spec"; then norm=(--norm-resharded); resharded=${resharded:-$i}; fi
  echo "== $spec: $STEPS AdamW steps$( ((sgd)) && echo ", then one SGD step")"
  "${COMPARE[@]}" "${norm[@]}" --step "$STEPS" --reference "$WORK/$i-ref" --candidate "$WORK/$i-cand" ||
    failures=$((failures + 1))
  if ((sgd)); then
    "${COMPARE[@]}" "${norm[@]}" --step 1 --reference "$WORK/$i-sgd-ref" --candidate "$WORK/$i-sgd-cand" ||
      failures=$((failures + 1))
  fi
done
if [ -n "$JITTER_SPEC" ]; then
  echo "== $JITTER_SPEC with every rank delayed 0-3 ms at random before each action"
  run ref "$JITTER_SPEC" "$WORK/jitter-ref" "$STEPS"
  GPT_TEST_PIPE_JITTER_MS=3 run cand "$JITTER_SPEC" "$WORK/jitter-cand" "$STEPS"
  # Every process's executor says it applies the delays (else this is a repeat run).
  delayed=$(grep -o "process [0-9]*, pipeline rank [0-9]*: test hook GPT_TEST_PIPE_JITTER_MS" \
    "$WORK/jitter-cand.log" | sort -u | wc -l)
  (( delayed >= ${JITTER_SPEC%%:*} )) || {
    echo "FAIL: $delayed of ${JITTER_SPEC%%:*} processes delayed their actions"; failures=$((failures + 1)); }
  norm=()
  if reshards "$JITTER_SPEC"; then norm=(--norm-resharded); fi
  "${COMPARE[@]}" "${norm[@]}" --step "$STEPS" --reference "$WORK/jitter-ref" --candidate "$WORK/jitter-cand" ||
    failures=$((failures + 1))
fi
echo "== negative control: one weight 10 ulps off must be rejected"
planted="$WORK/planted"
rm -rf "$planted" && cp -r "$WORK/1-cand" "$planted"
plant_ulps "$planted" "$STEPS"
# Only the tensors are compared (--weights-only): the rejection must come from the planted
# weight, not from a resharded gradient norm held to exact bits.
"${COMPARE[@]}" --expect-reject --weights-only --step "$STEPS" --reference "$WORK/1-ref" \
  --candidate "$planted" || failures=$((failures + 1))
if [ -n "$resharded" ]; then
  echo "== negative control: a gradient norm 1e-9 off must be rejected by the resharded comparison"
  # 1e-9 relative: far below what a wrong gradient does, far above the bound (P u < 1e-10).
  planted="$WORK/planted_norm"
  rm -rf "$planted" && cp -r "$WORK/$resharded-cand" "$planted"
  plant_norm "$planted" 3
  "${COMPARE[@]}" --norm-resharded --expect-reject --step "$STEPS" --reference "$WORK/$resharded-ref" \
    --candidate "$planted" || failures=$((failures + 1))
fi
[ "$failures" = 0 ] || { echo "FAIL: $failures comparisons"; exit 1; }
echo "every shape bit-identical to the reference schedule"
