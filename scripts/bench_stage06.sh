#!/usr/bin/env bash
# Stage 06's memory and communication per rank against the README's formulas, for a set
# of layouts: one step each, the tables stage 06 prints, and the verdict of
# scripts/check_tp_budget.py (parameters, gradients, optimizer state and every
# collective exact, activations too).
#
#   scripts/bench_stage06.sh [--config FILE] [--set key=value ...]
#
# Layouts (ranks: tp x dp): tp 2 with and without sequence parallelism, tp 3, tp 2 x dp 2 at zero 0;
# tp 2 x dp 2 at zero 1, 2 and 3 with sequence parallelism. Uses build/ (GPT_BUILD_DIR)
# and the dataset of the config (scripts/train.sh prepares the default one).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
config=configs/small.json
config_given=0
extra=()
# The trainer's forms: --config FILE (or =FILE), --set key=value, a bare key=value.
while (($# > 0)); do
  case "$1" in
    -h | --help) print_help; exit 0 ;;
    --config | --config=*)
      ((!config_given)) || bad_input "--config is given twice (one config; --set overrides its keys)"
      config_given=1
      if [[ "$1" == --config ]]; then
        (($# >= 2)) || bad_input "--config needs a file"
        config=$2; shift 2
      else
        config=${1#--config=}; shift
      fi
      # A relative FILE is the caller's when it is there (the trainer runs in the root).
      [[ "$config" == /* || ! -f "$config" ]] || config="$(pwd)/$config"
      ;;
    --set)
      (($# >= 2)) || bad_input "--set needs key=value"
      [[ "$2" == *=* ]] || bad_input "--set needs key=value, not '$2'"
      extra+=("$1" "$2"); shift 2 ;;
    [!-]*=*) extra+=("$1"); shift ;;
    *) bad_input "unknown argument '$1' (scripts/bench_stage06.sh [--config FILE] [--set key=value ...]; --help)" ;;
  esac
done
cd "$GPT_ROOT"
train="$(abs_dir "$GPT_BUILD_DIR")/stages/06_tensor_parallel/train"
[[ -x "$train" ]] || die "$train is missing: build first ($(build_hint))"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
logs=()
for layout in "2 tp=2" "2 tp=2 sequence_parallel=true" "3 tp=3" "4 tp=2" \
              "4 tp=2 zero=1 sequence_parallel=true" "4 tp=2 zero=2 sequence_parallel=true" \
              "4 tp=2 zero=3 sequence_parallel=true"; do
  read -r np kvs <<< "$layout"
  sets=()
  for kv in $kvs; do sets+=(--set "$kv"); done
  log="$work/run$((${#logs[@]} + 1)).log"
  mpirun -np "$np" --oversubscribe "$train" --config "$config" --set steps=1 --set val_batches=0 \
    --set sample_tokens=0 --set checkpoint_at_end=false --set run_dir="$work/run$((${#logs[@]} + 1))" \
    "${sets[@]}" "${extra[@]}" > "$log" 2>&1 || { tail -20 "$log"; die "run failed: $layout"; }
  printf '==== %s ranks: %s\n' "$np" "$kvs"
  sed -n '1p;/memory by kind/,/^step /p' "$log" | grep -v '^step '
  logs+=("$log")
done
/usr/bin/python3 scripts/check_tp_budget.py "${logs[@]}"
