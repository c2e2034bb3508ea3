#!/usr/bin/env bash
# Installs the Debian 12 packages gpt-stages needs, only those that are missing.
#
#   scripts/setup.sh [--training] [--with-docs] [--with-notebooks] [--check]
#
#   --training        only what building and training need (no PyTorch: tests only)
#   --with-docs       also doxygen and graphviz (docs/Doxyfile)
#   --with-notebooks  also Jupyter (nbconvert, nbformat, ipykernel), matplotlib and numpy
#                     (notebooks/, scripts/check_notebooks.sh)
#   --check           only report what is missing; exit 1 if anything is
#
# Runs apt-get (once `apt-get update`, then one `apt-get install`) as root, or via
# sudo when not root. When everything is present it touches nothing and takes well
# under a second. The CUDA toolkit is not installed here: CMake uses
# /usr/local/cuda when it exists and builds CPU-only otherwise.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

packages=(
  build-essential cmake ninja-build          # compilers and build
  openmpi-bin libopenmpi-dev                 # multi-rank stages (mpirun)
  nlohmann-json3-dev                         # config, metrics, checkpoint manifest
  catch2                                     # unit tests (v2, catch2/catch.hpp)
  fortunes fortunes-min                      # default training corpus
)
test_packages=(python3-torch python3-numpy  # PyTorch oracle tests (/usr/bin/python3)
               python3-regex                # the tokenizer's reference (GPT-2's pattern)
               python3-venv)                # scripts/setup_tiktoken.sh (tiktoken from PyPI)
training_only=0
check_only=0
for arg in "$@"; do
  case "$arg" in
    --with-docs) packages+=(doxygen graphviz) ;;
    --with-notebooks) packages+=(jupyter-nbconvert python3-nbformat python3-ipykernel python3-matplotlib python3-numpy) ;;
    --check) check_only=1 ;;
    --training) training_only=1 ;;
    -h | --help)
      print_help
      exit 0
      ;;
    *) bad_input "unknown option '$arg' (see scripts/setup.sh --help)" ;;
  esac
done

((training_only)) || packages+=("${test_packages[@]}")

command -v dpkg-query >/dev/null ||
  die "dpkg-query not found: this script targets Debian 12; install by hand: ${packages[*]}"

missing=()
for pkg in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
  log "packages: all ${#packages[@]} present"
  exit 0
fi
if ((check_only)); then
  printf 'missing: %s\n' "${missing[*]}"
  exit 1
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  die "missing packages (${missing[*]}) and not root, and sudo is not installed: run this script as root, or install them by hand"
fi

log "installing: ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
  die "apt-get update failed"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
  die "apt-get install failed for: ${missing[*]}"
log "packages installed"
