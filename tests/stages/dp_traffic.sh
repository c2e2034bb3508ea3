#!/usr/bin/env bash
# The data-parallel traffic of stages 02 to 05, and of the ZeRO level inside stages 06
# (tp x dp) and 10 (cp x dp), is the one their keys ask for, and the one their READMEs
# derive. A run counts what its gradient buckets and weight gathers send through the
# communicator (a CountingCommunicator around the group holding the same weights, LocalZero's
# own in 06 and 10; its splits, the threads' channels, count into the same tally) and prints it beside its
# formula (gradient_traffic, sharded_step_traffic, zero3_step_traffic;
# LocalZero::step_traffic in 06 and 10). Within tolerance a ring and the backend compute
# the same sums, and ZeRO's schedules the same model, so only this table tells them apart.
# For each run here, on 2 to 4 ranks (a group of 2 to 4; in stage 06 on tp rank 0's slice
# of the model):
#   every row      counted = formula, calls and bytes;
#   the kind       allreduce=ring and the ZeRO stages move point_to_point messages only,
#                  allreduce=backend all_reduce calls only, one per bucket;
#   one bucket     of all P parameters (bucket_mb=64): rank 0's calls and payload are the
#                  ring's closed form, computed here from the model's shape alone. For a
#                  range of the flat buffer cut along the shards, c_i its part in shard i
#                  (shard i = [floor(i P / N), floor((i+1) P / N))), rank 0's
#                      reduce-scatter  N-1 calls, (count - c_0) + (count - c_(N-1)) elements,
#                      all-gather      N-1 calls, (count - c_1) + (count - c_0) elements,
#                  sent plus received (2 (N-1)/N count in all each way when N | P).
#                  Stage 02's ring and ZeRO-1 (stage 03): one reduce-scatter and one
#                  all-gather of [0, P), so ZeRO-1 is stage 02's all-reduce to the byte;
#                  ZeRO-2 (stage 04): a reduce-scatter per micro-step, one all-gather;
#                  ZeRO-3 (stage 05): per micro-step every unit gathered in forward
#                  (embeddings, L blocks, final layernorm, in that order in the buffer),
#                  the L blocks again in backward, one reduce-scatter; nothing after the
#                  update. Gradients 4 bytes an element, gathered weights 4 (fp32) or 2 (bf16);
#   grad_accum 2   stages 02, 03: the same traffic as grad_accum 1 (only the last
#                  micro-step communicates); stages 04, 05: each micro-step reduces;
#   bf16           stage 02: the same bytes as fp32 (the gradients are fp32 in both modes);
#                  the ZeRO stages: the gathers move the bf16 weights, 2 bytes each;
#   tp 2           stage 06, tp rank 0's slice: floor(Vp/2) rows of wte (Vp the vocabulary
#                  padded to a multiple of 128), every position, half of each block's
#                  matrices and of c_attn's and c_fc's biases, the rest whole.
# Controls: the ring run judged as a backend run, the backend run as a ring run, a ZeRO-2
# run with 2 micro-steps judged as one with 1, a ZeRO-3 run as a ZeRO-2 run, a bf16 gather
# judged with 4-byte weights, and stage 06's tp 2 slice judged as the whole model must all
# be rejected.
# Usage: dp_traffic.sh TRAIN02 TRAIN03 TRAIN04 TRAIN05 TRAIN06 TRAIN10 PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN02=$1 TRAIN03=$2 TRAIN04=$3 TRAIN05=$4 TRAIN06=$5 TRAIN10=$6 PREPARE=$7 WORK=$8 ROOT=$9 MPIEXEC=${10}
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# judge LOG NP SCHEME [key=value...]: exit 0 when the table of LOG is that of SCHEME, one
# of ring, backend, zero1, zero2, zero3, over a group of NP ranks. Keys: config=PATH (the
# run was one bucket of the model PATH describes: check the closed form), weight_bytes (4),
# micro_steps (1), tp (1: the slice of tp rank 0).
judge() {
  /usr/bin/python3 - "$ROOT" "$@" << 'PY'
import json, re, sys
sys.path.insert(0, sys.argv.pop(1) + "/scripts")
from comm_table import counted_rows
log_path, n, scheme = sys.argv[1], int(sys.argv[2]), sys.argv[3]
opts = dict(kv.split("=", 1) for kv in sys.argv[4:])
weight_bytes, micro_steps = int(opts.get("weight_bytes", 4)), int(opts.get("micro_steps", 1))
tp = int(opts.get("tp", 1))
text = open(log_path).read()
rows = counted_rows(text, "data-parallel", log_path)
want_op = "all_reduce" if scheme == "backend" else "point_to_point"
if set(rows) != {want_op}:
    sys.exit(f"{log_path}: {scheme} should move {want_op} only, the table has {sorted(rows)}")
calls, nbytes = rows[want_op]
head = re.search(r"allreduce=\w+, (\d+) buckets?\)", text)  # stage 02's header names its buckets
if scheme in ("ring", "backend") and head:
    buckets = int(head.group(1))
    want_calls = 2 * (n - 1) * buckets if scheme == "ring" else buckets
    if calls != want_calls:
        sys.exit(f"{log_path}: {calls} {want_op} calls, {want_calls} expected for {buckets} bucket(s) on {n} ranks")
if "config" in opts:
    cfg = json.load(open(opts["config"]))
    V, C, T, L = cfg["vocab_size"], cfg["n_embd"], cfg["block_size"], cfg["n_layer"]
    Vp = -(-V // 128) * 128  # wte's rows: the vocabulary padded to a multiple of 128
    # tp rank 0's slice (stage 06): its floor(Vp / tp) rows of wte and every position; a
    # block's four matrices and c_attn's and c_fc's biases split, its two layernorms and two
    # row-parallel biases whole. At tp = 1: Vp C + T C and 12 C^2 + 13 C.
    E, block = Vp // tp * C + T * C, 12 * C * C // tp + 7 * C // tp + 6 * C
    P = E + L * block + 2 * C
    shard = [i * P // n for i in range(n + 1)]
    def parts(b, e):  # c_i: the part of [b, e) in shard i
        return [max(0, min(e, shard[i + 1]) - max(b, shard[i])) for i in range(n)]
    def reduce_scatter(b, e, size):  # (calls, bytes) on rank 0
        c = parts(b, e)
        return (0, 0) if n == 1 or e == b else (n - 1, size * ((e - b - c[0]) + (e - b - c[n - 1])))
    def all_gather(b, e, size):
        c = parts(b, e)
        return (0, 0) if n == 1 or e == b else (n - 1, size * ((e - b - c[1 % n]) + (e - b - c[0])))
    units = [(0, E)] + [(E + l * block, E + (l + 1) * block) for l in range(L)] + [(E + L * block, P)]
    if scheme == "backend":
        parts_of_step = [(1, 4 * P)]
    elif scheme in ("ring", "zero1"):
        parts_of_step = [reduce_scatter(0, P, 4), all_gather(0, P, weight_bytes)]
    elif scheme == "zero2":
        parts_of_step = [reduce_scatter(0, P, 4)] * micro_steps + [all_gather(0, P, weight_bytes)]
    else:  # zero3: forward every unit, backward the blocks, the gradient reduce-scattered
        micro = [all_gather(b, e, weight_bytes) for b, e in units + units[1:-1]] + [reduce_scatter(0, P, 4)]
        parts_of_step = micro * micro_steps
    want = (sum(c for c, _ in parts_of_step), sum(b for _, b in parts_of_step))
    if (calls, nbytes) != want:
        sys.exit(f"{log_path}: {calls} calls, {nbytes} bytes; the closed form for {scheme} in one bucket of P = {P}: "
                 f"{want[0]} calls, {want[1]} bytes")
print(f"ok   {log_path.split('/')[-1]}: {want_op} {calls} calls, {nbytes} bytes")
PY
}
tiny=$ROOT/configs/tiny.json
# judged_step NAME NP TRAIN (judge's arguments) -- (the run's keys): tests/trainer/common.sh
passed=()
one=(config="$tiny")  # judged against the closed form: run with bucket_mb=64, one bucket
judged_step ring3_one 3 "$TRAIN02" 3 ring "${one[@]}" -- allreduce=ring batch_size=6 bucket_mb=64
judged_step ring3_many 3 "$TRAIN02" 3 ring -- allreduce=ring batch_size=6 bucket_mb=0.01
judged_step back3_one 3 "$TRAIN02" 3 backend "${one[@]}" -- allreduce=backend batch_size=6 bucket_mb=64
judged_step back3_many 3 "$TRAIN02" 3 backend -- allreduce=backend batch_size=6 bucket_mb=0.01
judged_step ring2_one 2 "$TRAIN02" 2 ring "${one[@]}" -- allreduce=ring bucket_mb=64
judged_step ring2_accum 2 "$TRAIN02" 2 ring "${one[@]}" -- allreduce=ring bucket_mb=64 micro_batch_size=1
judged_step ring2_bf16 2 "$TRAIN02" 2 ring "${one[@]}" -- allreduce=ring bucket_mb=64 precision=bf16
judged_step zero1_3_one 3 "$TRAIN03" 3 zero1 "${one[@]}" -- batch_size=6 bucket_mb=64
judged_step zero1_3_many 3 "$TRAIN03" 3 zero1 -- batch_size=6 bucket_mb=0.01
judged_step zero1_2_accum 2 "$TRAIN03" 2 zero1 "${one[@]}" -- bucket_mb=64 micro_batch_size=1
judged_step zero1_2_bf16 2 "$TRAIN03" 2 zero1 "${one[@]}" weight_bytes=2 -- bucket_mb=64 precision=bf16
judged_step zero2_3_one 3 "$TRAIN04" 3 zero2 "${one[@]}" -- batch_size=6 bucket_mb=64
judged_step zero2_3_many 3 "$TRAIN04" 3 zero2 -- batch_size=6 bucket_mb=0.01
judged_step zero2_2_accum 2 "$TRAIN04" 2 zero2 "${one[@]}" micro_steps=2 -- bucket_mb=64 micro_batch_size=1
judged_step zero2_2_bf16 2 "$TRAIN04" 2 zero2 "${one[@]}" weight_bytes=2 -- bucket_mb=64 precision=bf16
judged_step zero3_3_one 3 "$TRAIN05" 3 zero3 "${one[@]}" -- batch_size=6 bucket_mb=64
judged_step zero3_3_many 3 "$TRAIN05" 3 zero3 -- batch_size=6 bucket_mb=0.01
judged_step zero3_2_accum 2 "$TRAIN05" 2 zero3 "${one[@]}" micro_steps=2 -- bucket_mb=64 micro_batch_size=1
judged_step zero3_2_bf16 2 "$TRAIN05" 2 zero3 "${one[@]}" weight_bytes=2 -- bucket_mb=64 precision=bf16
judged_step zero3_3_no_prefetch 3 "$TRAIN05" 3 zero3 "${one[@]}" -- batch_size=6 bucket_mb=64 zero3_prefetch=false
# Stage 06 at tp 2 x dp 2 (each zero level: the stage its README names, on tp rank 0's
# slice, about half the model) and stage 10 at cp 2 x dp 2, each zero level too (the
# reductions over the 4 ranks of dp x cp that hold the same weights).
judged_step tp_zero0 4 "$TRAIN06" 2 ring "${one[@]}" tp=2 -- tp=2 zero=0 bucket_mb=64
judged_step tp_zero1 4 "$TRAIN06" 2 zero1 "${one[@]}" tp=2 -- tp=2 zero=1 bucket_mb=64
judged_step tp_zero2 4 "$TRAIN06" 2 zero2 "${one[@]}" tp=2 micro_steps=2 -- tp=2 zero=2 bucket_mb=64 micro_batch_size=1
judged_step tp_zero3 4 "$TRAIN06" 2 zero3 "${one[@]}" tp=2 -- tp=2 zero=3 bucket_mb=64
judged_step tp_zero1_accum 4 "$TRAIN06" 2 zero1 "${one[@]}" tp=2 -- tp=2 zero=1 bucket_mb=64 micro_batch_size=1
judged_step tp_zero3_bf16_sp 4 "$TRAIN06" 2 zero3 "${one[@]}" tp=2 weight_bytes=2 -- tp=2 zero=3 bucket_mb=64 \
  precision=bf16 sequence_parallel=true
judged_step cp_zero0 4 "$TRAIN10" 4 ring "${one[@]}" -- cp=2 zero=0 bucket_mb=64 batch_size=8
judged_step cp_zero1 4 "$TRAIN10" 4 zero1 "${one[@]}" -- cp=2 zero=1 bucket_mb=64 batch_size=8
judged_step cp_zero2 4 "$TRAIN10" 4 zero2 "${one[@]}" micro_steps=2 -- cp=2 zero=2 bucket_mb=64 batch_size=8 \
  micro_batch_size=2
judged_step cp_zero3 4 "$TRAIN10" 4 zero3 "${one[@]}" micro_steps=4 -- cp=2 zero=3 bucket_mb=64 batch_size=8 \
  micro_batch_size=1
# The controls, on runs that passed their own judgement: each must fail a judgement of
# what it is not.
if passed_all back3_one ring3_one zero2_2_accum zero3_3_one zero1_2_bf16 tp_zero1; then
  control "the backend run as a ring run" back3_one 3 ring "${one[@]}"
  control "the ring run as a backend run" ring3_one 3 backend "${one[@]}"
  control "ZeRO-2 with 2 micro-steps as with 1" zero2_2_accum 2 zero2 "${one[@]}"
  control "ZeRO-3 as ZeRO-2" zero3_3_one 3 zero2 "${one[@]}"
  control "ZeRO-1's bf16 gather as one of 4-byte weights" zero1_2_bf16 2 zero1 "${one[@]}"
  control "stage 06's tp 2 slice as the whole model" tp_zero1 2 zero1 "${one[@]}"
else
  fail "the controls need ring3_one, back3_one, zero2_2_accum, zero3_3_one, zero1_2_bf16 and tp_zero1 to pass first"
fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
