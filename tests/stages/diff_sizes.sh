#!/usr/bin/env bash
# Neighbouring stages' drivers differ by the technique, not by copied code: the changed
# lines of `scripts/diff_stages.sh --count A B` for each pair of neighbouring stages on
# main stay within the budget below (what the technique needs, with room for comments).
# A driver that copies back shared code (validation, checkpoints, the sample: the driver's
# job, common/driver.h) blows the budget. Each budget is the pair's count when it was last
# set (2026-12-02) with about 5 % room or a few lines (under 15), so that a line of
# wording does not fail the test, while the smallest helper a driver could copy back (the
# checkpoint lambda, the sample: 15 lines and more) does. Self-checks: a stage against
# itself is 0 lines, and a planted change is counted line for line, blank lines and lines
# that begin with - or + too.
# Usage: diff_sizes.sh ROOT
set -euo pipefail
ROOT=$1
DIFF="$ROOT/scripts/diff_stages.sh"
declare -A budget=(
  [01_single_gpu:02_ddp]=280            # the single-device driver to the shared multi-rank one (its stop too), its counted traffic, its data checked and its checkpoint loaded by every rank alike
  [02_ddp:03_zero1]=105
  [03_zero1:04_zero2]=75
  [04_zero2:05_zero3]=85
  [05_zero3:06_tensor_parallel]=195     # the tp communicator, the model as a slice, the store by `zero`
  [06_tensor_parallel:07_pipeline_gpipe]=155   # the pipeline group, a stage of the model, the executor, the tied wte; its counted pp traffic for 06's dp table
  [07_pipeline_gpipe:08_pipeline_1f1b]=25      # the schedule and its in-flight bound
  [08_pipeline_1f1b:09_pipeline_interleaved]=165  # v chunks per rank: a vector of stage-08 models and their stores, one packed checkpoint, the chunks' tied wte and dp traffic counted
  [07_pipeline_gpipe:10_context_parallel]=195  # while 08 and 09 have no driver
  [08_pipeline_1f1b:10_context_parallel]=200
  [09_pipeline_interleaved:10_context_parallel]=240  # back from chunks to one model, and the cp split (its tp table, rank 0's as stage 06's)
  [06_tensor_parallel:10_context_parallel]=130
  [10_context_parallel:11_4d]=285               # back to stage 09's chunks and schedules (and its counted pipeline traffic; the dp and tp tables and the memory formula by rank), keeping the cp split
)
# Pairs a reader is pointed to besides the neighbours: stage 11 is stage 09's driver with
# stage 10's context split and the recompute key.
extra_pairs=(09_pipeline_interleaved:11_4d)
budget[09_pipeline_interleaved:11_4d]=170  # with its header naming an axis of 1 plainly, its ring attention counted as stage 10 counts it, its dp traffic over dp x cp, its tp traffic on B T/cp rows with recompute
failures=0
[ "$(bash "$DIFF" --count 02 02)" = 0 ] || { echo "FAIL: a stage against itself is not 0 lines"; failures=1; }
# The planted change, in a copy of the scripts beside two stages of its own: one line
# changed from "--i;" to "++i;", one removed, and one blank line added: 4 changed lines.
planted=$(mktemp -d)
trap 'rm -rf "$planted"' EXIT
cp -r "$ROOT/scripts" "$planted/scripts"
mkdir -p "$planted/stages/01_a" "$planted/stages/02_b"
printf 'int a;\n--i;\nint c;\n' > "$planted/stages/01_a/train.cpp"
printf 'int a;\n\n++i;\n' > "$planted/stages/02_b/train.cpp"
[ "$(bash "$planted/scripts/diff_stages.sh" --count 01 02)" = 4 ] ||
  { echo "FAIL: a planted change of 4 lines counts $(bash "$planted/scripts/diff_stages.sh" --count 01 02)"; failures=1; }
stages=()  # the stages with a driver (a stage still being written may have none yet)
for d in $(cd "$ROOT/stages" && ls -d [0-9][0-9]_* | sort); do
  [ -f "$ROOT/stages/$d/train.cpp" ] && stages+=("$d")
done
for ((i = 1; i < ${#stages[@]}; ++i)); do
  a=${stages[i - 1]} b=${stages[i]}
  n=$(bash "$DIFF" --count "$a" "$b")
  limit=${budget[$a:$b]:-}
  if [ -z "$limit" ]; then
    echo "FAIL: $a -> $b has no budget in this test ($n changed lines): add one"; failures=1; continue
  fi
  if [ "$n" -le "$limit" ]; then echo "ok   $a -> $b: $n changed driver lines (budget $limit)"
  else echo "FAIL $a -> $b: $n changed driver lines, budget $limit"; failures=1; fi
done
for pair in "${extra_pairs[@]}"; do
  a=${pair%%:*} b=${pair##*:}
  [ -f "$ROOT/stages/$a/train.cpp" ] && [ -f "$ROOT/stages/$b/train.cpp" ] || continue
  n=$(bash "$DIFF" --count "$a" "$b")
  if [ "$n" -le "${budget[$pair]}" ]; then echo "ok   $a -> $b: $n changed driver lines (budget ${budget[$pair]})"
  else echo "FAIL $a -> $b: $n changed driver lines, budget ${budget[$pair]}"; failures=1; fi
done
exit $failures
