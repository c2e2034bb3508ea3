#!/usr/bin/env bash
# One short lease of a GPU machine, planned to its minutes: what scripts/gpu_check.sh
# does, without the compile. The CUDA build is made beforehand on a CPU machine with the
# same nvcc (13.0 on both here), slimmed to what runs (no object files), and carried with
# Open MPI's packages. There the correctness parts run side by side (the gpu tests and
# the sanitizers share the GPU; neither is timed), then the benchmarks alone. Every part
# has its own time limit, so one that hangs cannot eat the lease; what a part printed
# before its limit stays in OUT_DIR, one file per part, headed by device, date, commit.
#
#   here:   scripts/gpu_session.sh --prepare
#           (builds build-gpu for sm_90a with MPI, packs what runs into
#           build-gpu-pack, runs scripts/gpu_carry.sh; carry build-gpu-pack and
#           third_party_local/debs)
#   there:  scripts/gpu_session.sh [PART=SECONDS ...] [-o OUT_DIR]
#           PART: test, sanitize, bench, step, profile (default: these five, with the
#           limits below), stepkernels (scripts/step_kernels.sh, only when named)
#
# Environment: GPT_COMMIT (the commit, when the tree has no .git), and gpu_check.sh's
# (GPU_TEST_REGEX, SANITIZE_RUNS: a subset of the tests or of the sanitizer runs).
set -uo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$GPT_ROOT" || exit 1

if [[ "${1:-}" == --prepare ]]; then
  set -e
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPT_CUDA=ON -DGPT_MPI=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a > /dev/null
  cmake --build build-gpu -j "$GPT_JOBS"
  # What runs there: the stages' trainers, the gpu tests' and benchmarks' programs and
  # the tools they call (stripped of their symbols), CTest's files and the cache (its
  # paths). Not the CPU tests: every program carries the kernels' machine code (about 10 MB
  # each), and the working tree that travels is limited to 64 MiB. xz: about 35 MB.
  rm -rf build-gpu-pack build-gpu-slim && mkdir build-gpu-pack build-gpu-slim
  (cd build-gpu && find . -name CTestTestfile.cmake
   find ./bin -type f \( -name 'gpu_*' -o -name 'bench_*' -o -name comm_test -o -name prepare \
     -o -name eval_choices -o -name cuda_host \)
   echo ./CMakeCache.txt) | sort -u > build-gpu-pack/files.txt
  find build-gpu/stages -path '*/train' -type f | sed 's|^build-gpu|.|' >> build-gpu-pack/files.txt
  tar -C build-gpu -cf - -T build-gpu-pack/files.txt | tar -C build-gpu-slim -xf -
  find build-gpu-slim -type f -perm -u+x -exec sh -c 'file "$1" | grep -q ELF && strip "$1"' _ {} \;
  tar -C build-gpu-slim -cf - . | xz -T "$GPT_JOBS" -6 > build-gpu-pack/build-gpu.tar.xz
  rm -rf build-gpu-slim build-gpu-pack/files.txt
  scripts/gpu_carry.sh
  log "carry build-gpu-pack ($(du -sh build-gpu-pack | cut -f1))" \
    "and third_party_local/debs ($(du -sh third_party_local/debs | cut -f1))"
  exit 0
fi

# The limits, in seconds, of each part (tests and sanitizers run at once).
# Measured on an H200 (docs/benchmarks/README.md): the 41 gpu tests took 124 s with 8 at
# once beside four sanitizer runs (2026-11-28), before the fp32 stage tests gained four more
# CPU reference runs each (those 21 alone then took 109 s); a sanitizer run of the GEMM
# ladder needs more than 165 s beside the others; the kernel benchmarks about 100 s; the
# whole step about 140 s, PyTorch's compile included; the profile about 60 s.
# The tests run beside the sanitizers, which slow them: their limit is the sanitizers'.
# The defaults add up to 560 s (tests and sanitizers side by side), so that one call of
# the device tool (at most 600 s) runs every part, with time left for the unpacking.
declare -A limit=([test]=250 [sanitize]=250 [bench]=110 [step]=140 [profile]=60 [stepkernels]=90)
chosen=()
out="${OUT:-gpu-check-out}"
while (($#)); do
  case "$1" in
    -o) (($# >= 2)) || bad_input "-o needs a directory"; out="$2"; shift 2 ;;
    test=* | sanitize=* | bench=* | step=* | profile=* | stepkernels=*)
      [[ "${1#*=}" =~ ^[1-9][0-9]*$ ]] || die "'$1': the limit must be a whole number of seconds"
      limit[${1%%=*}]="${1#*=}"; chosen+=("${1%%=*}"); shift ;;
    test | sanitize | bench | step | profile | stepkernels) chosen+=("$1"); shift ;;
    *) die "unknown argument '$1' (PART or PART=SECONDS, PART one of test, sanitize, bench, step," \
         "profile, stepkernels; or --prepare)" ;;
  esac
done
((${#chosen[@]})) || chosen=(test sanitize bench step profile)
wants() { [[ " ${chosen[*]} " == *" $1 "* ]]; }

if [[ ! -d build-gpu && -f build-gpu-pack/build-gpu.tar.xz ]]; then
  { mkdir build-gpu && tar -C build-gpu -xJf build-gpu-pack/build-gpu.tar.xz; } || die "could not unpack build-gpu-pack"
fi
[[ -x build-gpu/bin/gpu_ops ]] ||
  die "no build in build-gpu (run scripts/gpu_session.sh --prepare here, and carry build-gpu-pack)"
# The tests' comparison scripts run /usr/bin/python3; an image may have python3 elsewhere.
[[ -x /usr/bin/python3 ]] || ln -s "$(command -v python3)" /usr/bin/python3
export GPT_BUILD_DIR=build-gpu GPU_TEST_JOBS="${GPU_TEST_JOBS:-8}"
check=(scripts/gpu_check.sh -o "$out")

# First, alone: unpacks Open MPI, links the build's paths, finds the libraries, and
# records the machine.
"${check[@]}" env
pids=()
wants test && { timeout "${limit[test]}" "${check[@]}" test & pids+=($!); }
# The sanitizer runs go side by side, each under the part's limit.
if wants sanitize; then
  SANITIZE_TIMEOUT=$((limit[sanitize] - 5)) timeout "${limit[sanitize]}" "${check[@]}" sanitize &
  pids+=($!)
fi
for pid in "${pids[@]}"; do wait "$pid" || true; done
# The run folders of the stage tests that failed: their logs and metrics, to study offline
# (not the token shards and checkpoints, tens of MB: more than the lease can bring back).
failed_dirs=()
while IFS=: read -r _ name; do
  [[ "$name" == gpu_stage* && -d "build-gpu/tests/gpu/${name#gpu_}" ]] && failed_dirs+=("${name#gpu_}")
done < <(cat build-gpu/Testing/Temporary/LastTestsFailed*.log 2> /dev/null)
if ((${#failed_dirs[@]})); then
  tar -C build-gpu/tests/gpu --exclude='*.bin' -cJf "$out/failed-stage-runs.tar.xz" "${failed_dirs[@]}" &&
    log "the failed stage tests' runs: $out/failed-stage-runs.tar.xz (${failed_dirs[*]})"
fi
wants bench && { timeout "${limit[bench]}" "${check[@]}" bench || warn "bench: failed or cut off"; }
wants step && { BENCH_STEPS="${BENCH_STEPS:-14}" BENCH_WARMUP="${BENCH_WARMUP:-4}" \
  timeout "${limit[step]}" "${check[@]}" step || warn "step: failed or cut off"; }
wants profile && { timeout "${limit[profile]}" "${check[@]}" profile || warn "profile: failed or cut off"; }
wants stepkernels && { timeout "${limit[stepkernels]}" "${check[@]}" stepkernels ||
  warn "stepkernels: failed or cut off"; }
log "session done; output in $out"
