#!/usr/bin/env bash
# Bad input to stage 06 (and the keys stage 06 adds, given to stage 05): each case must
# exit with status 2 and a message naming the key, under mpirun as a user would run it.
# Usage: bad_input_tp.sh TRAIN06 TRAIN05 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN06=$1 TRAIN05=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
failures=0

expect_refused "n_head not divisible by tp"   "tp=3 does not divide n_head=4"      3 "$TRAIN06" tp=3
expect_refused "tp greater than n_head"       "tp=4 is greater than n_head=2"      4 "$TRAIN06" tp=4 n_head=2
expect_refused "seq_len not divisible (sp)"   "seq_len=32 does not divide by tp=3" 3 "$TRAIN06" tp=3 n_head=12 n_embd=48 sequence_parallel=true
expect_refused "tp x dp not the ranks"        "but the job has 3 ranks"            3 "$TRAIN06" tp=2
expect_refused "dp x tp not the ranks"        "dp=2 x tp=2"                        2 "$TRAIN06" tp=2 dp=2
expect_refused "cp_split without cp"          "cp_split=contiguous: stage 06"      2 "$TRAIN06" tp=2 cp_split=contiguous
expect_refused "comm timeout below 1 s"       "comm_timeout_s=0.5"                 2 "$TRAIN06" tp=2 comm_timeout_s=0.5
expect_refused "zero out of range"            "zero=4: must be 0, 1, 2 or 3"       2 "$TRAIN06" tp=2 zero=4
expect_refused "stage 05 refuses zero"        "zero=1: stage 05_zero3"             2 "$TRAIN05" zero=1
expect_refused "stage 05 refuses sp"          "sequence_parallel=true: stage 05_zero3" 2 "$TRAIN05" sequence_parallel=true
expect_refused "stage 05 refuses tp"          "tp=2: stage 05_zero3"               2 "$TRAIN05" tp=2
expect_refused "no ZeRO-3 to stop prefetching" "zero3_prefetch=false: stage 06_tensor_parallel at zero=1" 2 "$TRAIN06" \
  tp=2 zero=1 zero3_prefetch=false
# A checkpoint whose last tensor (ln_f.bias, in rank 1's flat shard alone) fails its
# checksum: every rank stops with rank 1's error, which rank 1 prints naming itself once.
"$TRAIN06" $(tiny_args "$WORK/data" "$WORK/ckpt_run") --set steps=1 --set sample_tokens=0 > "$WORK/ckpt_run.log" 2>&1
cp -r "$WORK/ckpt_run/step_00000001" "$WORK/corrupt"
size=$(stat -c %s "$WORK/corrupt/param.bin")
printf '\x7f' | dd of="$WORK/corrupt/param.bin" bs=1 seek=$((size - 2)) conv=notrunc status=none
expect_refused "one rank's shard corrupt"     "rank 1: tensor param/ln_f.bias in"  2 "$TRAIN06" tp=2 "resume=$WORK/corrupt"
# Rank 1's trace file is something else: every rank stops, rank 1's file is kept as it
# was, and rank 0 (whose own path was free) leaves no empty trace behind.
printf 'not a trace\n' > "$WORK/tr.rank1.json"
expect_refused "rank 1's trace_file not a trace" "tr.rank1.json' exists and is not a trace" 2 "$TRAIN06" tp=2 \
  "trace_file=$WORK/tr"
[ "$(cat "$WORK/tr.rank1.json")" = "not a trace" ] || { echo "FAIL: rank 1's file was changed"; failures=$((failures + 1)); }
[ ! -e "$WORK/tr.rank0.json" ] || { echo "FAIL: rank 0 left an empty $WORK/tr.rank0.json"; failures=$((failures + 1)); }

[ "$failures" -eq 0 ] && echo "all bad-input cases of stage 06 refused as they must be" || exit 1
