#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a trained model and a sample.
#
#   scripts/train.sh [--config FILE] [--set key=value ...]
#
# Installs what is missing (scripts/setup.sh), builds (CMake preset `default`),
# prepares the default dataset (datasets/prepare_fortunes.sh -> data/fortunes/),
# then trains the most advanced stage that was built with configs/small.json (or
# --config FILE) on the best device: `device=auto` lets the trainer choose CUDA when
# a GPU and the CUDA kernels are both present, else the CPU. Any other arguments are
# passed to the trainer unchanged, e.g. `--set steps=50` or `--set device=cpu`.
# The trainer runs in the repository root: relative paths in --set values (data,
# run_dir) are relative to it. It prints a progress line per step, the validation
# loss and a sample; metrics and checkpoints go to the config's run_dir (run again, a
# fresh run sets the earlier run's checkpoints aside there; --set resume=latest continues
# it instead).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

config="configs/small.json"
args=()
while (($# > 0)); do
  case "$1" in
    --config)
      (($# >= 2)) || bad_input "--config needs a file"
      config="$2"
      shift 2
      ;;
    --config=*)
      config="${1#--config=}"
      shift
      ;;
    -h | --help)
      sed -n '2,14s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
      exit 0
      ;;
    *)
      args+=("$1")
      shift
      ;;
  esac
done

# A config path is taken relative to the caller's directory, else to the repository
# root (where the trainer runs, so that the configs' data paths resolve).
if [[ -f "$config" ]]; then
  config="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
  config="${config#"$GPT_ROOT"/}"
elif [[ -d "$config" || -d "$GPT_ROOT/$config" ]]; then
  bad_input "config file '$config' is a directory"
elif [[ ! -f "$GPT_ROOT/$config" ]]; then
  bad_input "config file '$config' not found"
fi
cd "$GPT_ROOT"

ensure_deps --training  # the test-only packages (PyTorch) are scripts/test.sh's business
stage="$(latest_stage)"
build_preset default "$GPT_BUILD_DIR" "train_$stage" prepare
prepare_default_data

train="$(abs_dir "$GPT_BUILD_DIR")/stages/$stage/train"

# Say what the machine offers; the trainer makes the final choice (device=auto)
# unless the caller named a device.
device_set=0
for a in "${args[@]}"; do
  [[ "$a" == device=* ]] && device_set=1
done
if command -v nvidia-smi >/dev/null && gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)" && [[ -n "$gpu" ]]; then
  log "GPU found: $gpu (used when this build has CUDA kernels for every op)"
else
  log "no CUDA GPU found: training on the CPU ($(nproc) cores)"
fi
if ((device_set)); then
  log "device chosen on the command line"
else
  args=(--set device=auto "${args[@]}")
fi

log "training stage $stage with $config"
{
  printf '+'
  printf ' %q' "${train#"$GPT_ROOT"/}" --config "$config" "${args[@]}"
  printf '\n'
} >&2
exec "$train" --config "$config" "${args[@]}"
