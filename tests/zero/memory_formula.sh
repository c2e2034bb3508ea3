#!/usr/bin/env bash
# Memory: the per-rank bytes of parameters, gradients and optimizer state that stages
# 02-05 (and 05 without its prefetch, zero3_prefetch=false) allocate (rank 0's "mem" in metrics.jsonl) equal each stage's formula exactly,
# plus the stated fixed buffers (live gradient buckets, gathered units), at dp = 4.
# Two steps of a small model per stage and shape, with a validation pass after each
# (an evaluation must not raise any peak); memory_formula.py derives the expected
# bytes from the shape and prints the table.
#
# Usage: memory_formula.sh BIN02 BIN03 BIN04 BIN05 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
BIN02=$1 BIN03=$2 BIN04=$3 BIN05=$4 PREPARE=$5 WORK=$6 ROOT=$7 MPIEXEC=$8
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"

DP=4 VOCAB=256 BLOCK=32
# PRECISION:N_LAYER:N_EMBD:N_HEAD:BUCKET_MB. The fp32 shape has the embeddings in a
# bucket of their own; the bf16 one has P not divisible by 4 (uneven shards) and a
# bucket holding both the embeddings and block 0 (buckets: final+4+3, 2+1, 0+embeddings).
# The one-block shape: ZeRO-3 prefetches the final layernorm while the block computes.
CASES="fp32:4:64:4:0.1 bf16:5:66:6:0.25 fp32:1:64:4:0.1"
declare -A BINS=([02]=$BIN02 [03]=$BIN03 [04]=$BIN04 [05]=$BIN05 [05np]=$BIN05)
declare -A KEYS=([05np]="--set zero3_prefetch=false")  # stage 05 without its prefetch

specs=()
for case in $CASES; do
  IFS=: read -r prec layers embd heads bucket <<< "$case"
  for stage in 02 03 04 05 05np; do
    dir="$WORK/s${stage}_${prec}_L$layers"
    "$MPIEXEC" -np $DP --oversubscribe "${BINS[$stage]}" $(tiny_args "$WORK/data" "$dir") \
      --set n_layer="$layers" --set n_embd="$embd" --set n_head="$heads" --set vocab_size=$VOCAB \
      --set block_size=$BLOCK --set seq_len=$BLOCK --set precision="$prec" --set bucket_mb="$bucket" \
      --set steps=2 --set batch_size=8 --set micro_batch_size=2 --set val_every=1 --set val_batches=2 \
      --set sample_tokens=0 --set checkpoint_at_end=false ${KEYS[$stage]:-} > "$dir.log" 2>&1 \
      || { echo "FAIL: stage $stage $prec run"; tail -20 "$dir.log"; exit 1; }
    specs+=("$stage:$prec:$layers:$embd:$bucket:$dir")
  done
done
/usr/bin/python3 "$ROOT/tests/zero/memory_formula.py" --dp $DP --vocab $VOCAB --block-size $BLOCK "${specs[@]}"
