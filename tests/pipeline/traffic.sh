#!/usr/bin/env bash
# The pipeline's traffic is the one its schedule implies, and the one stage 09's README
# derives (each rank sends v times as many messages with v chunks). Each run counts what
# its executor and the tied wte's group pass through the pp communicator (a
# CountingCommunicator; the wte group is a split of it) and prints rank 0's count beside
# pipeline_traffic's formula. Checked here, for stages 07, 08, 09 (interleaved and ZB-H1)
# and 11, on 2 to 4 ranks:
#   every row      counted = formula, calls and bytes, point_to_point only;
#   closed form    rank 0, whose chunks are virtual stages 0, p, .., (v-1) p of v p, from the
#                  run's shape alone: per micro-batch 2 messages at stage 0 (the activation
#                  sent, its gradient received) and 4 at each later one (and received, and
#                  sent back), each B T C / (tp under sequence parallelism) / cp elements of
#                  the activations' type (4 bytes, 2 in bf16); then the tied wte's gradient,
#                  (V / tp) C fp32 elements, all-reduced with the last rank by a ring of 2:
#                  2 messages, each way the whole gradient: 2 (V/tp) C 4 bytes;
#   so             interleaving (v = 2) sends more messages than GPipe and 1F1B (v = 1):
#                  2 + 4 (v-1) per micro-batch on rank 0 instead of 2;
#   every rank     its line (all operations) counted = formula; and in the jobs of the
#                  pipeline alone (world rank = pp rank) each rank's closed form: a middle
#                  rank 4 m v messages and no wte ring, the last rank 2 + 4 (v-1) per
#                  micro-batch and the ring.
# Controls: the v = 2 run judged as v = 1, and the bf16 run judged with 4-byte activations,
# must be rejected.
# Usage: traffic.sh TRAIN07 TRAIN08 TRAIN09 TRAIN11 PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN07=$1 TRAIN08=$2 TRAIN09=$3 TRAIN11=$4 PREPARE=$5 WORK=$6 ROOT=$7 MPIEXEC=$8
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# judge LOG P M V ROW_DIVISOR TP ACT_BYTES every_rank|rank0 NP: exit 0 when rank 0's table in
# LOG is the closed form of a pipeline of P ranks, M micro-batches, V chunks per rank,
# messages of B T C / ROW_DIVISOR elements of ACT_BYTES each, wte split over TP ranks, and
# each of the job's NP ranks has a line equal to its formula; with every_rank (a job of the
# pipeline alone) also to its closed form.
judge() {
  /usr/bin/python3 - "$ROOT" "$@" << 'PY'
import json, re, sys
sys.path.insert(0, sys.argv[1] + "/scripts")
from comm_table import counted_rows, read_by_rank
cfg = json.load(open(sys.argv[1] + "/configs/tiny.json"))
log_path = sys.argv[2]
p, m, v, divisor, tp, act_bytes = map(int, sys.argv[3:9])
pipeline_only = sys.argv[9] == "every_rank"  # "every_rank" or "rank0"; then the job's ranks
text = open(log_path).read()
rows = counted_rows(text, "pipeline", log_path)
if set(rows) != {"point_to_point"}:
    sys.exit(f"{log_path}: a pipeline moves point_to_point messages only, the table has {sorted(rows)}")
B = int(re.search(r"= micro-batch (\d+) x", text).group(1))
T, C, V = cfg["seq_len"], cfg["n_embd"], cfg["vocab_size"]
message = B * T * C // divisor
wte = V // tp * C


def closed_form(r):  # (calls, bytes) of pp rank r: its virtual stages r, p + r, ..., and the tied wte's ring
    messages = sum(m * ((2 if s > 0 else 0) + (2 if s < v * p - 1 else 0)) for s in range(r, v * p, p))
    ends = 2 if p > 1 and r in (0, p - 1) else 0
    return (messages + ends, messages * message * act_bytes + ends * wte * 4)


want = closed_form(0)
if rows["point_to_point"] != want:
    sys.exit(f"{log_path}: counted {rows['point_to_point']} (calls, bytes), the closed form for p={p} m={m} v={v} "
             f"gives {want}")
# Every rank's line; where the world is the pipeline alone (np = p) world rank r is pp rank r.
try:
    by_rank = read_by_rank(text, "pipeline", log_path)
except ValueError as e:
    sys.exit(str(e))
ranks = int(sys.argv[10])
if sorted(by_rank) != list(range(ranks)):
    sys.exit(f"{log_path}: lines for ranks {sorted(by_rank)}, not one for each of the {ranks}")
for r, (calls, calls_f, nbytes, nbytes_f) in by_rank.items():
    if (calls, nbytes) != (calls_f, nbytes_f):
        sys.exit(f"{log_path}: rank {r} counted {calls} calls {nbytes} bytes, formula {calls_f} calls {nbytes_f} bytes")
    if pipeline_only and (calls, nbytes) != closed_form(r):
        sys.exit(f"{log_path}: rank {r} counted {calls} calls {nbytes} bytes, its closed form {closed_form(r)}")
print(f"ok   {log_path.split('/')[-1]}: {want[0]} messages, {want[1]} bytes")
PY
}
# judged_step NAME NP TRAIN (judge's arguments) -- (the run's keys): tests/trainer/common.sh
passed=()
judged_step gpipe_p2 2 "$TRAIN07" 2 2 1 1 1 4 every_rank 2 -- pp=2
judged_step gpipe_p3 3 "$TRAIN07" 3 3 1 1 1 4 every_rank 3 -- pp=3 n_layer=3 micro_batch_size=1 batch_size=3
judged_step gpipe_sp 4 "$TRAIN07" 2 2 1 2 2 4 rank0 4 -- pp=2 tp=2 sequence_parallel=true
judged_step gpipe_dp 4 "$TRAIN07" 2 1 1 1 1 4 rank0 4 -- pp=2 zero=3
judged_step 1f1b_p2 2 "$TRAIN08" 2 4 1 1 1 4 every_rank 2 -- pp=2 micro_batch_size=1
judged_step 1f1b_bf16 2 "$TRAIN08" 2 2 1 1 1 2 every_rank 2 -- pp=2 precision=bf16
judged_step interleaved 2 "$TRAIN09" 2 2 2 1 1 4 every_rank 2 -- pp=2 virtual_stages=2 n_layer=4
judged_step interleaved_p3 3 "$TRAIN09" 3 3 2 1 1 4 every_rank 3 -- pp=3 virtual_stages=2 n_layer=6 micro_batch_size=1 batch_size=3
judged_step zbh1 2 "$TRAIN09" 2 2 1 1 1 4 every_rank 2 -- pp=2 schedule=zb-h1
judged_step four_d 4 "$TRAIN11" 2 2 1 2 1 4 rank0 4 -- pp=2 cp=2
judged_step four_d_v2 4 "$TRAIN11" 2 2 2 2 1 4 rank0 4 -- pp=2 cp=2 virtual_stages=2 n_layer=4
if passed_all interleaved 1f1b_bf16; then
  judge "$WORK/interleaved.log" 2 2 1 1 1 4 every_rank 2 > /dev/null 2>&1 && fail "control: the v = 2 run passed as v = 1" ||
    echo "ok   (control) the v = 2 run is not v = 1's traffic"
  judge "$WORK/1f1b_bf16.log" 2 2 1 1 1 4 every_rank 2 > /dev/null 2>&1 && fail "control: the bf16 run passed with 4-byte activations" ||
    echo "ok   (control) the bf16 run's activations are not 4 bytes"
else
  fail "the controls need the runs interleaved and 1f1b_bf16 to pass first"
fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
