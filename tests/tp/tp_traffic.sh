#!/usr/bin/env bash
# The tensor-parallel traffic of the stages after 06 (07, 08, 09, 10, 11) is the one their
# model part, schedule and recompute imply. Each run counts what passes through its tp
# communicator (a CountingCommunicator) and prints it beside stage 06's tp_step_traffic of
# the rank's layers (tp_budget.h). Written out here from the run's shape alone, for a rank
# running k blocks, with e = 1 where it runs layer 0 (the embedding) and h = 1 where it runs
# the last (the head), m micro-batches of N = B T / cp rows, one N x C tensor
# moving a N C bytes (a = 4 in fp32, 2 in bf16):
#   without sequence parallelism  all-reduce      m (e + 2 f k + 2 k + h) calls
#   with it                       reduce-scatter  as many calls
#                                 all-gather      m (2 f k + h + 4 k + e) calls
#                                 all-reduce      s (k + h) calls, s 4 (4 C k + 2 C h) bytes
# where f is a block's forwards per micro-batch (2 under full recompute: the forward runs
# again before the backward; 1 under selective, which rebuilds only what needs no
# communication), s the layernorm sums of a step (m under ZeRO-2 and -3, else 1); and at
# the head, with tp > 1, the vocabulary-parallel cross-entropy: m all-gathers of 4 N tp
# bytes and m all-reduces of 4 2N. A pipeline rank's chunk c is virtual stage c p + r of
# v p, each L / (v p) blocks; a split backward (ZB-H1) moves what one backward moves.
# For each run every rank's line (stage 10 prints rank 0's table alone), and rank 0's table
# by operation, equal this closed form (and the run's own formula). One run has seq_len
# below block_size (N counts the tokens of a sequence, not the model's context), one runs
# dp 2 (m = batch / (B dp)) with ZB-H1, sp and ZeRO-2 (the layernorm sums every micro-batch,
# from the weight halves).
# Controls, each on a run that passed: full recompute judged without it, selective judged
# as full, ZeRO-2's layernorm sums judged once a step, a pipeline stage judged as the whole
# model: all rejected.
# Usage: tp_traffic.sh TRAIN07 TRAIN08 TRAIN09 TRAIN10 TRAIN11 PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN07=$1 TRAIN08=$2 TRAIN09=$3 TRAIN10=$4 TRAIN11=$5 PREPARE=$6 WORK=$7 ROOT=$8 MPIEXEC=$9
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# judge LOG key=value...: exit 0 when the run's tensor-parallel counts equal the closed form
# above. Keys, the run's shape: dp, pp, cp, tp, v (1), m (micro-batches, 1), L (n_layer,
# 2), B (micro_batch_size, 2), T (seq_len, tiny.json's), a (activation bytes, 4), sp (0/1),
# zero (0), full (0/1: full recompute); by_rank=0 where the stage prints rank 0's table
# alone (stage 10); and for the controls: whole_model=1.
judge() {
  /usr/bin/python3 - "$ROOT" "$@" << 'PY'
import json, sys
sys.path.insert(0, sys.argv[1] + "/scripts")
from comm_table import read_by_rank, read_comm_table
cfg = json.load(open(sys.argv[1] + "/configs/tiny.json"))
log_path = sys.argv[2]
o = {k: int(v) for k, v in (kv.split("=", 1) for kv in sys.argv[3:])}
dp, pp, cp, tp, v, m = (o.get(k, 1) for k in ("dp", "pp", "cp", "tp", "v", "m"))
L, B, a, sp = o.get("L", 2), o.get("B", 2), o.get("a", 4), o.get("sp", 0)
zero, full = o.get("zero", 0), o.get("full", 0)
C, T = cfg["n_embd"], o.get("T", cfg["seq_len"])
N = B * T // cp
text = open(log_path).read()


def closed_form(world_rank):
    """{operation: (calls, bytes)} of this rank's step."""
    r = world_rank // (tp * cp) % pp  # rank = ((dp_i pp + pp_i) cp + cp_i) tp + tp_i (common/mesh.h)
    ops = {}

    def add(op, calls, nbytes):
        c, b = ops.get(op, (0, 0))
        ops[op] = (c + calls, b + nbytes)

    chunks = [(L, 1, 1)] if o.get("whole_model") else \
        [(L // (v * pp), int(c * pp + r == 0), int(c * pp + r == v * pp - 1)) for c in range(v)]
    f = 2 if full else 1
    s = m if zero >= 2 else 1
    for k, e, h in chunks:
        reductions = m * (e + 2 * f * k + 2 * k + h)
        if not sp:
            add("all_reduce", reductions, reductions * a * N * C)
        else:
            add("reduce_scatter", reductions, reductions * a * N * C)
            gathers = m * (2 * f * k + h + 4 * k + e)
            add("all_gather", gathers, gathers * a * N * C)
            add("all_reduce", s * (k + h), s * 4 * (4 * C * k + 2 * C * h))
        if h:
            add("all_gather", m, m * 4 * N * tp)
            add("all_reduce", m, m * 4 * 2 * N)
    return {op: cb for op, cb in ops.items() if cb != (0, 0)}


try:
    table = read_comm_table(text, "tensor-parallel", log_path)
    by_rank = read_by_rank(text, "tensor-parallel", log_path) if o.get("by_rank", 1) else {}
except ValueError as e:
    sys.exit(str(e))
rank0 = {op: (row["calls"], row["bytes"]) for op, row in table.items()}
for op, row in table.items():
    if (row["calls"], row["bytes"]) != (row["formula_calls"], row["formula_bytes"]):
        sys.exit(f"{log_path}: rank 0's {op} counted {row['calls']} calls {row['bytes']} bytes, "
                 f"formula {row['formula_calls']} calls {row['formula_bytes']} bytes")
if rank0 != closed_form(0):
    sys.exit(f"{log_path}: rank 0 counted {rank0}, its closed form {closed_form(0)}")
world = dp * pp * cp * tp
if by_rank and sorted(by_rank) != list(range(world)):
    sys.exit(f"{log_path}: lines for ranks {sorted(by_rank)}, not one for each of the {world}")
for rk, (calls, calls_f, nbytes, nbytes_f) in by_rank.items():
    want = closed_form(rk)
    want = (sum(c for c, _ in want.values()), sum(b for _, b in want.values()))
    if (calls, nbytes) != (calls_f, nbytes_f) or (calls, nbytes) != want:
        sys.exit(f"{log_path}: rank {rk} counted {calls} calls {nbytes} bytes, formula {calls_f} calls "
                 f"{nbytes_f} bytes, closed form {want[0]} calls {want[1]} bytes")
ops = ", ".join(f"{op} {c} calls {b} bytes" for op, (c, b) in sorted(rank0.items()))
print(f"ok   {log_path.split('/')[-1]}: every count is its formula and its closed form (rank 0: {ops})")
PY
}
passed=()
judged_step gpipe 4 "$TRAIN07" pp=2 tp=2 m=4 B=1 -- pp=2 tp=2 micro_batch_size=1
judged_step 1f1b_sp_z2 4 "$TRAIN08" pp=2 tp=2 m=4 B=1 sp=1 zero=2 -- pp=2 tp=2 sequence_parallel=true zero=2 \
  micro_batch_size=1
judged_step interleaved_sp 4 "$TRAIN09" pp=2 tp=2 v=2 L=4 m=4 B=1 sp=1 zero=1 -- pp=2 tp=2 virtual_stages=2 \
  n_layer=4 sequence_parallel=true zero=1 micro_batch_size=1 batch_size=4
judged_step zbh1_sp 4 "$TRAIN09" pp=2 tp=2 m=4 B=1 sp=1 -- pp=2 tp=2 schedule=zb-h1 sequence_parallel=true \
  micro_batch_size=1 batch_size=4
judged_step zbh1_sp_z2_dp2 8 "$TRAIN09" dp=2 pp=2 tp=2 m=4 B=1 sp=1 zero=2 T=16 -- pp=2 tp=2 schedule=zb-h1 \
  sequence_parallel=true zero=2 micro_batch_size=1 batch_size=8 seq_len=16
judged_step cp_sp_z2 4 "$TRAIN10" cp=2 tp=2 m=2 sp=1 zero=2 by_rank=0 -- cp=2 tp=2 sequence_parallel=true zero=2
judged_step 4d_full 8 "$TRAIN11" pp=2 cp=2 tp=2 m=4 B=1 sp=1 full=1 -- pp=2 cp=2 tp=2 schedule=1f1b \
  sequence_parallel=true activation_checkpointing=full micro_batch_size=1
judged_step 4d_selective_bf16 4 "$TRAIN11" pp=2 tp=2 m=4 B=1 a=2 -- pp=2 tp=2 schedule=zb-h1 precision=bf16 \
  activation_checkpointing=selective micro_batch_size=1 batch_size=4
# The controls, on runs that passed their own judgement.
if passed_all 4d_full 4d_selective_bf16 1f1b_sp_z2 gpipe; then
  control "full recompute judged without it" 4d_full pp=2 cp=2 tp=2 m=4 B=1 sp=1
  control "selective recompute judged as full" 4d_selective_bf16 pp=2 tp=2 m=4 B=1 a=2 full=1
  control "ZeRO-2's layernorm sums judged once a step" 1f1b_sp_z2 pp=2 tp=2 m=4 B=1 sp=1 zero=1
  control "a stage judged as the whole model" gpipe pp=2 tp=2 m=4 B=1 whole_model=1
else
  fail "the controls need 4d_full, 4d_selective_bf16, 1f1b_sp_z2 and gpipe to pass first"
fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
