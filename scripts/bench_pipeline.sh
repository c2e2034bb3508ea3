#!/usr/bin/env bash
# The pipeline bubble on CPU ranks, measured against theory, for every schedule of
# stages 07-09: GPipe (07), 1F1B (08), interleaved 1F1B with 2 chunks per rank and ZB-H1
# (09), at p in {2, 4} and m in {4, 8, 16}. Each run prints its measured bubble per rank
# (1 - compute time / the step's makespan, pipeline_report.h) and the theory for the
# pipeline's measured mean forward, backward and weight-half times; this script collects
# the mean over the ranks into one table.
#
#   scripts/bench_pipeline.sh [P ...]     (default: 2 4; uses build/, GPT_BUILD_DIR overrides)
#
# GPT_BENCH_MICRO_BATCHES (default "4 8 16") picks the micro-batch counts m to sweep.
#
# CPU ranks (device=cpu, also in a build with CUDA). Model: configs/small.json with 8 layers of width 384 (6 heads; GPT_BENCH_WIDTH) and sequences of 32
# tokens, micro-batches of 4 sequences: the matmuls dominate a layer's time, as on a GPU.
# One thread per rank. A run with more ranks than cores measures the contention for the
# cores too (the table says how many cores there are), unless GPT_BENCH_CPU_SHARE caps
# every rank at that share of a core (scripts/cpu_share.sh; root and the cgroup cpu
# controller): with p ranks x share <= cores no rank waits for a core, each computes as
# on a dedicated core of that speed, and the bubble, a ratio of times, is the schedule's.
# The cap is paid out in 10 ms periods, so a capped rank's actions must be long next to
# that: GPT_BENCH_WIDTH=768 (12 heads) makes each layer about 4 times the work of the
# default 384. GPT_BENCH_LAYERS (default 8) sets the depth: at p = 4 with 2 chunks a rank,
# 8 layers leave one layer a chunk, and the first and last chunks' embedding and head
# then weigh a few per cent more than the others, an imbalance the theory (for the mean
# costs) leaves out; 16 layers halve it. Wider layers help at p = 2 too: every action
# grows next to the time a run spends outside them (messages, the barrier), which
# otherwise decides zb-h1's ratio where both bubbles are a few points. On 2 cores:
#   GPT_BENCH_WIDTH=768 scripts/bench_pipeline.sh 2
#   GPT_BENCH_CPU_SHARE=0.5 GPT_BENCH_WIDTH=768 GPT_BENCH_LAYERS=16 scripts/bench_pipeline.sh 4
#
# Repeats: each configuration runs GPT_BENCH_REPEATS times (default 3) for 11 steps (10
# measured); the table gives the mean of the runs and their range. A shared machine's
# cores slow down now and then for a fraction of a second (a plain loop timed on the
# 2-core CI machine runs 30 % slower in such stretches), and a slow stretch on one rank
# makes the others wait: idle time the schedule did not cause. The tighter a schedule,
# the more of it becomes bubble, so single short runs scatter by a point or two. The
# last column is zb-h1's mean bubble over 1f1b's at the same (p, m).
set -euo pipefail
# The whole script is one block, read before it runs: a sweep takes up to an hour, and bash
# reads a plain script as it goes, so an edit to this file during a run would otherwise
# run a mix of the old and the new text.
{
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The arguments are the pipeline sizes P, each a positive whole number.
for p in "$@"; do
  case "$p" in
    -h | --help) print_help; exit 0 ;;
  esac
  [[ "$p" =~ ^[1-9][0-9]*$ ]] ||
    bad_input "argument '$p': not a pipeline size P (scripts/bench_pipeline.sh [P ...]; --help)"
done
# Checked before the build and the data are: a bad size is the caller's to fix first.
layers=${GPT_BENCH_LAYERS:-8}
[[ "$layers" =~ ^[1-9][0-9]*$ ]] || bad_input "GPT_BENCH_LAYERS must be a positive integer, not '$layers'"
ranks=("$@")
((${#ranks[@]} > 0)) || ranks=(2 4)
# A stage holds a layer at least, and a machine runs 8 ranks a core at most (lib.sh).
for p in "${ranks[@]}"; do
  ((${#p} <= 6 && p <= layers)) ||
    bad_input "P=$p: a pipeline of more stages than GPT_BENCH_LAYERS=$layers layers (a stage holds one at least)"
  if why="$(too_many_ranks P "$p")"; then bad_input "$why"; fi
done
cd "$GPT_ROOT"
bin="$(abs_dir "$GPT_BUILD_DIR")/stages"
for s in 07_pipeline_gpipe 08_pipeline_1f1b 09_pipeline_interleaved; do require_built_and_fortunes "$bin/$s/train"; done
python="$(command -v /usr/bin/python3 || command -v python3 || true)"
[[ -n "$python" ]] || die "python3 not found"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
width=${GPT_BENCH_WIDTH:-384}
[[ "$width" =~ ^[1-9][0-9]*$ ]] && ((width % 64 == 0)) || bad_input "GPT_BENCH_WIDTH must be a multiple of 64 (heads of 64), not '$width'"
model=(--set device=cpu --set n_layer="$layers" --set n_embd="$width" --set n_head=$((width / 64)) --set seq_len=32 --set micro_batch_size=4 --set threads=1
       --set steps=11 --set val_batches=0 --set sample_tokens=0 --set checkpoint_at_end=false)
repeats=${GPT_BENCH_REPEATS:-3}
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || bad_input "GPT_BENCH_REPEATS must be a positive integer, not '$repeats'"
read -ra micro_batches <<< "${GPT_BENCH_MICRO_BATCHES:-4 8 16}"
for m in "${micro_batches[@]}"; do
  [[ "$m" =~ ^[1-9][0-9]*$ ]] || bad_input "GPT_BENCH_MICRO_BATCHES must list positive integers, not '$m'"
done
share=${GPT_BENCH_CPU_SHARE:-}
capped=()
if [[ -n $share ]]; then
  capped=("$GPT_ROOT/scripts/cpu_share.sh" "$share")
  "${capped[@]}" true || die "GPT_BENCH_CPU_SHARE=$share: scripts/cpu_share.sh cannot cap a rank here"
fi
echo "pipeline bubble, CPU ranks ($(getconf _NPROCESSORS_ONLN) cores$([[ -n $share ]] && echo ", each rank capped at $share of a core")), $layers layers of width $width, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)," \
  "mean of $repeats runs of 10 measured steps each"
printf '%-12s %2s %3s %2s | %9s %13s %9s %7s | %-9s | %s\n' schedule p m v measured "(range)" theory diff "zb/1f1b" \
  "per rank (last run)"
for p in "${ranks[@]}"; do
  for m in "${micro_batches[@]}"; do
    mean_1f1b=""
    for sched in gpipe 1f1b interleaved zb-h1; do
      v=1 stage=09_pipeline_interleaved extra=(--set schedule="$sched")
      case $sched in
        gpipe) stage=07_pipeline_gpipe extra=() ;;
        1f1b) stage=08_pipeline_1f1b extra=() ;;
        interleaved) v=2 extra+=(--set virtual_stages=2) ;;
      esac
      measured=() theory=()
      for ((run = 1; run <= repeats; ++run)); do
        log="$work/$sched-$p-$m-$run.log"
        mpirun -np "$p" --oversubscribe --bind-to none "${capped[@]}" "$bin/$stage/train" --config configs/small.json "${model[@]}" \
          --set pp="$p" --set batch_size=$((4 * m)) "${extra[@]}" --set run_dir="$work/$sched-$p-$m-$run" > "$log" 2>&1 ||
          { tail -20 "$log"; die "run $sched p=$p m=$m failed"; }
        line=$(grep -m1 "pipeline bubble" "$log")
        measured+=("$(sed -E 's/.*\| mean ([0-9.]+)%.*/\1/' <<< "$line")")
        theory+=("$(sed -E 's/.*\| theory ([0-9.]+)%.*/\1/' <<< "$line")")
        per_rank=$(sed -E 's/.*measured\): (.*) \| mean.*/\1/' <<< "$line")
      done
      # The runs' mean, range and mean theory, their difference, and for zb-h1 its ratio
      # to 1f1b's mean (argument 3, the 1f1b row printed just before).
      read -r mean low high theory_mean diff ratio < <("$python" -c '
import sys
runs = [float(x) for x in sys.argv[1].split()]
theory = [float(x) for x in sys.argv[2].split()]
mean, theory_mean = sum(runs) / len(runs), sum(theory) / len(theory)
ratio = f"{mean / float(sys.argv[3]):.2f}" if sys.argv[3] else "-"
print(mean, min(runs), max(runs), theory_mean, mean - theory_mean, ratio)' "${measured[*]}" "${theory[*]}" \
        "$([[ $sched == zb-h1 ]] && echo "$mean_1f1b")")
      [[ $sched == 1f1b ]] && mean_1f1b=$mean
      [[ $ratio == - ]] && ratio=""
      printf '%-12s %2d %3d %2d | %8.1f%% %13s %8.1f%% %+6.1f | %-9s | %s\n' "$sched" "$p" "$m" "$v" "$mean" \
        "($(printf '%.1f-%.1f' "$low" "$high"))" "$theory_mean" "$diff" "$ratio" "$per_rank"
    done
  done
done
exit
}
