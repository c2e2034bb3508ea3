#!/usr/bin/env bash
# Stage 06's printed memory and communication against the README's formulas on the tiny
# model (scripts/check_tp_budget.py: parameters, gradients, optimizer state and every
# collective exact, activations too), for tp 2 with and without sequence
# parallelism, tp 4 at zero 1 with accumulation 4, tp 2 x dp 2 at zero 2 and 3, and in
# bf16 (2-byte weights and activations) tp 2 and tp 2 x dp 2 at zero 3 with sequence
# parallelism; tp 1 with sequence parallelism on (nothing to split: no extra buffers), tp 1
# without it (no collective at all: a group of one has nothing to sum), and
# zero 3 with one block (the final layernorm prefetched beside it), zero 3 without the
# prefetch (one block fewer); and the
# checker's negative controls (one byte, one call off must be rejected). Then the same
# measured numbers against budget_formula.py, a derivation written apart from the
# stage's (the named tensors a rank holds, the walk through f and g), with its controls.
# Usage: budget.sh TRAIN06 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN06=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
logs=()
specs=()  # NP:TP:ZERO:SP:MICRO:BUCKET_MB:PRECISION:N_LAYER:LOG for budget_formula.py
i=0
for layout in "2 tp=2" "2 tp=2 sequence_parallel=true" "4 tp=4 zero=1 micro_batch_size=1" \
              "4 tp=2 zero=2 sequence_parallel=true" "4 tp=2 zero=3 sequence_parallel=true micro_batch_size=1" \
              "2 tp=2 precision=bf16" "4 tp=2 zero=3 sequence_parallel=true micro_batch_size=1 precision=bf16" \
              "2 tp=1 sequence_parallel=true" "2 tp=1" "4 tp=2 zero=3 n_layer=1"; do
  read -r np kvs <<< "$layout"
  i=$((i + 1))
  # shellcheck disable=SC2086  # the layout's keys, one word each
  one_step "run$i" "$np" "$TRAIN06" bucket_mb=0.02 $kvs || exit 1
  logs+=("$WORK/run$i.log")
  tp=1 zero=0 sp=0 precision=fp32 layers=0 micro=$(sed -n 's/.*"micro_batch_size": *\([0-9]*\).*/\1/p' "$ROOT/configs/tiny.json")
  for kv in $kvs; do
    case $kv in
      tp=*) tp=${kv#tp=} ;; zero=*) zero=${kv#zero=} ;; sequence_parallel=true) sp=1 ;;
      micro_batch_size=*) micro=${kv#micro_batch_size=} ;; precision=*) precision=${kv#precision=} ;;
      n_layer=*) layers=${kv#n_layer=} ;;
    esac
  done
  specs+=("$np:$tp:$zero:$sp:$micro:0.02:$precision:$layers:$WORK/run$i.log")
done
# ZeRO-3 without its prefetch holds one block fewer: the stage's formula follows the key
# (budget_formula.py derives the prefetching store only, so this run is checked here alone).
one_step run_np 4 "$TRAIN06" bucket_mb=0.02 tp=2 zero=3 zero3_prefetch=false || exit 1
logs+=("$WORK/run_np.log")
/usr/bin/python3 "$ROOT/scripts/check_tp_budget.py" "${logs[@]}"
/usr/bin/python3 "$ROOT/scripts/check_tp_budget.py" --self-test "${logs[0]}"
/usr/bin/python3 "$ROOT/tests/tp/budget_formula.py" "$ROOT/configs/tiny.json" "${specs[@]}"
