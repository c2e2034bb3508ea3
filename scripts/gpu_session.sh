#!/usr/bin/env bash
# A short, timed session on a GPU machine without network access (each command under a
# time limit, 10 minutes on ours), planned to its minutes: what scripts/gpu_check.sh
# does, without the compile. The CUDA build is made beforehand on a CPU machine with the
# same nvcc (13.0 on both here), slimmed to what runs (no object files), and carried with
# Open MPI's packages. There the parts run one after the other: the gpu tests, the
# sanitizers, then the benchmarks. Every part has its own time limit, so one that hangs
# cannot eat the session; what a part printed before its limit stays in OUT_DIR, one file
# per part, headed by device, date, commit.
#
#   here:   scripts/gpu_session.sh --prepare
#           (builds build-gpu for sm_90a with MPI, packs what runs into
#           build-gpu-pack, runs scripts/gpu_carry.sh; carry build-gpu-pack and
#           third_party_local/debs)
#   there:  scripts/gpu_session.sh [PART=SECONDS ...] [-o OUT_DIR]
#           PART: test, sanitize, bench, step, profile, stepkernels (default: all six,
#           with the limits below: more than one 10-minute command holds, so name
#           `test sanitize` in one command and `bench step profile stepkernels` in the next)
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

# The limits, in seconds, of each part. Measured on an H200 (docs/benchmarks/README.md,
# 2026-11-29): beside ten sanitizer runs, 8 tests at once finished 24 of 44 in 250 s; the
# other 20 alone, 12 at once, took 106 s (the stage tests' CPU reference runs dominate);
# the sanitizer runs below end within about 150 s (the whole GEMM ladder under racecheck
# or memcheck does not end in 245 s: SANITIZE_RUNS can still ask for it); the kernel
# benchmarks take about 100 s, the whole step about 140 s (PyTorch's compile included),
# the profile about 60 s, stepkernels about 20 s. The tests now run first and alone, then
# the sanitizers. All six parts add up to about 750 s, more than one call of the device
# tool (600 s): run `test sanitize` in one call, then, at once while the machine is warm,
# `bench step profile stepkernels` in a second (about 820 s of device time with the start).
declare -A limit=([test]=240 [sanitize]=150 [bench]=110 [step]=140 [profile]=60 [stepkernels]=40)
chosen=()
out="${OUT:-gpu-check-out}"
while (($#)); do
  case "$1" in
    -o) (($# >= 2)) || bad_input "-o needs a directory"; out="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    test=* | sanitize=* | bench=* | step=* | profile=* | stepkernels=*)
      [[ "${1#*=}" =~ ^[1-9][0-9]{0,4}$ ]] || bad_input "'$1': the limit must be a whole number of seconds, 1 or more"
      limit[${1%%=*}]="${1#*=}"; chosen+=("${1%%=*}"); shift ;;
    test | sanitize | bench | step | profile | stepkernels) chosen+=("$1"); shift ;;
    *) bad_input "unknown argument '$1' (PART or PART=SECONDS, PART one of test, sanitize, bench, step," \
         "profile, stepkernels; or --prepare; --help)" ;;
  esac
done
((${#chosen[@]})) || chosen=(test sanitize bench step profile stepkernels)
wants() { [[ " ${chosen[*]} " == *" $1 "* ]]; }

if [[ ! -d build-gpu && -f build-gpu-pack/build-gpu.tar.xz ]]; then
  { mkdir build-gpu && tar -C build-gpu -xJf build-gpu-pack/build-gpu.tar.xz; } || die "could not unpack build-gpu-pack"
fi
[[ -x build-gpu/bin/gpu_ops ]] ||
  die "no build in build-gpu (run scripts/gpu_session.sh --prepare here, and carry build-gpu-pack)"
# The tests' comparison scripts run /usr/bin/python3; an image may have python3 elsewhere.
[[ -x /usr/bin/python3 ]] || ln -s "$(command -v python3)" /usr/bin/python3
export GPT_BUILD_DIR=build-gpu GPU_TEST_JOBS="${GPU_TEST_JOBS:-12}"
check=(scripts/gpu_check.sh -o "$out")

# First, alone: unpacks Open MPI, links the build's paths, finds the libraries, and
# records the machine.
"${check[@]}" env
wants test && { timeout "${limit[test]}" "${check[@]}" test || warn "test: failed or cut off"; }
# The sanitizer runs go side by side, each under the part's limit.
if wants sanitize; then
  SANITIZE_TIMEOUT=$((limit[sanitize] - 5)) timeout "${limit[sanitize]}" "${check[@]}" sanitize ||
    warn "sanitize: failed or cut off"
fi
# The run folders of the stage tests that failed: their logs and metrics, to study offline
# (not the token shards and checkpoints, tens of MB: more than a remote run's output folder should carry back).
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
