#!/usr/bin/env bash
# A stage computes what the stage before it computes: 10 fp32 steps of the tiny model
# with a global batch of 24 sequences, run by the earlier stage (the reference and two
# baselines: the same batch split into other micro-batches and ranks) and by the later
# stage on several layouts; compare_runs.py checks losses, gradient norms and the final
# weights and AdamW moments within the tolerance it derives from the baselines.
#
# Usage: equivalence.sh REF_BIN CAND_BIN PREPARE WORKDIR ROOT MPIEXEC REF_SPECS CAND_SPECS
#   a SPEC list is space-separated NP:MICRO_BATCH[:key=value...], e.g. "1:12 2:3"; the
#   first REF_SPEC is the reference, the others the baselines.
set -euo pipefail
REF_BIN=$1 CAND_BIN=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6 REF_SPECS=$7 CAND_SPECS=$8
STEPS=${STEPS:-10}  # training steps compared (the environment may ask for more)
source "$ROOT/tests/trainer/common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"

# run BIN SPEC DIR: one training run of the layout SPEC into run directory DIR.
run() {
  local bin=$1 spec=$2 dir=$3 np mb extra=()
  IFS=: read -r np mb rest <<< "$spec"
  if [ -n "${rest:-}" ]; then
    local kv
    IFS=: read -r -a kvs <<< "$rest"
    for kv in "${kvs[@]}"; do extra+=(--set "$kv"); done
  fi
  local args=($(tiny_args "$WORK/data" "$dir") --set steps="$STEPS" --set batch_size=24
              --set micro_batch_size="$mb" --set val_every=0 --set val_batches=0
              --set sample_tokens=0 --set bucket_mb=0.02 "${extra[@]}")
  if [ "$np" = 1 ] && [[ "$bin" == *01_single_gpu* ]]; then
    "$bin" "${args[@]}" > "$dir.log" 2>&1
  else
    "$MPIEXEC" -np "$np" --oversubscribe "$bin" "${args[@]}" > "$dir.log" 2>&1
  fi || { echo "FAIL: run $bin $spec"; tail -20 "$dir.log"; exit 1; }
}

refs=() cands=()
for spec in $REF_SPECS; do d="$WORK/ref_${spec//[:=]/_}"; run "$REF_BIN" "$spec" "$d"; refs+=("$d"); done
for spec in $CAND_SPECS; do d="$WORK/cand_${spec//[:=]/_}"; run "$CAND_BIN" "$spec" "$d"; cands+=("$d"); done
/usr/bin/python3 "$ROOT/tests/stages/compare_runs.py" --step "$STEPS" --reference "${refs[0]}" \
  --baseline "${refs[@]:1}" --candidate "${cands[@]}"
