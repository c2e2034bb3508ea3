#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a trained model and a sample.
#
#   scripts/train.sh [--config FILE] [--set key=value ...]   (also --config=FILE,
#                                                           --set=key=value, key=value)
#
# Installs what is missing (scripts/setup.sh), builds (CMake preset `default`),
# prepares the default dataset (datasets/prepare_fortunes.sh -> data/fortunes/),
# then builds and trains the highest-numbered stage in stages/ with configs/small.json
# (or --config FILE) on the best device: `device=auto` lets the trainer choose CUDA when
# a GPU and the CUDA kernels are both present, else the CPU (unless the config file or
# the command line names a device, which is kept). The other arguments go to
# the trainer, e.g. `--set steps=50` or `--set device=cpu`. Settings of scripts/lib.sh
# apply: GPT_SKIP_SETUP=1 (no package check), GPT_BUILD_DIR, GPT_JOBS.
# The trainer runs in the repository root: relative paths in --set values (data,
# run_dir) are relative to it. It prints a progress line every log_every steps, the validation
# loss and a sample; metrics and checkpoints go to the config's run_dir (run again, a
# fresh run sets the earlier run's checkpoints aside there; --set resume=latest continues
# it instead). Arguments the trainer would refuse for their form (a flag it does not
# know, a key docs/config.md does not list) are refused before anything is installed
# or built, and so is a config file that is not JSON or names such a key (when python3
# is there to read it). GPT_TRAIN_PRESET=cpu builds without the CUDA kernels (default: `default`).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

known_keys="$(config_keys)"  # lib.sh
# check_setting ARG SETTING: SETTING must be key=value with a known key.
check_setting() {
  [[ "$2" == *=* ]] || bad_input "argument '$1': the trainer takes --set key=value (see --help)"
  local key="${2%%=*}"
  [[ "$known_keys" == *" $key "* ]] ||
    bad_input "argument '$1': unknown key '$key' (docs/config.md lists every key)"
  [[ "$key" != device ]] || device_set=1
}

config="configs/small.json"
config_given=""  # the --config seen, if any: a second one is refused, as the trainer does
args=()
device_set=0
take_config() {
  [[ -z "$config_given" ]] || bad_input "--config given twice ('$config_given' and '$1'); use one file and --set for changes"
  [[ -n "$1" ]] || bad_input "--config needs a file name (it was empty)"
  config="$1" config_given="$1"
}
while (($# > 0)); do
  case "$1" in
    --config)
      (($# >= 2)) || bad_input "--config needs a file"
      take_config "$2"
      shift 2
      ;;
    --config=*)
      take_config "${1#--config=}"
      shift
      ;;
    -h | --help)
      print_help
      exit 0
      ;;
    --set)
      (($# >= 2)) || bad_input "--set needs key=value"
      check_setting "--set $2" "$2"
      args+=("$1" "$2")
      shift 2
      ;;
    --set=*)  # the trainer's form is --set key=value
      check_setting "$1" "${1#--set=}"
      args+=(--set "${1#--set=}")
      shift
      ;;
    -*) bad_input "argument '$1': not a flag of train.sh or the trainer (--config FILE, --set key=value)" ;;
    *)
      check_setting "$1" "$1"
      args+=("$1")
      shift
      ;;
  esac
done

# A config path is taken relative to the caller's directory, else to the repository
# root (where the trainer runs, so that the configs' data paths resolve). A stream
# (/dev/stdin, a shell's <(...) as /dev/fd/N, a pipe) goes to the trainer as it is, and
# unread: it may be readable only once, and /dev/stdin may name a regular file.
config_regular=1
if [[ -d "$config" ]]; then
  bad_input "config file '$config' is a directory"
elif [[ "$config" =~ ^/dev/(stdin|fd/) || "$config" =~ ^/proc/[^/]+/fd/ ]] || [[ -e "$config" && ! -f "$config" ]]; then
  [[ -e "$config" ]] || bad_input "config file '$config' not found"
  [[ "$config" == /* ]] || config="$(pwd)/$config"
  config_regular=0
elif [[ -f "$config" ]]; then
  config="$(cd -- "$(dirname -- "$config")" && pwd)/$(basename -- "$config")"
  config="${config#"$GPT_ROOT"/}"
elif [[ -d "$GPT_ROOT/$config" ]]; then
  bad_input "config file '$config' is a directory"
elif [[ ! -f "$GPT_ROOT/$config" ]]; then
  bad_input "config file '$config' not found"
fi
cd "$GPT_ROOT"

# The config file's form, when a Python is at hand to read it (a fresh machine may have
# none; the trainer checks everything again): at most 1 MiB, JSON, one object, keys
# docs/config.md lists. A typo in the file is then named now, not after the packages and
# the build. The check refuses nothing the trainer accepts; values are the trainer's.
if ((config_regular)) && python="$(command -v python3)"; then
  "$python" - "$config" "$known_keys" <<'PY' || exit 2
import json, os, sys
path, known = sys.argv[1], set(sys.argv[2].split())
try:
    if os.path.getsize(path) > 1 << 20:  # the trainer's bound, and its words
        sys.exit(f"error: config file '{path}' is over 1 MiB long: a config is a small JSON object of keys; "
                 "is it the right file?")
    with open(path, encoding="utf-8-sig") as f:  # a byte-order mark is allowed, as the trainer allows it
        text = f.read()
except OSError as e:
    sys.exit(f"error: cannot read config file '{path}': {e.strerror}")
except ValueError as e:  # not UTF-8
    sys.exit(f"error: config file '{path}': not JSON ({e})")
# Nesting, counted before parsing, as the trainer counts it: brackets outside strings.
depth, deepest, in_string, escaped = 0, 0, False, False
for ch in text:
    if in_string:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            in_string = False
    elif ch == '"':
        in_string = True
    elif ch in "[{":
        depth += 1
        deepest = max(deepest, depth)
    elif ch in "]}":
        depth -= 1
if deepest > 64:
    sys.exit(f"error: config file '{path}': nested deeper than 64 levels of arrays and objects")
try:
    settings = json.loads(text)
except ValueError as e:
    sys.exit(f"error: config file '{path}': not JSON ({e})")
if not isinstance(settings, dict):
    sys.exit(f"error: config file '{path}': not a JSON object of key: value settings")
unknown = sorted(k for k in settings if k not in known)
if unknown:
    sys.exit(f"error: config file '{path}': unknown key '{unknown[0]}' (docs/config.md lists every key)")
PY
fi

ensure_deps --training  # the test-only packages (PyTorch) are scripts/test.sh's business
stage="$(latest_stage)"
build_preset "${GPT_TRAIN_PRESET:-default}" "$GPT_BUILD_DIR" "train_$stage" prepare
prepare_default_data

train="$(abs_dir "$GPT_BUILD_DIR")/stages/$stage/train"

# Say what the machine offers; the trainer makes the final choice (device=auto)
# unless the caller or the config file names a device (a --set would override the
# file's, which the file's author chose: configs/bench-124m-cpu.json's cpu, say).
if command -v nvidia-smi >/dev/null && gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)" && [[ -n "$gpu" ]]; then
  log "GPU found: $gpu (used when this build has CUDA kernels for every op)"
else
  log "no CUDA GPU found: training on the CPU ($(nproc) cores)"
fi
if ((device_set)); then
  log "device chosen on the command line"
elif ((!config_regular)); then
  log "the device is $config's, or auto (the stream is left unread for the trainer)"
elif grep -q '"device"[[:space:]]*:' "$config"; then
  log "device chosen by $config"
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
