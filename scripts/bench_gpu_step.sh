#!/usr/bin/env bash
# Whole-step GPU benchmark: stage 01 training GPT-2 124M (T=1024, bf16) with the
# hand-written kernels (gemm=hand) and with cuBLASLt matmuls (gemm=cublas), then the
# PyTorch script (scripts/train_gpt2_torch.py: bf16 autocast, torch.compile, fused
# AdamW, flash SDPA) on the same GPU, same model and batch; prints tokens/s, MFU and
# the ratios the step's targets are stated in (docs/benchmarks/README.md: gemm=hand at
# least 95 % of gemm=cublas, MFU at least 45 %, faster than PyTorch).
#
#   scripts/bench_gpu_step.sh [BUILD_DIR] [MICRO_BATCH]     (defaults: build, 32)
#
# The corpus is the project's own text files (no download is possible on the GPU
# machine); the token contents do not change the time of a step.
# Environment: BENCH_STEPS (default 30), BENCH_WARMUP (steps left out, default 10),
#              BENCH_GEMMS (the gemm= runs, default "hand cublas"), BENCH_TORCH (0: no
#              PyTorch run; default 1), PYTHON (an interpreter with torch and CUDA;
#              default python3). A run left out prints nan, and so do its ratios.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$GPT_ROOT"
case "${1:-}" in
  -h | --help) print_help; exit 0 ;;
  -*) bad_input "unknown option '$1' (--help)" ;;
esac
(($# <= 2)) || bad_input "at most 2 arguments, BUILD_DIR and MICRO_BATCH, not $#: $* (--help)"
build="$(abs_dir "${1:-build}")"
micro="${2:-32}"
steps="${BENCH_STEPS:-30}" warmup="${BENCH_WARMUP:-10}"
# Checked before any run: the medians need a step after the warm-up.
[[ "$steps" =~ ^[1-9][0-9]{0,5}$ && "$warmup" =~ ^[0-9]{1,6}$ ]] && ((warmup < steps)) ||
  bad_input "BENCH_STEPS='$steps', BENCH_WARMUP='$warmup': whole numbers, the warm-up below the steps"
[[ "$micro" =~ ^[1-9][0-9]{0,4}$ ]] || bad_input "micro-batch '$micro': a whole number, 1 or more"
python="${PYTHON:-python3}"
train="$build/stages/01_single_gpu/train"
[[ -x "$train" && -x "$build/bin/prepare" ]] || die "build $build first (stage 01 and prepare)"

work="$(mktemp -d "${TMPDIR:-/tmp}/gpt-step.XXXXXX")"
trap 'rm -rf "$work"' EXIT
gpu_step_data "$build" "$work"

# median_rate RUN_DIR FIELD: the median of FIELD over the steps after the warm-up.
median_rate() {
  "$python" - "$1/metrics.jsonl" "$2" "$warmup" <<'PY'
import json, statistics, sys
path, field, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.loads(l) for l in open(path)]
vals = [r[field] for r in rows if r.get("kind") == "train" and r["step"] > warmup and r.get(field) is not None]
print(f"{statistics.median(vals):.4f}" if vals else "nan")
PY
}

# clocks_during FILE COMMAND...: runs COMMAND while nvidia-smi writes the SM clock (MHz)
# and the board's power (W) every 100 ms into FILE. A step's time depends on the clock
# the GPU holds under load, which a kernel timed alone (scripts/step_kernels.sh) need
# not see.
clocks_during() {
  local file="$1" smi="" rc=0
  shift
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$file" 2> /dev/null &
    smi=$!
  fi
  "$@" || rc=$?
  if [[ -n "$smi" ]]; then
    kill "$smi" 2> /dev/null || true
    wait "$smi" 2> /dev/null || true
  fi
  return "$rc"
}
# clock_summary FILE: the median SM clock and power over the samples of the steps: those
# drawing at least half the run's highest power (the start-up, which loads the data and
# builds the model, draws little).
clock_summary() {
  "$python" - "$1" <<'PY'
import os, statistics, sys
rows = []
for line in open(sys.argv[1]) if os.path.exists(sys.argv[1]) else []:
    try:
        rows.append(tuple(float(x) for x in line.split(",")))
    except ValueError:
        pass
busy = max((r[1] for r in rows), default=0) / 2
rows = [r for r in rows if r[1] >= busy]
if rows:
    print(f"{statistics.median(r[0] for r in rows):.0f} MHz, {statistics.median(r[1] for r in rows):.0f} W")
else:
    print("not sampled")
PY
}

declare -A tok=([hand]=nan [cublas]=nan) mfu=([hand]=nan [cublas]=nan) clocks=([hand]="not run" [cublas]="not run")
read -ra gemms <<< "${BENCH_GEMMS:-hand cublas}"
for gemm in "${gemms[@]}"; do
  [[ "$gemm" == hand || "$gemm" == cublas ]] || die "BENCH_GEMMS: '$gemm' is neither hand nor cublas"
  run="$work/run_$gemm"
  log "stage 01, gemm=$gemm, micro-batch $micro x 1024"
  mapfile -t args < <(gpu_step_args "$work" "$run" "$micro" "$steps" "$gemm")
  clocks_during "$work/clocks_$gemm.csv" "$train" "${args[@]}" --set log_every=5 | tee "$work/$gemm.log"
  tok[$gemm]=$(median_rate "$run" tokens_per_s)
  mfu[$gemm]=$(median_rate "$run" mfu)
  clocks[$gemm]=$(clock_summary "$work/clocks_$gemm.csv")
done

torch_tok=nan
if [[ "${BENCH_TORCH:-1}" == 0 ]]; then
  log "BENCH_TORCH=0: no PyTorch run"
elif log "PyTorch, same model and batch" && "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
  "$python" scripts/train_gpt2_torch.py --batch "$micro" --seq 1024 --steps "$steps" --warmup "$warmup" |
    tee "$work/torch.log"
  torch_tok=$(awk '/^tokens\/s/ {print $2}' "$work/torch.log")
else
  warn "$python has no torch with CUDA: PyTorch comparison skipped"
fi

"$python" - "${tok[hand]}" "${tok[cublas]}" "$torch_tok" "${mfu[hand]}" "${mfu[cublas]}" \
  "${clocks[hand]}" "${clocks[cublas]}" <<'PY'
import sys
hand, cublas, torch_tok, mfu_hand, mfu_cublas = map(float, sys.argv[1:6])
clocks_hand, clocks_cublas = sys.argv[6:8]
print("\nwhole step, GPT-2 124M, T=1024, bf16 (median tokens/s after warm-up)")
print(f"  stage 01 gemm=hand    {hand:12.0f} tok/s   MFU {100 * mfu_hand:5.1f} %")
print(f"  stage 01 gemm=cublas  {cublas:12.0f} tok/s   MFU {100 * mfu_cublas:5.1f} %")
print(f"  PyTorch (compiled)    {torch_tok:12.0f} tok/s")
print(f"  hand / cublas  {hand / cublas:6.3f}   (target >= 0.95)")
print(f"  hand / PyTorch {hand / torch_tok:6.3f}   (target > 1)")
print(f"  MFU hand       {100 * mfu_hand:5.1f} % (target >= 45 %)")
print(f"  SM clock and power, median over the steps: hand {clocks_hand}; cublas {clocks_cublas}")
PY
rm -rf "$work"
