#!/usr/bin/env bash
# build/bin/memory_plan predicts, from the configuration alone, what every rank of a stage
# 11 run allocates: for each layout below the plan's line of each rank (--by-rank) must
# equal, to the byte, the params, grads, optimizer and activations that rank of a real run
# allocated at its peak (its memory line after the first step), "-" exactly where the run
# prints no formula (ZeRO-3's weights with several chunks). The layouts: interleaved
# chunks with full recompute (one working set for both chunks) at ZeRO-1 and without at
# ZeRO-3, tp with sequence parallelism and cp with selective recompute in bf16 at ZeRO-2,
# ZB-H1 at ZeRO-3, GPipe with full recompute, an uneven split of 5 layers over 3 stages
# without ZeRO-3's prefetch, and uneven interleaved chunks with and without a block pool.
# Controls: a 1F1B run judged by GPipe's plan, and a ZeRO-2 run judged by ZeRO-1's, must
# be rejected. Bad input (a zero axis, a key stage 11
# does not read, a mesh that does not fit the ranks) is refused with exit status 2.
# Usage: memory_plan.sh TRAIN11 MEMORY_PLAN PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN11=$1 PLAN=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# judge NAME NP key=value...: the plan of the keys against run NAME's log; exit 0 when
# every rank's allocation is the plan's.
judge() {
  local name=$1 np=$2 sets=() kv
  shift 2
  for kv in "$@"; do sets+=(--set "$kv"); done
  "$PLAN" $(tiny_args "$WORK/data" "$WORK/$name") --ranks="$np" "${sets[@]}" --by-rank > "$WORK/$name.plan" ||
    { cat "$WORK/$name.plan"; return 1; }
  /usr/bin/python3 - "$WORK/$name.log" "$WORK/$name.plan" << 'PY'
import re, sys
log, plan = (open(p).read() for p in sys.argv[1:3])
KINDS = ("params", "grads", "optimizer", "activations")
ran = {}  # {rank: {kind: allocated bytes, or "-" where the run prints no formula}}
LINE = r"^rank (\d+) \(pipeline rank .*\n  memory peaks \(allocated \| formula\):(.*)$"
for r, kinds in re.findall(LINE, log, re.M):
    pairs = re.findall(r"(\w+) (\d+) \| (\d+|-)", kinds)
    ran[int(r)] = {k: got if formula != "-" else "-" for k, got, formula in pairs}
planned = {int(r): dict(zip(KINDS, values))
           for r, *values in re.findall(r"^rank (\d+): params (\d+|-), grads (\d+), optimizer (\d+), "
                                        r"activations (\d+) bytes$", plan, re.M)}
if not ran or sorted(ran) != sorted(planned):
    sys.exit(f"{sys.argv[1]}: ranks {sorted(ran)} ran, the plan has {sorted(planned)}")
for rank in sorted(ran):
    if ran[rank] != planned[rank]:
        sys.exit(f"{sys.argv[1]}: rank {rank} allocated {ran[rank]}, the plan says {planned[rank]}")
print(f"ok   {sys.argv[1].split('/')[-1]}: {len(ran)} ranks as planned (rank 0: {ran[0]})")
PY
}
passed=()
# planned NAME NP key=value...: a one-step run of stage 11, judged by the plan of the same keys.
planned() {
  local name=$1 np=$2
  shift 2
  one_step "$name" "$np" "$TRAIN11" "$@" || return 0
  if judge "$name" "$np" "$@"; then passed+=("$name"); else fail "$name"; fi
}
small=(micro_batch_size=1 bucket_mb=0.02)  # several micro-batches and buckets on the tiny model
planned interleaved_full_z1 4 pp=2 virtual_stages=2 n_layer=4 zero=1 activation_checkpointing=full batch_size=4 \
  "${small[@]}"
planned interleaved_z3 4 pp=2 virtual_stages=2 n_layer=4 zero=3 "${small[@]}"
planned sp_cp_selective_z2_bf16 8 pp=2 tp=2 cp=2 sequence_parallel=true activation_checkpointing=selective zero=2 \
  precision=bf16 "${small[@]}"
planned zb_h1_z3 4 pp=2 schedule=zb-h1 zero=3 batch_size=8 "${small[@]}"
planned gpipe_full 2 pp=2 schedule=gpipe activation_checkpointing=full
planned uneven_z3_no_prefetch 6 pp=3 n_layer=5 zero=3 zero3_prefetch=false "${small[@]}"
# Interleaved chunks of 2, 2, 1 and 1 layers: at m = 2 a pool of sets as deep as the
# deepest chunk would hold more than the slots (no pool); at m = 8 it holds less.
planned uneven_interleaved_m2 2 pp=2 virtual_stages=2 n_layer=6 batch_size=2 "${small[@]}"
planned uneven_interleaved_m8 2 pp=2 virtual_stages=2 n_layer=6 batch_size=8 "${small[@]}"
for case in uneven_interleaved_m2:0 uneven_interleaved_m8:2; do  # NAME:ranks whose line names a pool
  pools=$(grep -c "blocks' activations in [0-9]* shared sets" "$WORK/${case%:*}.log" || true)
  if [ "$pools" -eq "${case#*:}" ]; then echo "ok   ${case%:*}: $pools ranks with a block pool"
  else fail "${case%:*}: $pools ranks with a block pool, expected ${case#*:}"; fi
done
if passed_all gpipe_full sp_cp_selective_z2_bf16; then
  one_step onef_full 2 "$TRAIN11" pp=2 schedule=1f1b activation_checkpointing=full
  if judge onef_full 2 pp=2 schedule=gpipe activation_checkpointing=full > /dev/null 2>&1; then
    fail "control: a 1F1B run judged by GPipe's plan passed"
  else echo "ok   (control) a 1F1B run judged by GPipe's plan is rejected"; fi
  cp "$WORK/sp_cp_selective_z2_bf16.log" "$WORK/as_zero1.log"
  if judge as_zero1 8 pp=2 tp=2 cp=2 sequence_parallel=true activation_checkpointing=selective zero=1 \
    precision=bf16 "${small[@]}" > /dev/null 2>&1; then
    fail "control: a ZeRO-2 run judged by ZeRO-1's plan passed"
  else echo "ok   (control) a ZeRO-2 run judged by ZeRO-1's plan is rejected"; fi
else
  fail "the controls need gpipe_full and sp_cp_selective_z2_bf16 to pass first"
fi
# Bad input: a clear refusal, exit 2, as the trainer's.
refused() {  # refused NEEDLE ARGS...
  local needle=$1 status=0
  shift
  "$PLAN" --config "$ROOT/configs/tiny.json" "$@" > "$WORK/refused.txt" 2>&1 || status=$?
  if [ "$status" -eq 2 ] && grep -qF -- "$needle" "$WORK/refused.txt"; then echo "ok   refused: $needle"
  else fail "memory_plan $* exited $status: $(head -c 300 "$WORK/refused.txt")"; fi
}
refused "--ranks: '0' is not a positive integer" --ranks 0
refused "2 ranks per model replica, but the job has 3 ranks" --set pp=2 --ranks 3
refused "n_layer=2 is less than pp=3" --set pp=3
refused "activation_checkpointing=full with schedule=zb-h1" --set pp=2 --set schedule=zb-h1 \
  --set activation_checkpointing=full
refused "unknown argument '--bogus'" --bogus
refused "--ranks given twice" --set pp=2 --ranks 2 --ranks=4
# A model of absurd width: its byte counts would wrap (size_t), so no plan is printed.
refused "past 2^60 (1 EiB)" --set n_embd=700000000 --set n_head=1
refused "tp=0" --set tp=0
refused "allreduce=backend: stage 11_4d does not read the key" --set allreduce=backend
# A plan is for other machines too: a micro-batch whose logits alone (1.7 TB) exceed this
# machine is planned, where the trainer refuses it here (its control).
big=(--config "$ROOT/configs/gpt2-124m.json" --set micro_batch_size=4096 --set batch_size=4096 --set pp=2)
if "$PLAN" "${big[@]}" > "$WORK/big.plan" 2>&1 && grep -q "^  1  .*+head (1)" "$WORK/big.plan"; then
  echo "ok   a plan larger than this machine is made"
else fail "a plan larger than this machine: $(tail -1 "$WORK/big.plan")"; fi
status=0
"$TRAIN11" "${big[@]}" --set device=cpu --set sample_tokens=0 --set tokenizer=bytes > "$WORK/big.log" 2>&1 ||
  status=$?
if [ "$status" -eq 2 ] && grep -q "more than the .* of this machine" "$WORK/big.log"; then
  echo "ok   (control) the trainer refuses it on this machine"
else fail "control: the trainer ran the plan larger than this machine (exit $status)"; fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
