#!/usr/bin/env bash
# Makes every run the notebooks in notebooks/ read: short CPU runs of the stages on the
# tiny and small configs, their traces, and the all-reduce benchmark's tables.
#
#   scripts/notebook_runs.sh [OUT]
#
# OUT, a path from the current directory, defaults to $GPT_NOTEBOOK_RUNS (a relative one
# taken from the repository root, as notebooks/gptruns.py takes it), else runs/notebooks
# (git-ignored); it is emptied first, because a trainer appends to a run directory's
# metrics.jsonl. The binaries
# come from $GPT_BUILD_DIR (default build/); the ones missing are built with the
# `default` preset. The data is the default corpus (data/fortunes, prepared when
# missing). Every rank runs one OpenMP thread. About a minute on 2 cores.
#
# What lands in OUT (each run directory holds metrics.jsonl, a checkpoint whose
# manifest.json records the resolved config and the layout, and the trainer's output
# in stdout.txt):
#   agree/sNN          30 steps of configs/tiny.json: 01 on one rank, 02-05 at dp 2,
#                      06 at tp 2, 07-09 at pp 2 (09: schedule zb-h1), 10 at cp 2, 11 at
#                      pp 2 x cp 2 with full activation checkpointing; s01_bf16: stage 01 in bf16
#   memory/sNN_dpK     one step of stages 01-06 and 10 at dp K = 1, 2, 4 (01: one rank; 06 at
#                      tp 2 and 10 at cp 2, both zero=3, so 2K ranks), tiny at 8 layers
#   memory/s06_tpT[_sp], memory/s10_cpC: one step at tp T (sequence parallel or not),
#                      at cp C
#   comm/s02_trace     stage 02 at dp 2 on configs/small.json, 4 steps, traced
#                      (trace.rank<r>.json)
#   comm/s10_{zigzag,contiguous}: stage 10 at cp 4, seq_len 256, traced
#   comm/allreduce.txt bench_allreduce's tables on 2, 3 and 4 ranks, 1/16 to 16 MiB
#   pipe/s07, pipe/s08, pipe/s09_{gpipe,1f1b,interleaved,zb-h1}: configs/small.json at
#                      pp 2 with 4 micro-batches, 5 steps, traced; 09 interleaved with 2
#                      chunks per rank; schedule.txt: pipeline_schedule's list of actions
#   pipe/sNN_pp4_mM    stages 07 and 08 at pp 4 (4 layers), M = 1, 2, 4, 8 micro-batches
#                      of one sequence, one step (the micro-batches in flight per rank)
#   pipe/s11_{gpipe,1f1b}_ac_{none,selective,full}: stage 11 at the shape of pipe/s09_*,
#                      GPipe and 1F1B, in each activation checkpointing mode, traced
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
  -h | --help)
    print_help
    exit 0
    ;;
  -*) bad_input "unknown option '$1' (the one argument is the output directory; --help)" ;;
esac
(($# <= 1)) || bad_input "one output directory at most, not $# arguments (extra: '$2'; --help)"

if (($# == 1)); then
  [[ -n "$1" ]] || bad_input "the output directory is empty ('')"
  out="$1"  # from the current directory, as the shell it was typed in means it
else
  out="$(abs_dir "${GPT_NOTEBOOK_RUNS:-runs/notebooks}")"
fi
# Absolute, and without . or .. (links kept as links): "." must name the directory itself,
# for the checks below and for rm, which refuses to remove ".".
out="$(realpath -m -s -- "$out")"
# OUT is emptied below: anything but a directory (or nothing yet) is someone's file.
[[ ! -e "$out" && ! -L "$out" || -d "$out" ]] || bad_input "$out exists and is not a directory: give a directory"
[[ "$out" != "$GPT_ROOT" && "$out" != / ]] || bad_input "refusing to empty $out"
# Only a directory this script made (its marker inside, or, from before the marker, its
# four run directories and nothing else) or an empty one is emptied: a mistyped argument
# must not wipe, say, notebooks/, nor a directory of the user's that happens to hold an
# agree/ and a memory/.
ours=0
if [[ -f "$out/.notebook_runs" ]]; then
  ours=1
elif [[ -d "$out/agree" && -d "$out/memory" ]]; then
  ours=1
  for entry in "$out"/* "$out"/.[!.]* "$out"/..?*; do
    [[ -e "$entry" || -L "$entry" ]] || continue
    case "$(basename "$entry")" in agree | memory | comm | pipe) ;; *) ours=0 ;; esac
  done
fi
if [[ -d "$out" && -n "$(ls -A "$out")" ]] && ((!ours)); then
  bad_input "$out holds files this script did not make: refusing to empty it (give another directory)"
fi
build="$(abs_dir "$GPT_BUILD_DIR")"
cd "$GPT_ROOT"

stages=(01_single_gpu 02_ddp 03_zero1 04_zero2 05_zero3 06_tensor_parallel 07_pipeline_gpipe 08_pipeline_1f1b
  09_pipeline_interleaved 10_context_parallel 11_4d)
targets=()
for s in "${stages[@]}"; do
  [[ -x "$build/stages/$s/train" ]] || targets+=("train_$s")
done
[[ -x "$build/bin/bench_allreduce" ]] || targets+=(bench_allreduce)
[[ -x "$build/bin/prepare" ]] || targets+=(prepare)
[[ -x "$build/bin/pipeline_schedule" ]] || targets+=(pipeline_schedule)
((${#targets[@]} == 0)) || build_preset default "$GPT_BUILD_DIR" "${targets[@]}"
prepare_default_data

rm -rf "$out"
mkdir -p "$out"/{agree,memory,comm,pipe}
touch "$out/.notebook_runs"

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# CPU ranks on this machine: Open MPI's ob1 layer over shared memory, where it ends up
# anyway, named so that it does not first probe UCX, OFI and PSM (0.2 s a job).
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}" OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
start=$SECONDS
count=0

# run DIR RANKS STAGE [key=value...]: one run of STAGE on RANKS ranks into OUT/DIR, on
# the tiny config unless a config=FILE comes first among the keys.
run() {
  local dir="$out/$1" ranks=$2 stage=$3 config=configs/tiny.json sets=() kv
  shift 3
  if [[ "${1:-}" == config=* ]]; then
    config="${1#config=}"
    shift
  fi
  for kv in "$@"; do sets+=(--set "$kv"); done
  mkdir -p "$dir"
  if ! GPT_BUILD_DIR="$build" scripts/run_stage.sh "$ranks" "$stage" --config "$config" \
    --set device=cpu --set threads=1 --set sample_tokens=0 --set log_every=10 \
    --set run_dir="$dir" "${sets[@]}" > "$dir/stdout.txt" 2>&1; then
    tail -20 "$dir/stdout.txt" >&2
    die "run ${dir#"$GPT_ROOT"/} failed (log: $dir/stdout.txt)"
  fi
  count=$((count + 1))
}

log "the stages agree: 30 steps of configs/tiny.json each"
agree=(steps=30 val_every=10)
run agree/s01 1 01 "${agree[@]}"
run agree/s01_bf16 1 01 "${agree[@]}" precision=bf16
for s in 02 03 04 05; do run "agree/s$s" 2 "$s" "${agree[@]}"; done
run agree/s06 2 06 "${agree[@]}" tp=2
run agree/s07 2 07 "${agree[@]}" pp=2
run agree/s08 2 08 "${agree[@]}" pp=2
run agree/s09 2 09 "${agree[@]}" pp=2 schedule=zb-h1  # interleaving needs 4 layers; tiny has 2
run agree/s10 2 10 "${agree[@]}" cp=2
run agree/s11 4 11 "${agree[@]}" pp=2 cp=2 activation_checkpointing=full

log "memory: one step of each stage at dp 1, 2, 4"
# Batch 8, so that dp 4 still has a micro-batch of 2; buckets of at least 7,864 floats
# (0.03 MiB), less than a block of the tiny model (12,704), so that each block is a
# bucket of its own; 8 layers, so that the floors of ZeRO-2 and -3 (the embeddings and two
# blocks: gathered, or live buckets) are a third of the model, not all of it at tiny's 2.
mem=(steps=1 batch_size=8 micro_batch_size=2 val_batches=0 bucket_mb=0.03 n_layer=8)
run memory/s01_dp1 1 01 "${mem[@]}"
for dp in 1 2 4; do
  for s in 02 03 04 05; do run "memory/s${s}_dp$dp" "$dp" "$s" "${mem[@]}"; done
  run "memory/s06_dp$dp" $((2 * dp)) 06 "${mem[@]}" tp=2 zero=3
  run "memory/s10_dp$dp" $((2 * dp)) 10 "${mem[@]}" cp=2 zero=3
done
for tp in 1 2 4; do
  run "memory/s06_tp$tp" "$tp" 06 "${mem[@]}" tp="$tp"
  ((tp == 1)) || run "memory/s06_tp${tp}_sp" "$tp" 06 "${mem[@]}" tp="$tp" sequence_parallel=true
done
for cp in 1 2 4; do run "memory/s10_cp$cp" "$cp" 10 "${mem[@]}" cp="$cp"; done

log "communication: stage 02's buckets traced, stage 10's splits traced, the all-reduce benchmark"
run comm/s02_trace 2 02 config=configs/small.json steps=4 bucket_mb=1 val_batches=0 \
  checkpoint_at_end=false trace_file="$out/comm/s02_trace/trace"
for split in zigzag contiguous; do
  run "comm/s10_$split" 4 10 n_embd=64 block_size=256 seq_len=256 batch_size=1 micro_batch_size=1 \
    steps=4 val_batches=0 cp=4 cp_split="$split" \
    trace_file="$out/comm/s10_$split/trace"
done
mpirun_args=(--oversubscribe --bind-to none)
((EUID != 0)) || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for ranks in 2 3 4; do
  for mib in 0.0625 0.25 1 4 16; do
    mpirun -np "$ranks" "${mpirun_args[@]}" "$build/bin/bench_allreduce" "$mib" 5 >> "$out/comm/allreduce.txt" ||
      die "bench_allreduce on $ranks ranks, $mib MiB failed"
  done
done

log "pipelines: stages 07-09 at pp 2 traced, and the micro-batches in flight at pp 4"
# p = 2 ranks, m = 4 micro-batches of 2 sequences; 09 runs every schedule on that shape.
# Each traced directory also gets the schedule's list of actions per rank (schedule.txt),
# which names the micro-batch and chunk of the n-th forward or backward span of a rank.
p=2 m=4
pipe=(config=configs/small.json steps=5 batch_size=$((2 * m)) micro_batch_size=2 val_batches=0 "pp=$p")
traced() { # traced DIR STAGE SCHEDULE [key=value...]
  local dir=$1 stage=$2 schedule=$3 v=1 kv
  shift 3
  for kv in "$@"; do [[ "$kv" != virtual_stages=* ]] || v="${kv#virtual_stages=}"; done
  run "$dir" "$p" "$stage" "${pipe[@]}" "$@" trace_file="$out/$dir/trace"
  "$build/bin/pipeline_schedule" --schedule "$schedule" --pp "$p" --micro "$m" --virtual "$v" \
    > "$out/$dir/schedule.txt" || die "pipeline_schedule --schedule $schedule failed"
}
traced pipe/s07 07 gpipe
traced pipe/s08 08 1f1b
for schedule in gpipe 1f1b interleaved zb-h1; do
  if [[ "$schedule" == interleaved ]]; then
    traced "pipe/s09_$schedule" 09 "$schedule" schedule="$schedule" virtual_stages=2
  else
    traced "pipe/s09_$schedule" 09 "$schedule" schedule="$schedule"
  fi
done
for schedule in gpipe 1f1b; do
  for mode in none selective full; do
    traced "pipe/s11_${schedule}_ac_$mode" 11 "$schedule" schedule="$schedule" activation_checkpointing="$mode"
  done
done
for micro in 1 2 4 8; do
  for s in 07 08; do
    run "pipe/s${s}_pp4_m$micro" 4 "$s" n_layer=4 pp=4 batch_size="$micro" micro_batch_size=1 steps=1 val_batches=0
  done
done

log "$count runs and the all-reduce tables in ${out#"$GPT_ROOT"/}, $((SECONDS - start)) s"
