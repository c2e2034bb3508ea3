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

# Messages go to stderr so that stdout stays the programs' own output.
log() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# Makes a build directory absolute (relative ones are relative to the repo root).
abs_dir() {
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$GPT_ROOT/$1" ;;
  esac
}

# Installs missing Debian packages via scripts/setup.sh (unless GPT_SKIP_SETUP=1).
ensure_deps() {
  if [[ "${GPT_SKIP_SETUP:-0}" == 1 ]]; then
    log "GPT_SKIP_SETUP=1: not checking packages"
    return 0
  fi
  "$GPT_ROOT/scripts/setup.sh"
}

# build_preset PRESET DIR: configures DIR from the CMake preset PRESET (its cache
# variables; DIR replaces the preset's binaryDir) and builds every target.
build_preset() {
  local preset="$1" dir
  dir="$(abs_dir "$2")"
  command -v cmake >/dev/null || die "cmake not found: run scripts/setup.sh"
  log "configuring preset '$preset' in $dir"
  (cd "$GPT_ROOT" && cmake --preset "$preset" -B "$dir" --log-level=NOTICE) >&2 ||
    die "CMake configuration failed (preset '$preset', $dir)"
  log "building in $dir with $GPT_JOBS jobs"
  cmake --build "$dir" -j "$GPT_JOBS" >&2 || die "build failed in $dir"
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

# Prints the directory name (e.g. 05_zero3) of the highest-numbered stage whose
# binary was built, or fails.
latest_stage() {
  local dir name best="" build
  build="$(abs_dir "$GPT_BUILD_DIR")"
  for dir in "$GPT_ROOT"/stages/[0-9][0-9]_*/; do
    [[ -d "$dir" ]] || continue
    name="$(basename "$dir")"
    [[ -x "$build/stages/$name/train" ]] && best="$name"
  done
  [[ -n "$best" ]] || die "no stage binary found under $build/stages/: did the build succeed?"
  printf '%s\n' "$best"
}
