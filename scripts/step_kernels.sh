#!/usr/bin/env bash
# Where one training step's GPU time goes, kernel by kernel: Nsight Compute times every
# kernel launch of the second of two steps of stage 01 (GPT-2 124M, bf16, T = 1024, the
# GEMMs named by GEMM=; a step starts at its embedding's forward, so the start-up's
# kernels are left out) and the times are summed by kernel name, largest first. Nsight
# Systems does not run on the H200 machines these were measured on; ncu with the one metric
# gpu__time_duration needs one pass per launch, with the clocks and the caches left as
# they are (--clock-control none --cache-control none), so each launch is timed as it
# runs in training, but one at a time. The sum is the kernels' time: not the memsets and
# copies (no kernels), not the gaps between launches, and at the clock an idle GPU
# holds, which may be higher than under a step's sustained load (bench_gpu_step.sh
# prints that one).
#
#   scripts/step_kernels.sh [BUILD_DIR] [MICRO_BATCH]     (defaults: build-gpu, 32)
#
# Environment: GEMM (hand or cublas, default hand), PYTHON (default python3).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$GPT_ROOT"
case "${1:-}" in
  -h | --help) print_help; exit 0 ;;
  -*) bad_input "unknown option '$1' (--help)" ;;
esac
(($# <= 2)) || bad_input "at most 2 arguments, BUILD_DIR and MICRO_BATCH, not $#: $* (--help)"
build="$(abs_dir "${1:-build-gpu}")"
micro="${2:-32}"
gemm="${GEMM:-hand}"
python="${PYTHON:-python3}"
train="$build/stages/01_single_gpu/train"
[[ -x "$train" && -x "$build/bin/prepare" ]] || die "build $build first (stage 01 and prepare)"
command -v ncu > /dev/null || die "no ncu on this machine"

work="$(mktemp -d "${TMPDIR:-/tmp}/gpt-step-kernels.XXXXXX")"
gpu_step_data "$build" "$work"
mapfile -t args < <(gpu_step_args "$work" "$work/run" "$micro" 2 "$gemm")

log "ncu: every kernel of the second of two steps, stage 01, gemm=$gemm, micro-batch $micro x 1024"
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
  --kernel-name-base demangled "$train" "${args[@]}" > "$work/ncu.csv"

"$python" - "$work/ncu.csv" <<'PY'
import collections, csv, sys
# ncu prints the program's own lines first and its table at the end, one quoted row per
# launch and metric, after a header row that starts with "ID".
lines = open(sys.argv[1]).read().splitlines()
header = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
if header is None:
    sys.exit("step_kernels: ncu wrote no table")
rows = csv.DictReader([l for l in lines[header:] if l.startswith('"')])
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}

def short(name):
    """The demangled name without its return type and argument list (template arguments,
    which tell the GEMM's epilogues apart, stay)."""
    name = name.removeprefix("void ")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                return name[:i]
    return name

launches = []  # (launch id, kernel, microseconds), in launch order
for row in rows:
    if row.get("Metric Name") != "gpu__time_duration.sum":
        continue
    unit = row["Metric Unit"]
    if unit not in scale:
        sys.exit(f"step_kernels: unknown unit '{unit}' of gpu__time_duration")
    name = short(row.get("Kernel Name") or row.get("Function Name") or "?")
    launches.append((int(row["ID"]), name, float(row["Metric Value"].replace(",", "")) * scale[unit]))
launches.sort()
# The second step: from the second launch of the embedding's forward to the end (the run
# does nothing after its last step's optimizer).
starts = [i for i, (_, name, _) in enumerate(launches) if "embedding_forward" in name]
if len(starts) != 2:
    sys.exit(f"step_kernels: {len(starts)} launches of the embedding's forward, not 2: cannot find the second step")
total = collections.defaultdict(float)
count = collections.Counter()
for _, name, us in launches[starts[1]:]:
    total[name] += us
    count[name] += 1
busy = sum(total.values())
print(f"one step (the second): {sum(count.values())} launches, {busy / 1e3:.2f} ms of kernel time")
print(f"{'ms':>9} {'%':>6} {'launches':>8}  kernel")
for name, us in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"{us / 1e3:9.3f} {100 * us / busy:6.1f} {count[name]:8d}  {name}")
PY
rm -rf "$work"
