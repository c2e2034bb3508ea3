#!/usr/bin/env bash
# GPU kernel benchmarks, one after the other, on the GPU this machine has:
#   bench_gemm        every GEMM version and cuBLASLt, GPT-2 124M training shapes + 4096^3
#   bench_ops         the memory-bound ops: achieved GB/s and % of the DRAM peak
#   bench_attention   every attention version (its rows also go to a JSON-lines file)
#   bench_sdpa.py     PyTorch's scaled_dot_product_attention (flash, cuDNN) at the same shapes
#   attention_vs_pytorch.py   the two joined: % of PyTorch flash, and the attention targets
#
#   scripts/bench_kernels.sh [BUILD_DIR]          (default: build)
#
# Environment: PYTHON (an interpreter with torch and CUDA; default python3),
#              BENCH_ONLY (space-separated subset of: gemm ops attention; default all).
# Exits non-zero if a benchmark program fails; a missing PyTorch only skips its part.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$GPT_ROOT"
case "${1:-}" in
  -h | --help) print_help; exit 0 ;;
  -*) bad_input "unknown option '$1' (--help)" ;;
esac
(($# <= 1)) || bad_input "at most 1 argument, BUILD_DIR, not $#: $* (--help)"
build="$(abs_dir "${1:-build}")"
python="${PYTHON:-python3}"
only="${BENCH_ONLY:-gemm ops attention}"
bin="$build/bin"
for b in bench_gemm bench_ops bench_attention; do
  [[ -x "$bin/$b" ]] || die "$bin/$b missing: build with CUDA first (cmake --build $build)"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/gpt-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [[ " $only " == *" gemm "* ]]; then
  log "bench_gemm"
  "$bin/bench_gemm"
fi
if [[ " $only " == *" ops "* ]]; then
  log "bench_ops"
  "$bin/bench_ops"
fi
if [[ " $only " == *" attention "* ]]; then
  log "bench_attention"
  "$bin/bench_attention" --json "$work/ours.jsonl"
  if "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
    log "PyTorch scaled_dot_product_attention"
    "$python" kernels/bench/bench_sdpa.py --json "$work/sdpa.jsonl"
    "$python" kernels/bench/attention_vs_pytorch.py "$work/ours.jsonl" "$work/sdpa.jsonl"
  else
    warn "$python has no torch with CUDA: the PyTorch attention comparison is skipped"
  fi
fi
