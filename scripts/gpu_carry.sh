#!/usr/bin/env bash
# Prepares what a lent GPU machine lacks, to travel with the working tree (the device
# tool's `carry`): the header-only libraries the build needs (nlohmann/json, Catch2 v2),
# copied from this machine's Debian packages into third_party_local/include (ignored
# by git). The GPU build runs without MPI (world size 1), so no MPI travels.
#
#   scripts/gpu_carry.sh        then carry ["third_party_local"] with scripts/gpu_check.sh
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$GPT_ROOT"
dest=third_party_local/include
mkdir -p "$dest"
for header in nlohmann/json.hpp catch2/catch.hpp; do
  [[ -f "/usr/include/$header" ]] || die "/usr/include/$header missing: run scripts/setup.sh first"
  mkdir -p "$dest/$(dirname "$header")"
  cp -r "/usr/include/$(dirname "$header")/." "$dest/$(dirname "$header")/"
done
log "headers in $dest ($(du -sh third_party_local | cut -f1)); carry third_party_local"
