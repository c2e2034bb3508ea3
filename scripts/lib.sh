# shellcheck shell=bash
# Shared helpers of the scripts in scripts/: sourced, never run.
#
# Environment knobs (all optional):
#   GPT_BUILD_DIR           build tree of the `default` preset (default: build)
#   GPT_SANITIZE_BUILD_DIR  build tree of the `sanitize` preset (default: build-sanitize)
#   GPT_JOBS                parallel compile jobs (default: nproc)
#   GPT_SKIP_SETUP=1        do not check or install Debian packages

GPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GPT_BUILD_DIR="${GPT_BUILD_DIR:-build}"
GPT_SANITIZE_BUILD_DIR="${GPT_SANITIZE_BUILD_DIR:-build-sanitize}"
GPT_JOBS="${GPT_JOBS:-$(nproc 2>/dev/null || echo 2)}"
# Named here, not by CMake's usage text after a configure.
[[ "$GPT_JOBS" =~ ^[1-9][0-9]{0,3}$ ]] || { printf 'error: GPT_JOBS=%s: a number of compile jobs, 1 or more\n' "$GPT_JOBS" >&2
                                             exit 2; }

# Messages go to stderr so that stdout stays the programs' own output.
log() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# bad_input MESSAGE: the caller's input is wrong (a flag, a file it names): exit status 2,
# as the trainers give for bad input.
bad_input() {
  printf 'error: %s\n' "$*" >&2
  exit 2
}

# print_help [SCRIPT]: prints SCRIPT's header comment (from line 2 up to the first line
# that is not a comment) without its '# ': the script's --help. SCRIPT defaults to the
# script that calls print_help.
print_help() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${1:-${BASH_SOURCE[1]}}"; }

# takes_no_arguments "$@": for a script that takes none: --help prints its header,
# anything else is refused (exit 2).
takes_no_arguments() {
  local script="${BASH_SOURCE[1]}"
  case "${1:-}" in
    -h | --help) print_help "$script"; exit 0 ;;
  esac
  (($# == 0)) || bad_input "unknown argument '$1' (${script#"$GPT_ROOT"/} takes none; --help)"
}

# cgroup_cpu_quota: the CPUs' worth of time this process's cgroup allows (a container's
# --cpus, a batch job's allocation), rounded up: cgroup v2's cpu.max ("QUOTA PERIOD"), or
# v1's cpu.cfs_quota_us over cpu.cfs_period_us, in the process's own cgroup (else at the
# hierarchy's root, where a container sees its own). Prints nothing without a quota.
cgroup_cpu_quota() {
  local self path file quota="" period=""
  self="$(cat /proc/self/cgroup 2>/dev/null)" || return 0
  path="$(sed -n 's/^0:://p' <<< "$self" | head -1)"
  for file in "/sys/fs/cgroup$path/cpu.max" /sys/fs/cgroup/cpu.max; do
    if [[ -r "$file" ]]; then
      read -r quota period < "$file" || true
      break
    fi
  done
  if [[ -z "$quota" ]]; then
    path="$(sed -nE 's/^[0-9]+:([^:]*,)?cpu(,[^:]*)?:(.*)/\3/p' <<< "$self" | head -1)"
    for file in "/sys/fs/cgroup/cpu$path" /sys/fs/cgroup/cpu; do
      if [[ -r "$file/cpu.cfs_quota_us" && -r "$file/cpu.cfs_period_us" ]]; then
        quota="$(< "$file/cpu.cfs_quota_us")" period="$(< "$file/cpu.cfs_period_us")"
        break
      fi
    done
  fi
  [[ "$quota" =~ ^[0-9]+$ && "$period" =~ ^[1-9][0-9]*$ ]] || return 0  # "max" or -1: none
  echo $(((quota + period - 1) / period))
}

# machine_cores: the cores this process may use: nproc's count (the CPUs its affinity
# allows, a container's --cpuset-cpus among them; nproc also honours OMP_NUM_THREADS and
# OMP_THREAD_LIMIT: not here), at most its cgroup's CPU quota (cgroup_cpu_quota), at
# least 1.
machine_cores() {
  local cores quota
  cores="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)"
  quota="$(cgroup_cpu_quota)"
  if [[ -n "$quota" ]] && ((quota < cores)); then cores=$quota; fi
  ((cores >= 1)) || cores=1
  echo "$cores"
}

# too_many_ranks NAME RANKS: prints why RANKS ranks are too many for this machine and
# succeeds, or prints nothing and fails when they fit. At most 8 ranks a core, the
# trainer's own bound on threads: past it ranks mostly wait, and a number far past it (a
# typo's 999999) makes mpirun spin for minutes, deaf to SIGTERM, before it starts a rank.
# RANKS must already be a number of at most 6 digits.
too_many_ranks() {
  local cores
  cores="$(machine_cores)"
  (($2 > 8 * cores)) || return 1
  printf '%s=%s ranks on this machine'"'"'s %s core(s): at most 8 a core (%s)\n' "$1" "$2" "$cores" "$((8 * cores))"
}

# require_built_and_fortunes BINARY: a benchmark's binary is built and the default corpus
# prepared, or the run stops with the commands that make them.
require_built_and_fortunes() {
  [[ -x "$1" ]] || die "$1 is missing: build first ($(build_hint))"
  [[ -f "$GPT_ROOT/data/fortunes/train.bin" ]] ||
    die "data/fortunes is missing: datasets/prepare_fortunes.sh data/fortunes $(shown_build_dir)/bin/prepare"
}

# config_keys: the keys every stage's trainer knows, space-separated with a space at each
# end: the first column of docs/config.md's table, which a test keeps equal to the
# trainer's own (tests/config). A script checks the keys it passes on against it before
# a build or an install, which the trainer's own refusal would come after.
config_keys() {
  local keys
  keys="$(sed -n 's/^| `\([a-z0-9_]*\)` |.*/\1/p' "$GPT_ROOT/docs/config.md" | tr '\n' ' ')"
  [[ -n "$keys" ]] || die "docs/config.md has no key table"
  printf ' %s' "$keys"
}

# Makes a build directory absolute (relative ones are relative to the repo root).
abs_dir() {
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$GPT_ROOT/$1" ;;
  esac
}

# shown_build_dir: GPT_BUILD_DIR as messages name it: relative to the repo root when
# inside it (build), else absolute.
shown_build_dir() {
  local dir
  dir="$(abs_dir "$GPT_BUILD_DIR")"
  printf '%s\n' "${dir#"$GPT_ROOT"/}"
}

# build_hint: the commands that build the `default` preset into GPT_BUILD_DIR, for the
# messages of scripts that find their binaries missing (run from the repo root).
build_hint() {
  local dir
  dir="$(shown_build_dir)"
  printf 'cmake --preset default -B %q && cmake --build %q\n' "$dir" "$dir"
}

# Installs missing Debian packages via scripts/setup.sh (unless GPT_SKIP_SETUP=1);
# arguments go to setup.sh (--training: only what building and training need).
ensure_deps() {
  if [[ "${GPT_SKIP_SETUP:-0}" == 1 ]]; then
    log "GPT_SKIP_SETUP=1: not checking packages"
    return 0
  fi
  "$GPT_ROOT/scripts/setup.sh" "$@"
}

# build_preset PRESET DIR [TARGET...]: configures DIR from the CMake preset PRESET (its
# cache variables; DIR replaces the preset's binaryDir) and builds the targets given,
# or every target.
build_preset() {
  local preset="$1" dir targets=()
  dir="$(abs_dir "$2")"
  shift 2
  (($# > 0)) && targets=(--target "$@")
  command -v cmake >/dev/null || die "cmake not found: run scripts/setup.sh"
  # Ninja for a new build directory when it is installed (scripts/setup.sh installs it):
  # one graph of the whole build, which keeps every core busy. A directory configured
  # before keeps its generator.
  local generator=() start=$SECONDS
  [[ ! -f "$dir/CMakeCache.txt" ]] && command -v ninja >/dev/null && generator=(-G Ninja)
  log "configuring preset '$preset' in $dir"
  (cd "$GPT_ROOT" && cmake --preset "$preset" -B "$dir" "${generator[@]}" --log-level=NOTICE) >&2 ||
    die "CMake configuration failed (preset '$preset', $dir)"
  log "building in $dir with $GPT_JOBS jobs"
  cmake --build "$dir" -j "$GPT_JOBS" "${targets[@]}" >&2 || die "build failed in $dir"
  log "built in $((SECONDS - start)) s"
}

# Prepares the default corpus (Debian fortunes) into data/fortunes; the recipe
# itself skips the work when the shards are up to date.
prepare_default_data() {
  local prepare
  prepare="$(abs_dir "$GPT_BUILD_DIR")/bin/prepare"
  [[ -x "$prepare" ]] || die "$prepare is missing: the build did not produce the prepare tool"
  log "dataset: data/fortunes (datasets/prepare_fortunes.sh)"
  (cd "$GPT_ROOT" && datasets/prepare_fortunes.sh data/fortunes "$prepare") >&2 ||
    die "datasets/prepare_fortunes.sh failed"
}

# The GPU step's data and run, shared by bench_gpu_step.sh and step_kernels.sh.
# gpu_step_data BUILD DIR: the project's own text files as the corpus (no download is
# possible on the GPU machine; the token contents do not change the time of a step),
# prepared into DIR/data by BUILD's prepare tool.
gpu_step_data() {
  (cd "$GPT_ROOT" && git ls-files '*.md' '*.cpp' '*.h' '*.cu' '*.py' | xargs cat) > "$2/corpus.txt"
  "$1/bin/prepare" --out "$2/data" --val-fraction 0.05 "$2/corpus.txt" > /dev/null
}
# gpu_step_args DIR RUN_DIR MICRO STEPS GEMM: stage 01's arguments, one per line, for
# GPT-2 124M in bf16 on the GPU at MICRO x 1024 tokens a step (one micro-batch), on
# DIR/data, training only: no validation, checkpoint or sample (and so no tokenizer:
# the config's GPT-2 file need not be there).
gpu_step_args() {
  printf '%s\n' --config configs/gpt2-124m.json --set device=cuda --set precision=bf16 \
    --set "train_data=$1/data/train.bin" --set "val_data=$1/data/val.bin" --set "run_dir=$2" \
    --set "steps=$4" --set "batch_size=$3" --set "micro_batch_size=$3" --set val_every=0 \
    --set val_batches=0 --set checkpoint_every=0 --set checkpoint_at_end=false \
    --set sample_tokens=0 --set tokenizer=bytes --set "gemm=$5"
}

# Prints the directory name (e.g. 05_zero3) of the highest-numbered stage in the
# source tree (a stages/NN_name/ with a train.cpp), or fails.
latest_stage() {
  local dir best=""
  for dir in "$GPT_ROOT"/stages/[0-9][0-9]_*/; do
    [[ -f "$dir/train.cpp" ]] && best="$(basename "$dir")"
  done
  [[ -n "$best" ]] || die "no stage found under $GPT_ROOT/stages/"
  printf '%s\n' "$best"
}
