#!/usr/bin/env bash
# The data-parallel traffic of the pipeline stages (07, 08, 09, 11) is the one their ZeRO
# level and schedule imply. Each run counts what its stores send over dp (dp x cp in stage
# 11): each chunk's LocalZero wraps its dp group in a CountingCommunicator (whose splits, the
# threads' channels, count into the same tally) and counts its step, the chunks' counts are
# summed (chunks_dp_counted), and the run prints every rank's count beside
# LocalZero::step_traffic's formula. A pipeline rank holds its stage's layers only, and two things differ from a
# whole model (tests/stages/dp_traffic.sh):
#   the tied wte   the first and the last stage each hold wte, and sum its gradient once
#                  a step (tied_embedding.h): ZeRO-2 and -3 then reduce its bucket (the
#                  embeddings' unit alone) once a step, not once a micro-batch;
#   ZeRO-3         which units a pass gathers depends on the pass before it: a forward
#                  keeps the embeddings and the final layernorm for the next pass, so a
#                  pass gathers every block, the embeddings unless a forward came just
#                  before it, and the final layernorm unless it is a backward that follows
#                  a forward. A schedule runs its passes in its own order: GPipe all m
#                  forwards then all m backwards, 1F1B on pp rank r min(p - r - 1, m)
#                  forwards, then forward and backward in turn, then the rest backwards;
#                  ZB-H1 1F1B's order with each backward split in two passes, B_i at
#                  1F1B's place and W_(i-r) after it (from i = r on), the r W's left at the
#                  end (schedule_zero_bubble.h).
# For each run, on 4 to 8 ranks, every rank's line: counted = formula. For GPipe, 1F1B and
# ZB-H1 runs (the schedules written out above) every rank's count also equals its closed form,
# computed here from the run's shape alone, with every gradient in one bucket
# (bucket_mb=64) besides the embeddings' (ZeRO-2 and -3), for a rank at group index g of n
# and a range [b, e) of its local buffer cut along the n shards (c_i its part in shard i):
#     reduce-scatter  n-1 calls, (e-b - c_g) + (e-b - c_(g-1)) elements,
#     all-gather      n-1 calls, (e-b - c_(g+1)) + (e-b - c_g) elements
# (ring_allreduce.h), gradients 4 bytes an element, weights 4 (fp32) or 2 (bf16). A
# stage's local buffer: on the first stage wte (V/tp rows, V padded to 128) and wpe, on
# the last wte and, at its end, ln_f; L/p blocks between.
# Controls: ZeRO-2 with 2 micro-batches judged with the wte reduced every micro-batch,
# 1F1B's ZeRO-3 judged in GPipe's order, ZB-H1's in 1F1B's (a backward as one pass), and a
# stage judged as the whole model, must be rejected.
# Usage: dp_traffic.sh TRAIN07 TRAIN08 TRAIN09 TRAIN11 PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN07=$1 TRAIN08=$2 TRAIN09=$3 TRAIN11=$4 PREPARE=$5 WORK=$6 ROOT=$7 MPIEXEC=$8
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# judge LOG SCHEDULE ZERO [key=value...]: exit 0 when every rank's line in LOG has its
# count equal to its formula and, for SCHEDULE gpipe, 1f1b or zb-h1 (not "other"), to the closed
# form above. Keys, the run's shape: dp, pp, cp, tp (1), m (micro-batches, 1), L (n_layer,
# 2), weight_bytes (4); and for the controls: wte_every_micro=1, whole_model=1.
judge() {
  /usr/bin/python3 - "$ROOT" "$@" << 'PY'
import json, sys
sys.path.insert(0, sys.argv[1] + "/scripts")
from comm_table import read_by_rank
cfg = json.load(open(sys.argv[1] + "/configs/tiny.json"))
log_path, schedule, zero = sys.argv[2], sys.argv[3], int(sys.argv[4])
opts = {k: int(v) for k, v in (kv.split("=", 1) for kv in sys.argv[5:])}
dp, pp, cp, tp = (opts.get(k, 1) for k in ("dp", "pp", "cp", "tp"))
m, L, weight_bytes = opts.get("m", 1), opts.get("L", 2), opts.get("weight_bytes", 4)
try:
    by_rank = read_by_rank(open(log_path).read(), "data-parallel", log_path)
except ValueError as e:
    sys.exit(str(e))
world = dp * pp * cp * tp
if sorted(by_rank) != list(range(world)):
    sys.exit(f"{log_path}: lines for ranks {sorted(by_rank)}, not one for each of the {world}")
for r, (calls, calls_f, nbytes, nbytes_f) in by_rank.items():
    if (calls, nbytes) != (calls_f, nbytes_f):
        sys.exit(f"{log_path}: rank {r} counted {calls} calls {nbytes} bytes, formula {calls_f} calls {nbytes_f} bytes")
if schedule == "other":
    print(f"ok   {log_path.split('/')[-1]}: every rank's count is its formula")
    sys.exit(0)

V, C, T = cfg["vocab_size"], cfg["n_embd"], cfg["block_size"]
Vp = -(-V // 128) * 128
block = 12 * C * C // tp + 7 * C // tp + 6 * C  # tests/stages/dp_traffic.sh: a block's tp slice
n = dp * cp  # the group holding the same weights


def closed_form(world_rank):
    t = world_rank % tp  # rank = ((dp_i pp + pp_i) cp + cp_i) tp + tp_i (common/mesh.h)
    c_i = world_rank // tp % cp
    r = world_rank // (tp * cp) % pp
    d = world_rank // (tp * cp * pp)
    g = d * cp + c_i  # the index in the dp x cp group
    first, last = r == 0, r == pp - 1
    if opts.get("whole_model"):
        first = last = True
    blocks = L if opts.get("whole_model") else L // pp
    E = (Vp // tp * C if first or last else 0) + (T * C if first else 0)
    F = 2 * C if last else 0
    P = E + blocks * block + F
    shard = [i * P // n for i in range(n + 1)]

    def parts(b, e):
        return [max(0, min(e, shard[i + 1]) - max(b, shard[i])) for i in range(n)]

    def reduce_scatter(b, e, size):
        c = parts(b, e)
        return (0, 0) if n == 1 or e == b else (n - 1, size * ((e - b - c[g]) + (e - b - c[(g - 1) % n])))

    def all_gather(b, e, size):
        c = parts(b, e)
        return (0, 0) if n == 1 or e == b else (n - 1, size * ((e - b - c[(g + 1) % n]) + (e - b - c[g])))

    if zero <= 1:  # one bucket, reduced at the step's last micro-batch
        pieces = [reduce_scatter(0, P, 4), all_gather(0, P, 4 if zero == 0 else weight_bytes)]
    else:
        tied_end = pp > 1 and (first or last) and not opts.get("wte_every_micro")
        pieces = [reduce_scatter(E, P, 4)] * m + [reduce_scatter(0, E, 4)] * (1 if tied_end else m)
        if zero == 2:
            pieces.append(all_gather(0, P, weight_bytes))
        else:
            w = min(pp - r - 1, m)  # the warm-up forwards of 1F1B and ZB-H1
            if schedule == "gpipe":
                passes = "F" * m + "B" * m
            elif schedule == "1f1b":
                passes = "F" * w + "FB" * (m - w) + "B" * w
            else:  # zb-h1: B_i in 1F1B's place, W_(i-r) right after it, the rest at the end
                passes = "F" * w + "".join(("F" if w + i < m else "") + "B" + ("B" if i >= r else "")
                                           for i in range(m)) + "B" * min(r, m)
            blocks_units = [(E + l * block, E + (l + 1) * block) for l in range(blocks)]
            after_forward = False
            for p in passes:
                units = blocks_units[:]
                if not after_forward:
                    units.append((0, E))
                if p == "F" or not after_forward:
                    units.append((P - F, P))
                pieces += [all_gather(b, e, weight_bytes) for b, e in units]
                after_forward = p == "F"
    return (sum(c for c, _ in pieces), sum(b for _, b in pieces))


for r, (calls, _, nbytes, _) in by_rank.items():
    if (calls, nbytes) != closed_form(r):
        sys.exit(f"{log_path}: rank {r} counted {calls} calls {nbytes} bytes, its closed form {closed_form(r)}")
print(f"ok   {log_path.split('/')[-1]}: every rank's count is its formula and its closed form "
      f"(rank 0: {by_rank[0][0]} calls, {by_rank[0][2]} bytes)")
PY
}
one=(bucket_mb=64)  # every gradient in one bucket (the embeddings' apart under ZeRO-2 and -3)
# judged_step NAME NP TRAIN (judge's arguments) -- (the run's keys): tests/trainer/common.sh
passed=()
judged_step gpipe_z0 4 "$TRAIN07" gpipe 0 dp=2 pp=2 m=2 -- pp=2 zero=0 micro_batch_size=1 "${one[@]}"
judged_step gpipe_z1_bf16 4 "$TRAIN07" gpipe 1 dp=2 pp=2 m=2 weight_bytes=2 -- pp=2 zero=1 precision=bf16 \
  micro_batch_size=1 "${one[@]}"
judged_step 1f1b_z2 4 "$TRAIN08" 1f1b 2 dp=2 pp=2 m=2 -- pp=2 zero=2 micro_batch_size=1 "${one[@]}"
judged_step gpipe_z3 4 "$TRAIN07" gpipe 3 dp=2 pp=2 m=2 -- pp=2 zero=3 micro_batch_size=1 "${one[@]}"
judged_step 1f1b_z3 4 "$TRAIN08" 1f1b 3 dp=2 pp=2 m=4 -- pp=2 zero=3 micro_batch_size=1 batch_size=8 "${one[@]}"
judged_step gpipe_z3_p3 6 "$TRAIN07" gpipe 3 dp=2 pp=3 m=3 L=3 -- pp=3 n_layer=3 zero=3 micro_batch_size=1 \
  batch_size=6 "${one[@]}"
judged_step 4d_z3_cp 4 "$TRAIN11" 1f1b 3 pp=2 cp=2 m=4 -- pp=2 cp=2 zero=3 schedule=1f1b micro_batch_size=1 \
  "${one[@]}"
judged_step 4d_z3_tp 8 "$TRAIN11" 1f1b 3 dp=2 pp=2 tp=2 m=2 -- pp=2 tp=2 zero=3 schedule=1f1b micro_batch_size=1 \
  batch_size=4 "${one[@]}"
# Zero-bubble's split backwards; interleaved chunks (the formula, by rank).
judged_step zbh1_z3 4 "$TRAIN09" zb-h1 3 dp=2 pp=2 m=4 -- pp=2 schedule=zb-h1 zero=3 micro_batch_size=1 \
  batch_size=8 "${one[@]}"
judged_step zbh1_z2_4d 4 "$TRAIN11" zb-h1 2 dp=2 pp=2 m=4 -- pp=2 schedule=zb-h1 zero=2 micro_batch_size=1 \
  batch_size=8 "${one[@]}"
judged_step interleaved_z3 4 "$TRAIN09" other 3 dp=2 pp=2 -- pp=2 virtual_stages=2 n_layer=4 zero=3 \
  micro_batch_size=1 batch_size=8 "${one[@]}"
# The controls, on runs that passed their own judgement.
if passed_all 1f1b_z2 1f1b_z3 zbh1_z3 gpipe_z0; then
  control "ZeRO-2's tied wte reduced every micro-batch" 1f1b_z2 1f1b 2 dp=2 pp=2 m=2 wte_every_micro=1
  control "1F1B's ZeRO-3 gathers in GPipe's order" 1f1b_z3 gpipe 3 dp=2 pp=2 m=4
  control "ZB-H1's ZeRO-3 gathers in 1F1B's order" zbh1_z3 1f1b 3 dp=2 pp=2 m=4
  control "a stage as the whole model" gpipe_z0 gpipe 0 dp=2 pp=2 m=2 whole_model=1
else
  fail "the controls need 1f1b_z2, 1f1b_z3, zbh1_z3 and gpipe_z0 to pass first"
fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
