#!/usr/bin/env bash
# CPU benchmark: GPT-2 124M training steps on this machine's CPU cores.
#
#   scripts/bench_cpu.sh [--set key=value ...]      e.g. --set threads=1
#
# Builds, prepares the default dataset, and runs stage 01 with
# configs/bench-124m-cpu.json (12 layers, 768 wide, 12 heads, vocabulary 50257 padded
# to 50304, micro-batch 4, T=64, fp32) for a few steps without validation, checkpoint or
# sample, in a temporary run directory. From its metrics.jsonl it drops the warm-up
# steps and prints the steady state: ms/step (median), tokens/s, achieved GFLOP/s,
# the machine's fp32 FMA peak measured by build/bin/cpu_peak, the share of that
# peak, and the thread count.
# Environment: BENCH_STEPS (default 8), BENCH_WARMUP (steps dropped, default 2),
#              BENCH_KEEP=1 keeps the run directory. steps, run_dir and metrics_file are
#              the benchmark's own: --set of them is refused.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The arguments go to the trainer after the build: their form and keys are checked first,
# here (--set key=value, or a bare key=value as the trainer also takes).
known_keys="$(config_keys)"  # lib.sh
set_next=0
for arg in "$@"; do
  if ((set_next)); then
    [[ "$arg" == *=* ]] || bad_input "--set needs key=value, not '$arg'"
    set_next=0
  fi
  if [[ "$arg" == [!-]*=* && "$known_keys" != *" ${arg%%=*} "* ]]; then
    bad_input "'$arg': unknown key '${arg%%=*}' (docs/config.md lists every key)"
  fi
  case "$arg" in
    -h | --help) print_help; exit 0 ;;
    --set) set_next=1 ;;
    # The benchmark reads the run it makes from its own directory.
    run_dir=* | metrics_file=* | steps=*)
      bad_input "'$arg': the benchmark sets ${arg%%=*} itself (steps: BENCH_STEPS; --help)" ;;
    [!-]*=*) ;;
    *) bad_input "unknown argument '$arg' (scripts/bench_cpu.sh [--set key=value ...]; --help)" ;;
  esac
done
((!set_next)) || bad_input "--set needs key=value"

cd "$GPT_ROOT"
config="configs/bench-124m-cpu.json"
stage="01_single_gpu"
steps="${BENCH_STEPS:-8}"
warmup="${BENCH_WARMUP:-2}"
[[ -f "$config" ]] || die "$config not found"
[[ "$steps" =~ ^[0-9]+$ && "$warmup" =~ ^[0-9]+$ ]] ||
  bad_input "BENCH_STEPS and BENCH_WARMUP must be whole numbers"
((steps > warmup)) || bad_input "BENCH_STEPS ($steps) must exceed BENCH_WARMUP ($warmup)"
# The analysis needs only Python's standard library: Debian's /usr/bin/python3 when
# there is one, else the first python3 on PATH.
python="$(command -v /usr/bin/python3 || command -v python3 || true)"
[[ -n "$python" ]] || die "python3 not found"

ensure_deps --training  # what a training run needs (not PyTorch: only the tests use it)
build_preset default "$GPT_BUILD_DIR"
prepare_default_data

build="$(abs_dir "$GPT_BUILD_DIR")"
train="$build/stages/$stage/train"
peak_bin="$build/bin/cpu_peak"
[[ -x "$train" ]] || die "$train was not built"

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/gpt-bench.XXXXXX")"
if [[ "${BENCH_KEEP:-0}" == 1 ]]; then
  log "run directory kept: $run_dir"
else
  trap 'rm -rf "$run_dir"' EXIT
fi

# The caller's --set arguments come last, so they win.
overrides=(--set device=cpu --set "steps=$steps" --set val_every=0
  --set checkpoint_at_end=false --set checkpoint_every=0 --set sample_tokens=0
  --set "run_dir=$run_dir" --set "metrics_file=$run_dir/metrics.jsonl")

# Other busy processes share the cores and lower both the run and the peak: measure
# how busy the CPUs are over one second before starting.
cpu_times() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
if [[ -r /proc/stat ]]; then
  read -r busy0 idle0 < <(cpu_times)
  sleep 1
  read -r busy1 idle1 < <(cpu_times)
  total=$((busy1 - busy0 + idle1 - idle0))
  if ((total > 0 && 100 * (busy1 - busy0) / total > 20)); then
    warn "the CPUs are $((100 * (busy1 - busy0) / total))% busy with other work: the figures will be low"
  fi
fi
log "running $stage with $config for $steps steps"
"$train" --config "$config" "${overrides[@]}" "$@" ||
  die "the benchmark run failed (status $?)"

# The analysis, in Python.
# `analyse threads CONFIG [ARGS]` prints the thread count the run used;
# `analyse report CONFIG METRICS WARMUP THREADS PEAK_OUTPUT STAGE [ARGS]` the table.
analyse() { "$python" -c "$ANALYSIS" "$@"; }
read -r -d '' ANALYSIS <<'PY' || true
import json, os, statistics, sys

def load_config(path, args):
    """The config file's keys (nested objects flattened), then --set overrides."""
    cfg = {"n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 64, "vocab_size": 256,
           "seq_len": 64, "batch_size": 8, "threads": 0, "precision": "fp32"}
    def walk(d):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v)
            else:
                cfg[k] = v
    walk(json.load(open(path)))
    for i, a in enumerate(args):
        kv = args[i + 1] if a == "--set" and i + 1 < len(args) else a
        k, _, v = kv.partition("=")
        if k in cfg:
            cfg[k] = v if k == "precision" else int(v)
    return cfg

def threads_of(cfg):
    t = int(cfg["threads"])  # 0: OpenMP's default, OMP_NUM_THREADS or all cores
    if t > 0:
        return t
    # OMP_NUM_THREADS may list a count per nesting level ("2,1"): the first is this level's.
    first = (os.environ.get("OMP_NUM_THREADS") or "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else os.cpu_count()

def report(config_path, metrics_path, warmup, threads, peak_out, stage, args):
    cfg = load_config(config_path, args)
    L, C, H = int(cfg["n_layer"]), int(cfg["n_embd"]), int(cfg["n_head"])
    V, T_max, T = int(cfg["vocab_size"]), int(cfg["block_size"]), int(cfg["seq_len"])
    Vp = (V + 127) // 128 * 128
    B = int(cfg["batch_size"])

    # GPT-2 parameters: token table (tied with the output layer), position table, per
    # block two layernorms (4C), qkv (3C^2+3C), attention projection (C^2+C) and MLP
    # (4C^2+4C, 4C^2+C): 12C^2+13C; the final layernorm (2C).
    n_params = Vp * C + T_max * C + L * (12 * C * C + 13 * C) + 2 * C
    # Training FLOPs per token (backward = 2 x forward, 2 flops per multiply-add):
    # 6*N for the matmuls, N = parameters less the position table (a lookup; the
    # token table counts, it is also the output layer), plus 12*L*T*C for the
    # attention scores and weighted sums (T = seq_len; the causal mask not discounted).
    n_matmul = n_params - T_max * C
    flops_per_token = 6 * n_matmul + 12 * L * T * C

    train = []
    with open(metrics_path) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                if rec.get("kind") == "train":
                    train.append(rec)
    train.sort(key=lambda r: r["step"])
    steady = train[warmup:]
    if not steady:
        sys.exit(f"error: {metrics_path} has {len(train)} train steps; need more than {warmup}")
    ms = [float(r["ms"]) for r in steady]
    ms_med = statistics.median(ms)
    tokens_per_step = B * T
    tok_s = tokens_per_step / (ms_med / 1e3)
    gflops = flops_per_token * tok_s / 1e9

    peak = peak1 = None
    for line in peak_out.splitlines():
        if line.startswith("fp32 FMA peak GFLOP/s 1-thread "):
            peak1 = float(line.split()[-1])
        elif line.startswith("fp32 FMA peak GFLOP/s "):
            peak = float(line.split()[-1])

    rows = [
        ("stage", f"{stage}, {config_path}"),
        ("model", f"{L} layers, {C} wide, {H} heads, vocab {V} (padded {Vp}), context {T_max}"),
        ("model params", f"{n_params:,} ({n_params / 1e6:.2f} M)"),
        ("batch", f"{B} x {T} = {tokens_per_step} tokens per step, {cfg['precision']}"),
        ("threads", f"{threads}"),
        ("steps measured", f"{len(steady)} of {len(train)} (first {warmup} dropped as warm-up)"),
        ("ms/step", f"{ms_med:.1f} median (min {min(ms):.1f}, max {max(ms):.1f})"),
        ("tokens/s", f"{tok_s:.1f}"),
        ("FLOPs/token", f"{flops_per_token / 1e9:.4f} G = 6*N + 12*L*T*C with N = {n_matmul:,}"
                        f" (params less the position table), L={L}, T={T}, C={C}"),
        ("achieved", f"{gflops:.1f} GFLOP/s"),
    ]
    if peak is not None:
        one = f", 1 thread {peak1:.1f}" if peak1 is not None else ""
        rows.append(("fp32 FMA peak", f"{peak:.1f} GFLOP/s ({threads} threads{one}; build/bin/cpu_peak)"))
        rows.append(("share of peak", f"{100 * gflops / peak:.1f} %"))
    else:
        rows.append(("fp32 FMA peak", "unavailable (build/bin/cpu_peak was not built)"))
    print("\n==== CPU benchmark ====")
    for k, v in rows:
        print(f"{k:<15} {v}")

mode = sys.argv[1]
if mode == "threads":
    print(threads_of(load_config(sys.argv[2], sys.argv[3:])))
else:
    c, m, w, t, p, s = sys.argv[2:8]
    report(c, m, int(w), int(t), p, s, sys.argv[8:])
PY

threads="$(analyse threads "$config" "$@")"

peak_out=""
if [[ -x "$peak_bin" ]]; then
  log "measuring the fp32 FMA peak with $threads threads"
  peak_out="$(OMP_NUM_THREADS="$threads" "$peak_bin")" || die "cpu_peak failed"
else
  warn "$peak_bin was not built: share of peak unavailable"
fi

analyse report "$config" "$run_dir/metrics.jsonl" "$warmup" "$threads" "$peak_out" "$stage" "$@"
