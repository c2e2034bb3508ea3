#!/usr/bin/env bash
# Prepares what a GPU machine without network access lacks, to be copied there with the
# working tree: the header-only libraries the build needs (nlohmann/json, Catch2 v2),
# copied from this machine's Debian packages into third_party_local/include (ignored
# by git), and Open MPI with the libraries it loads, as Debian packages (about 7 MiB)
# in third_party_local/debs: scripts/gpu_check.sh unpacks them there and builds with
# MPI, so that the multi-rank stages' gpu tests run (several ranks sharing the GPU).
# Without them the GPU build has no MPI (world size 1) and those tests are not built.
#
#   scripts/gpu_carry.sh        then carry ["third_party_local", "data/fortunes"] with
#                               scripts/gpu_check.sh (the data for its pipeline part)
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
takes_no_arguments "$@"
cd "$GPT_ROOT"
dest=third_party_local/include
mkdir -p "$dest"
for header in nlohmann/json.hpp catch2/catch.hpp; do
  [[ -f "/usr/include/$header" ]] || die "/usr/include/$header missing: run scripts/setup.sh first"
  mkdir -p "$dest/$(dirname "$header")"
  cp -r "/usr/include/$(dirname "$header")/." "$dest/$(dirname "$header")/"
done
# Open MPI: the runtime, the headers and the libraries it loads that a CUDA image may lack
# (not hwloc's plugins: they would bring libxml2 and ICU). Unpacked anywhere, it runs
# with OPAL_PREFIX naming where (gpu_check.sh sets it).
# Downloaded into a fresh directory first: the packages carried before are replaced only
# once the new ones are all there (offline, apt-get fails and they stay).
debs=third_party_local/debs
fresh=third_party_local/debs.new
rm -rf "$fresh" && mkdir -p "$fresh"
(cd "$fresh" && apt-get download openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libhwloc15 \
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 \
  libnl-3-200 libnl-route-3-200 libnuma1 libpsm-infinipath1 libpsm2-2 libmunge2 libltdl7 libpciaccess0 \
  libudev1 > /dev/null 2>&1) ||
  { rm -rf "$fresh"; die "apt-get download of Open MPI's packages failed (run apt-get update first); $debs is as it was"; }
rm -rf "$debs" third_party_local/openmpi && mv "$fresh" "$debs"  # unpacked where it runs, not carried
log "headers in $dest, Open MPI in $debs ($(du -sh third_party_local | cut -f1)); carry third_party_local (and data/fortunes)"
