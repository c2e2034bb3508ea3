#!/usr/bin/env bash
# Everything that needs a GPU, in one place, for a session on a machine that has one:
# build with CUDA (and with MPI when scripts/gpu_carry.sh brought Open MPI's packages in
# third_party_local/debs, else without: world size 1), run the `gpu` test label, the kernel tests
# under compute-sanitizer memcheck, the kernel benchmarks and the whole-step benchmark.
# Each part's raw output goes to its own file in OUT_DIR, headed by the device, the
# date and the commit, ready to be committed under docs/benchmarks/.
#
#   scripts/gpu_check.sh PART... [-o OUT_DIR]
#   PART: env | build | test | sanitize | bench | step | profile | pipeline | stepkernels | all
#   (all = build to pipeline, in order)
#   profile: Nsight Compute on the kernels furthest from their targets (GEMM v5, the
#   attention backward): where their time goes.
#   stepkernels: every kernel of one training step timed by Nsight Compute, summed by
#   name (scripts/step_kernels.sh): where the step's time goes.
#   env: what the machine has (GPU, driver, tools, PyTorch) and where the build's
#   libraries resolve; cheap, and a good first part on a fresh machine.
#   pipeline: not the GPU: the pipeline bubble on 4 CPU ranks (scripts/bench_pipeline.sh 4,
#   one run per configuration, PIPE_REPEATS to change), which needs 4 cores and MPI; the
#   CPU machines of the course have 2 cores. Carry data/fortunes for it.
#   OUT_DIR default: $OUT if set (the folder a remote run sends back), else gpu-check-out
#
# A part that fails is reported and the next one still runs; the exit status is 1 if
# any part failed. Parts after `build` reuse the build in $GPT_BUILD_DIR (default
# build-gpu), so on a machine with a per-command time limit they can run in separate
# commands. Before going to a machine without the build's header-only dependencies,
# run scripts/gpu_carry.sh here and carry third_party_local.
# A build made on another machine with the same nvcc (scripts/gpu_session.sh carries
# one, to spare the GPU machine the compile) is used where it lies: its absolute paths (the
# source and build folders, the MPI launcher) are made to exist here by links, and the
# CUDA libraries it needs are looked up where this machine keeps them.
# Environment: GPT_COMMIT (the commit, when the tree has no .git), CUDA_ARCHS
# (default: the GPU's own, e.g. 90a on Hopper), PYTHON (torch with CUDA), STEP_BATCH
# (micro-batch of the whole-step benchmark, default 32), GPU_TEST_JOBS (tests run at
# once, default 1), GPU_TEST_REGEX (only the gpu tests it matches), SANITIZE_TIMEOUT
# (seconds per sanitizer run, default 600), SANITIZE_RUNS (below).
set -uo pipefail
# The caller's build directory, read before lib.sh gives GPT_BUILD_DIR its own default
# (build, the CPU tree): this script's default is build-gpu.
gpu_build_dir="${GPT_BUILD_DIR:-build-gpu}"
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parts=()
out="${OUT:-gpu-check-out}"
while (($#)); do
  case "$1" in
    -o) (($# >= 2)) || bad_input "-o needs a directory"; out="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    all) parts+=(build test sanitize bench step profile pipeline); shift ;;
    env | build | test | sanitize | bench | step | profile | pipeline | stepkernels) parts+=("$1"); shift ;;
    *) bad_input "unknown part '$1' (env, build, test, sanitize, bench, step, profile, pipeline, stepkernels, all)" ;;
  esac
done
((${#parts[@]})) ||
  bad_input "name a part: env, build, test, sanitize, bench, step, profile, pipeline, stepkernels or all"
[[ "${GPU_TEST_JOBS:-1}" =~ ^[1-9][0-9]{0,3}$ ]] ||
  bad_input "GPU_TEST_JOBS='$GPU_TEST_JOBS': a number of tests at once, 1 or more"
out="$(abs_dir "$out")"  # a relative one in the repository, as GPT_BUILD_DIR
[[ ! -e "$out" || -d "$out" ]] || bad_input "-o $out exists and is not a directory"
command -v nvidia-smi > /dev/null || die "no nvidia-smi: this machine has no NVIDIA GPU"
build="$(abs_dir "$gpu_build_dir")"
cd "$GPT_ROOT" || exit 1
mkdir -p "$out"

device="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
commit="${GPT_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}"
date="$(date -u +%Y-%m-%d)"
# The GPU's compute capability as CMake spells the architecture (9.0 -> 90a: the
# Hopper versions need the `a` features).
cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)"
[[ "$cc" == 90 ]] && cc=90a
archs="${CUDA_ARCHS:-$cc}"

# run_part NAME FILE COMMAND...: runs COMMAND with its output (and a header) in
# OUT_DIR/FILE and on the terminal; records a failure.
failed=()
run_part() {
  local name="$1" file="$out/$2"
  shift 2
  {
    echo "# $name: $*"
    echo "# device: $device; date: $date; commit: $commit; CUDA archs: $archs"
  } > "$file"
  log "$name -> $file"
  if "$@" 2>&1 | tee -a "$file"; then
    log "$name: ok"
  else
    warn "$name: FAILED"
    failed+=("$name")
  fi
}

# Open MPI carried as Debian packages (gpu_carry.sh): unpacked once into
# third_party_local/openmpi, and used from there (OPAL_PREFIX relocates it). Any failure
# leaves the build without MPI, with a warning.
mpi_flags=(-DGPT_MPI=OFF)
use_carried_mpi() {
  local ompi deb
  ompi="$(abs_dir third_party_local)/openmpi"
  if [[ ! -x "$ompi/usr/bin/orterun" ]]; then
    mkdir -p "$ompi" || return 1
    for deb in third_party_local/debs/*.deb; do
      if command -v dpkg-deb > /dev/null; then dpkg-deb -x "$deb" "$ompi" || return 1
      else ar p "$deb" data.tar.xz | tar -xJ -C "$ompi" || return 1; fi
    done
  fi
  export OPAL_PREFIX="$ompi/usr" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export PATH="$OPAL_PREFIX/bin:$PATH"
  export LD_LIBRARY_PATH="$OPAL_PREFIX/lib/x86_64-linux-gnu/openmpi/lib:$OPAL_PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  mpi_flags=(-DGPT_MPI=ON -DMPI_CXX_COMPILER="$OPAL_PREFIX/bin/mpicxx.openmpi"
             -DMPIEXEC_EXECUTABLE="$OPAL_PREFIX/bin/mpirun.openmpi")
  log "Open MPI from $OPAL_PREFIX"
}
if compgen -G "third_party_local/debs/*.deb" > /dev/null; then
  use_carried_mpi || warn "could not unpack the carried Open MPI: no MPI (world size 1)"
fi

# A build made on another machine: the absolute paths in its CTest files name the folder
# it was configured in and the MPI launcher found there. Links make both exist here.
adopt_build() {
  local cache="$build/CMakeCache.txt" home launcher
  [[ -f "$cache" ]] || return 0
  home="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache")"
  if [[ -n "$home" && "$home" != "$GPT_ROOT" && ! -e "$home" ]]; then
    mkdir -p "$(dirname "$home")" && ln -s "$GPT_ROOT" "$home" &&
      log "the build was configured in $home: linked it to $GPT_ROOT"
  fi
  launcher="$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$cache")"
  if [[ -n "$launcher" && ! -e "$launcher" && -n "${OPAL_PREFIX:-}" ]]; then
    mkdir -p "$(dirname "$launcher")" && ln -s "$OPAL_PREFIX/bin/orterun" "$launcher" &&
      log "the build's MPI launcher $launcher: linked to the carried Open MPI"
  fi
}

# Libraries the build's programs need that the loader does not find (an image may keep
# cuBLAS or NCCL inside a Python package): their folders go first in LD_LIBRARY_PATH.
find_missing_libraries() {
  local exe lib found
  for exe in "$build"/bin/* "$build"/stages/*/train; do
    [[ -f "$exe" && -x "$exe" ]] || continue
    while read -r lib; do
      found="$(find /usr/local /opt /usr/lib -name "$lib" -print -quit 2> /dev/null)"
      if [[ -z "$found" ]]; then
        warn "$lib, which $exe needs, is nowhere on this machine"
        continue
      fi
      LD_LIBRARY_PATH="$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      export LD_LIBRARY_PATH
      log "$lib found in $(dirname "$found")"
    done < <(ldd "$exe" 2> /dev/null | awk '/not found/ {print $1}')
  done
  # cuBLASLt is not linked (ldd cannot miss it) but opened by gemm=cublas: from the path
  # the build was configured with, else by its soname through LD_LIBRARY_PATH.
  local cublaslt
  cublaslt="$(sed -n 's/^GPT_CUBLASLT_FILE:INTERNAL=//p' "$build/CMakeCache.txt" 2> /dev/null)"
  if [[ -n "$cublaslt" && "$cublaslt" == /* && ! -e "$cublaslt" ]]; then
    found="$(find /usr/local /opt /usr/lib -name "$(basename "$cublaslt")" -print -quit 2> /dev/null)"
    if [[ -n "$found" ]]; then
      LD_LIBRARY_PATH="$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      export LD_LIBRARY_PATH
      log "$(basename "$cublaslt") found in $(dirname "$found") (the build looked in $(dirname "$cublaslt"))"
    else
      warn "$(basename "$cublaslt"), which gemm=cublas opens, is nowhere on this machine"
    fi
  fi
}

# What the machine has, and where the build's libraries resolve.
machine_env() {
  nvidia-smi
  command -v nvcc > /dev/null && nvcc --version | tail -1
  command -v compute-sanitizer > /dev/null && compute-sanitizer --version | tail -1
  "${PYTHON:-python3}" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
  echo "nproc $(nproc); LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  local exe
  for exe in "$build/bin/gpu_gemm" "$build/stages/02_ddp/train"; do
    [[ -x "$exe" ]] && { echo "$exe:"; ldd "$exe" | grep -E 'nccl|libmpi|cudart|not found'; }
  done
  # cuBLASLt is opened when gemm=cublas first runs, not linked (kernels/cuda/gemm/cublaslt_library.h).
  grep -h '^GPT_CUBLASLT_FILE' "$build/CMakeCache.txt" 2> /dev/null
  return 0
}

build_tree() {
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPT_CUDA=ON "${mpi_flags[@]}" \
    -DCMAKE_CUDA_ARCHITECTURES="$archs"; then
    [[ "${mpi_flags[0]}" == -DGPT_MPI=ON ]] || return 1
    warn "configuring with the carried Open MPI failed: building without MPI (world size 1)"
    rm -rf "$build"
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPT_CUDA=ON -DGPT_MPI=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="$archs" || return 1
  fi
  cmake --build "$build" -j "$GPT_JOBS"
}

# memcheck on every kernel test; racecheck (shared-memory races) on the tests of the
# kernels that share tiles between threads: attention and the GEMMs. The runs go side by
# side (the sanitizers slow the GPU work tens of times; the GPU has room for several),
# each under SANITIZE_TIMEOUT; a run cut off there is reported as such, not as a finding.
# The GEMM test runs under the sanitizers in the cases that end within minutes: the
# linear layer's ops ([matmul]: the hand GEMM on aligned and ragged shapes, the bias
# gradient) and split K ([split_k]). Its whole ladder (every version, layout and
# epilogue) did not end in 245 s under either tool on an H200 (2026-11-29): a longer
# session can ask for it with SANITIZE_RUNS=ladder (each tag a run of its own).
# SANITIZE_RUNS overrides the list: TOOL:TEST[:CATCH_SPEC] entries, e.g.
# racecheck:gpu_attention:*v5* (a Catch2 test spec without spaces: a subset of the cases).
sanitize_runs_default="memcheck:gpu_ops memcheck:gpu_attention memcheck:gpu_block_attention
  memcheck:gpu_device_memory memcheck:gpu_gemm:[matmul] memcheck:gpu_gemm:[split_k]
  racecheck:gpu_attention racecheck:gpu_block_attention racecheck:gpu_gemm:[matmul]
  racecheck:gpu_gemm:[split_k]"
sanitize_runs_ladder="memcheck:gpu_gemm:[ladder_fp32] memcheck:gpu_gemm:[ladder_bf16]
  memcheck:gpu_gemm:[ladder_bf16_fp32] racecheck:gpu_gemm:[ladder_fp32] racecheck:gpu_gemm:[ladder_bf16]
  racecheck:gpu_gemm:[ladder_bf16_fp32]"
sanitize_one() {
  local tool="$1" t="$2" spec="$3" limit="${SANITIZE_TIMEOUT:-600}" rc
  local flags=(--tool "$tool" --error-exitcode 1)
  [[ "$tool" == memcheck ]] && flags+=(--leak-check full)
  echo "==> compute-sanitizer $tool: $t ${spec:+(cases $spec)}"
  timeout "$limit" compute-sanitizer "${flags[@]}" "$build/bin/$t" ${spec:+"$spec"}
  rc=$?
  ((rc == 124)) && echo "warning: $tool $t: cut off after ${limit}s (not a finding)"
  ((rc == 0 || rc == 124)) || echo "warning: $tool $t: FAILED (exit $rc)"
  return $rc
}
sanitize() {
  local work entry tool t spec i=0 rc=0 pids=()
  work="$(mktemp -d "${TMPDIR:-/tmp}/gpt-sanitize.XXXXXX")"
  local runs="${SANITIZE_RUNS:-$sanitize_runs_default}"
  [[ "$runs" == ladder ]] && runs="$sanitize_runs_ladder"
  for entry in $runs; do
    IFS=: read -r tool t spec <<< "$entry"
    sanitize_one "$tool" "$t" "$spec" > "$work/$i.txt" 2>&1 &
    pids+=($!)
    i=$((i + 1))
  done
  for ((i = 0; i < ${#pids[@]}; ++i)); do
    wait "${pids[$i]}" || rc=1
    cat "$work/$i.txt"
  done
  rm -rf "$work"
  return $rc
}

# Where the time goes inside the kernels furthest from their targets: Nsight Compute on
# one launch of each (GEMM v5 at 4096^3 and at the training shapes furthest from cuBLAS;
# the attention v4 backward's two kernels at hs 64, T 2048), the clocks left as they are.
# (--warmup 1: the benchmarks take 1 to 1000; ncu profiles the first launch it matches.)
profile() {
  command -v ncu > /dev/null || { warn "no ncu on this machine"; return 1; }
  # --print-details all: the sections' charts as numbers too (the warp stall reasons, which
  # the default print leaves out).
  local ncu=(ncu --clock-control none --print-details all --section SpeedOfLight --section MemoryWorkloadAnalysis
             --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats
             --section WarpStateStats --section SchedulerStats)
  local shape rc=0
  for shape in square4096 qkv.fwd fcproj.dinp attproj.dW; do
    log "ncu: GEMM v5, $shape"
    "${ncu[@]}" --kernel-name regex:wgmma_gemm_kernel --launch-count 1 "$build/bin/bench_gemm" \
      --shapes "$shape" --versions v5 --reps 3 --warmup 1 --no-flush || rc=1
  done
  # The benchmark first runs the reference (v1's naive kernels, also named dkdv_kernel and
  # dq_kernel): v4's are told apart by their demangled names, whose template argument is
  # the head size (dkdv_kernel<(int)64>), where v1's is the element type.
  log "ncu: attention v4 backward (dK dV, then dQ), hs 64, T 2048"
  "${ncu[@]}" --kernel-name-base demangled --kernel-name regex:'(dkdv|dq)_kernel<[(]int[)]64>' --launch-count 2 \
    "$build/bin/bench_attention" --versions 4 --T 2048 --hs 64 --reps 1 --warmup 1 --no-flush || rc=1
  return $rc
}

# The pipeline benchmark on CPU ranks: needs the MPI build, 4 cores and the fortunes data.
pipeline_bench() {
  # The build's own answer: a configure that failed with the carried MPI fell back to none.
  grep -q '^GPT_MPI:STRING=ON$' "$build/CMakeCache.txt" 2> /dev/null ||
    { warn "the build in $build has no MPI (carry third_party_local): no pipeline benchmark"; return 1; }
  (($(getconf _NPROCESSORS_ONLN) >= 4)) || { warn "fewer than 4 cores: the p = 4 bubble would measure contention"; return 1; }
  [[ -f data/fortunes/train.bin ]] || { warn "data/fortunes is missing: carry it"; return 1; }
  GPT_BUILD_DIR="$build" GPT_BENCH_REPEATS="${PIPE_REPEATS:-1}" scripts/bench_pipeline.sh 4
}

adopt_build
find_missing_libraries
for part in "${parts[@]}"; do
  case "$part" in
    env) run_part "machine" "gpu-env-$date.txt" machine_env ;;
    build) run_part build "build-$date.txt" build_tree ;;
    test) run_part "gpu tests" "gpu-tests-$date.txt" ctest --test-dir "$build" -L gpu --output-on-failure \
            -j "${GPU_TEST_JOBS:-1}" ${GPU_TEST_REGEX:+-R "$GPU_TEST_REGEX"} ;;
    sanitize) run_part "compute-sanitizer" "gpu-sanitizer-$date.txt" sanitize ;;
    bench) run_part "kernel benchmarks" "gpu-kernels-$date.txt" scripts/bench_kernels.sh "$build" ;;
    step) run_part "whole-step benchmark" "gpu-step-$date.txt" scripts/bench_gpu_step.sh "$build" "${STEP_BATCH:-32}" ;;
    profile) run_part "Nsight Compute" "gpu-profile-$date.txt" profile ;;
    stepkernels) run_part "kernels of one step" "gpu-step-kernels-$date.txt" scripts/step_kernels.sh "$build" \
                   "${STEP_BATCH:-32}" ;;
    pipeline) run_part "pipeline bubble, 4 CPU ranks" "cpu-pipeline-bubble-p4-$date.txt" pipeline_bench ;;
  esac
done

if ((${#failed[@]})); then
  warn "failed: ${failed[*]}"
  exit 1
fi
log "all parts passed; output in $out"
