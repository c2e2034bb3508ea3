#!/usr/bin/env bash
# Each pipeline rank's memory by kind (stages 08, 09, 11), printed after the first step
# under its in-flight line (pipeline_report.h, memory_line) beside its formula
# (LocalZero::memory_formula, with_activations), is what its own layers need. A rank's
# local buffer holds P elements: on the first stage wte
# (V/tp rows, V padded to 128) and wpe (T C), on the last wte (E, the embedding unit) and
# ln_f (F = 2 C), and its k blocks between, each B = 12 C^2/tp + 7 C/tp + 6 C
# (tests/stages/dp_traffic.sh); with v chunks a rank holds v such buffers, chunk c being
# virtual stage c p + r of v p (T is block_size, the model's context: one run trains on
# shorter sequences). With S the rank's shard of P over the n ranks holding the same
# weights (floor((g+1) P / n) - floor(g P / n) at group index g; S = P under ZeRO-0), a the
# bytes of a weight (4, 2 in bf16) and every gradient in one bucket (bucket_mb=64) but the
# tied embeddings' own (a pipeline stage's; E = 0 on a middle stage):
#     zero  params                         grads              optimizer
#     0, 1  a P                            4 P                (8 | 12) S   (m, v; + fp32 master in bf16)
#     2     a P                            4 (S + E + kB + F) (8 | 12) S   (the two live bucket buffers)
#     3     a (S + E + 2B), one block:     as zero 2          (8 | 12) S
#           a (S + E + B + F); no prefetch: a (S + E + B)
# summed over the rank's chunks, exact, every rank, and each equal to the formula the run
# prints beside it. Under ZeRO-3 with several chunks the weights have no closed form (the
# chunks gather at their own times): the run prints "-", and only that case may.
# Activations, counted from the buffers the model allocates (common/model_block.h,
# model_head.h, model_backward_split.h, gpt2.h), a bytes a value and 4 a statistic, on
# N = B T/cp rows (R = N/tp under sequence parallelism, W = C/tp, F' = 4C/tp, Hr heads):
#     a block's set   a (ln1, resid2, ln2, resid3: 4 R C; qkv, atty: 4 N W; fch, gelu: 2 N F')
#                     + 4 (means and rstds 4 R; logsumexps B Hr T/cp)
#     kept per block  the set (none); the set less ln1, ln2, gelu (selective); R C (full)
#     per slot        input and its gradient 2 a R C, k kept blocks, the head on the last
#                     stage (ln_f R C, + N C gathered under sp, logits and gradient 2 N Vr;
#                     4 (2 R + 4 N)), 4 N token ids at each end, and under ZB-H1 the input
#                     half's gradients a (2 N C + 2 R C + N F' + 3 N W) a block (+ R C head)
#     per chunk       scratch a (2 N C + 4 N W + 2 N F') (+ a (R C + N C) under sp), the
#                     embedding's sums a N C under sp on the first stage
#     per rank        recompute's one working set: a block's set (full), or its ln1, ln2
#                     and gelu (selective); with v > 1 chunks (not under full recompute)
#                     where the schedule's theory of micro-batches in flight on the rank is
#                     below the chunks' slots, the slots keep no block's: a pool of that many
#                     sets holds k kept blocks each
# with each chunk's slots as the in-flight line lists them; with one chunk a rank's slots
# must be the schedule's theory its line prints beside them (pipeline_theory_in_flight's
# closed form: GPipe m, 1F1B min(p - r, m), ZB-H1 min(p, m)), and the allocation is
# judged on those.
# Controls: a stage judged as the whole model, a bf16 run judged as fp32, ZeRO-3 judged
# without its prefetched block, ZeRO-2 judged with two buffers for its one other bucket,
# full recompute judged as selective, ZB-H1 judged without the gradients its input half
# keeps, a sequence-parallel run judged without sp's gathered buffers, interleaved
# chunks judged with their slots swapped, and judged each with its own blocks' slots.
# Usage: memory_by_kind.sh TRAIN08 TRAIN09 TRAIN11 PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN08=$1 TRAIN09=$2 TRAIN11=$3 PREPARE=$4 WORK=$5 ROOT=$6 MPIEXEC=$7
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# judge LOG key=value...: exit 0 when every rank's params, grads, optimizer and
# activations equal the closed form above and the printed formula. Keys: dp, pp, cp, tp,
# v (1), L (n_layer, 2), zero (0), a (4), prefetch (1), sp (0), recompute (0 none,
# 1 selective, 2 full), zb (0; 1: ZB-H1's split backward); and for the controls:
# whole_model=1, no_prefetch_block=1, two_buffers=1, no_sp_buffers=1, swap_slots=1,
# no_pool=1. B and
# T are the run's micro-batch and sequence, from its batch line.
judge() {
  /usr/bin/python3 - "$ROOT" "$@" << 'PY'
import json, re, sys
cfg = json.load(open(sys.argv[1] + "/configs/tiny.json"))
log_path = sys.argv[2]
o = {k: int(v) for k, v in (kv.split("=", 1) for kv in sys.argv[3:])}
dp, pp, cp, tp, v = (o.get(k, 1) for k in ("dp", "pp", "cp", "tp", "v"))
L, zero, a = o.get("L", 2), o.get("zero", 0), o.get("a", 4)
V, C, T = cfg["vocab_size"], cfg["n_embd"], cfg["block_size"]
Vp = -(-V // 128) * 128
block = 12 * C * C // tp + 7 * C // tp + 6 * C
text = open(log_path).read()
LINE = (r"^rank (\d+) \(pipeline rank .*\(schedule's bound (\d+)\).*"
        r"\((\d+) slots?(?:: ([\d +]+) by chunk)?(?:, blocks' activations in (\d+) shared sets)?\).*\n"
        r"  memory peaks \(allocated \| formula\):(.*); buffers \d+.* bytes$")
found, slots, bounds = {}, {}, {}
sp, recompute, zb = o.get("sp", 0), o.get("recompute", 0), o.get("zb", 0)
pooled = {}  # per rank: whether its chunks share their blocks' sets
for r, bound, total, by_chunk, sets, kinds in re.findall(LINE, text, re.M):
    r = int(r)
    found[r] = {k: (int(got), want) for k, got, want in re.findall(r"(\w+) (\d+) \| (\d+|-)", kinds)}
    slots[r] = [int(x) for x in by_chunk.split(" + ")] if by_chunk else [int(total)]
    bounds[r] = int(bound)
    if not by_chunk and total != bound:
        sys.exit(f"{log_path}: rank {r} allocated {total} activation slots, its schedule's theory {bound}")
    # A pool (chunks of equal layers here) where it holds fewer sets than the chunks' slots.
    pooled[r] = v > 1 and recompute != 2 and int(bound) < sum(slots[r])
    if (sets or None) != (bound if pooled[r] else None):
        sys.exit(f"{log_path}: rank {r} keeps its blocks' activations in {sets or 'no'} shared sets, "
                 f"expected {bound if pooled[r] else 'none'} (the schedule's theory {bound}, v = {v})")
    pooled[r] = pooled[r] and not o.get("no_pool")  # the control: judged as if each chunk kept its own
batch = re.search(r"^batch \d+ sequences x (\d+) tokens = micro-batch (\d+) x", text, re.M)
if not batch:
    sys.exit(f"{log_path}: no batch line")
if L % (v * pp):
    sys.exit(f"{log_path}: this judge takes every chunk to run the same layers, not {L} over {v * pp}")
B, N = int(batch[2]), int(batch[2]) * int(batch[1]) // cp
R = N // tp if sp else N
W, Fh, Hr, Vr = C // tp, 4 * C // tp, cfg["n_head"] // tp, Vp // tp
split_rows = R != N and not o.get("no_sp_buffers")  # sp's gathered N x C buffers
block_set = a * (4 * R * C + 4 * N * W + 2 * N * Fh) + 4 * (4 * R + N * Hr)
cheap = a * (2 * R * C + N * Fh)  # ln1, ln2, gelu
kept_block = [block_set, block_set - cheap, a * R * C][recompute]
head = a * (R * C + split_rows * N * C + 2 * N * Vr) + 4 * (2 * R + 4 * N)
scratch = a * (2 * N * C + 4 * N * W + 2 * N * Fh + split_rows * (R * C + N * C))
world = dp * pp * cp * tp
if sorted(found) != list(range(world)):
    sys.exit(f"{log_path}: memory lines for ranks {sorted(found)}, not one for each of the {world}")
n = dp * cp  # the ranks holding the same weights
no_closed_form = zero == 3 and v > 1
for rank, row in found.items():
    for kind, (got, printed) in row.items():
        if printed == "-" and not (kind == "params" and no_closed_form):
            sys.exit(f"{log_path}: rank {rank} prints no formula for {kind}")
        if printed != "-" and got != int(printed):
            sys.exit(f"{log_path}: rank {rank} {kind} allocated {got} bytes, its printed formula {printed}")
    r = rank // (tp * cp) % pp  # rank = ((dp_i pp + pp_i) cp + cp_i) tp + tp_i (common/mesh.h)
    g = rank // (tp * cp * pp) * cp + rank // tp % cp
    want = {"params": 0, "grads": 0, "optimizer": 0, "activations": [0, cheap, block_set][recompute]}
    chunk_slots = slots[rank][::-1] if o.get("swap_slots") else slots[rank]
    if len(chunk_slots) != v:
        sys.exit(f"{log_path}: rank {rank} lists slots for {len(chunk_slots)} chunks, not {v}")
    for c in range(v):
        s = c * pp + r
        first, last = s == 0, s == v * pp - 1
        if o.get("whole_model"):
            first = last = True
        k = L if o.get("whole_model") else L // (v * pp)
        E = (Vp // tp * C if first or last else 0) + (T * C if first else 0)
        F = 2 * C if last else 0
        P = E + k * block + F
        S = P if zero == 0 else (g + 1) * P // n - g * P // n
        if zero <= 1:
            grads = 4 * P
        else:  # the embeddings' bucket and the other one, each with its buffer (two if it took turns)
            grads = 4 * (S + E + (2 if o.get("two_buffers") else 1) * (k * block + F))
        if zero <= 2:
            params = a * P
        elif not o.get("prefetch", 1) or o.get("no_prefetch_block"):
            params = a * (S + E + block)
        else:
            params = a * (S + (E + 2 * block if k >= 2 else E + block + F))
        want["params"] += params
        want["grads"] += grads
        want["optimizer"] += (12 if a == 2 else 8) * S
        slot = (2 * a * R * C + (0 if pooled[rank] else k * kept_block) + last * head + 4 * N * (first + last) +
                zb * (k * a * (2 * N * C + 2 * R * C + N * Fh + 3 * N * W) + last * a * R * C))
        want["activations"] += chunk_slots[c] * slot + scratch + first * split_rows * a * N * C
    if pooled[rank]:  # the pool: the schedule's theory of sets, each of a chunk's k blocks
        want["activations"] += bounds[rank] * (L // (v * pp)) * kept_block
    for kind, value in want.items():
        if kind == "params" and no_closed_form:
            continue
        if row.get(kind, (None,))[0] != value:
            sys.exit(f"{log_path}: rank {rank} {kind} {row.get(kind)} bytes, closed form {value}")
r0 = found[0]
print(f"ok   {log_path.split('/')[-1]}: every rank's params, grads, optimizer and activations are its layers' "
      f"(rank 0: {r0['params'][0]}, {r0['grads'][0]}, {r0['optimizer'][0]}, {r0['activations'][0]} bytes; "
      f"slots {slots[0]})")
PY
}
passed=()
one=(bucket_mb=64)  # every gradient in one bucket but the tied embeddings'
judged_step 1f1b_bf16 4 "$TRAIN08" dp=2 pp=2 a=2 -- pp=2 precision=bf16
judged_step interleaved_z1 4 "$TRAIN09" dp=2 pp=2 v=2 L=4 zero=1 -- pp=2 virtual_stages=2 n_layer=4 zero=1 \
  micro_batch_size=1 batch_size=4
judged_step 4d_z1 8 "$TRAIN11" dp=2 pp=2 tp=2 zero=1 -- pp=2 tp=2 zero=1 micro_batch_size=1 seq_len=16
judged_step 4d_cp_z1_bf16 8 "$TRAIN11" dp=2 pp=2 cp=2 zero=1 a=2 -- pp=2 cp=2 zero=1 precision=bf16 \
  micro_batch_size=1
judged_step 4d_z2_tp 8 "$TRAIN11" dp=2 pp=2 tp=2 zero=2 -- pp=2 tp=2 zero=2 micro_batch_size=1 "${one[@]}"
judged_step 1f1b_z3_bf16 4 "$TRAIN08" dp=2 pp=2 L=4 zero=3 a=2 -- pp=2 n_layer=4 zero=3 precision=bf16 "${one[@]}"
judged_step 4d_z3_one_block 8 "$TRAIN11" dp=2 pp=2 cp=2 zero=3 -- pp=2 cp=2 zero=3 micro_batch_size=1 "${one[@]}"
judged_step 4d_z3_no_prefetch 4 "$TRAIN11" dp=2 pp=2 L=4 zero=3 prefetch=0 -- pp=2 n_layer=4 zero=3 \
  zero3_prefetch=false "${one[@]}"
judged_step interleaved_z3 4 "$TRAIN09" dp=2 pp=2 v=2 L=4 zero=3 -- pp=2 virtual_stages=2 n_layer=4 zero=3 \
  micro_batch_size=1 batch_size=4 "${one[@]}"
judged_step zb_h1 2 "$TRAIN09" pp=2 zb=1 -- pp=2 schedule=zb-h1 micro_batch_size=1 batch_size=4
judged_step 4d_gpipe 2 "$TRAIN11" pp=2 -- pp=2 schedule=gpipe micro_batch_size=1
judged_step 4d_full_sp 4 "$TRAIN11" pp=2 tp=2 sp=1 recompute=2 -- pp=2 tp=2 sequence_parallel=true \
  activation_checkpointing=full
judged_step 4d_selective_interleaved_bf16 2 "$TRAIN11" pp=2 v=2 L=4 a=2 recompute=1 -- pp=2 virtual_stages=2 \
  n_layer=4 activation_checkpointing=selective precision=bf16 micro_batch_size=1
if passed_all 4d_z1 1f1b_bf16 1f1b_z3_bf16 4d_z2_tp zb_h1 4d_full_sp 4d_selective_interleaved_bf16; then
  control "a stage judged as the whole model" 4d_z1 dp=2 pp=2 tp=2 zero=1 whole_model=1
  control "a bf16 run judged as fp32" 1f1b_bf16 dp=2 pp=2
  control "ZeRO-3 judged without its prefetched block" 1f1b_z3_bf16 dp=2 pp=2 L=4 zero=3 a=2 no_prefetch_block=1
  control "ZeRO-2 judged with two buffers for its one other bucket" 4d_z2_tp dp=2 pp=2 tp=2 zero=2 two_buffers=1
  control "full recompute judged as selective" 4d_full_sp pp=2 tp=2 sp=1 recompute=1
  control "ZB-H1 judged without the gradients its input half keeps" zb_h1 pp=2
  control "a sequence-parallel run judged without sp's gathered buffers" 4d_full_sp pp=2 tp=2 sp=1 recompute=2 \
    no_sp_buffers=1
  control "interleaved chunks judged with their slots swapped" 4d_selective_interleaved_bf16 pp=2 v=2 L=4 a=2 \
    recompute=1 swap_slots=1
  control "interleaved chunks judged each with its own blocks' slots" 4d_selective_interleaved_bf16 pp=2 v=2 L=4 \
    a=2 recompute=1 no_pool=1
else
  fail "the controls need 4d_z1, 1f1b_bf16, 1f1b_z3_bf16, 4d_z2_tp, zb_h1, 4d_full_sp and" \
    "4d_selective_interleaved_bf16 to pass first"
fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
