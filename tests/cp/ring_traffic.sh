#!/usr/bin/env bash
# Ring attention's messages are the ones stage 10's README derives. The run counts what
# its ring passes through the cp communicator (a CountingCommunicator) and prints rank 0's
# count beside ring_attention_traffic's formula. Checked here from the run's shape alone:
# per attention layer and micro-batch, forward cp - 1 hops of k | v, backward cp - 1 hops
# of k | v and cp hops of dK | dV, each hop an isend and an irecv of 2 (C/tp) (B T/cp)
# values: k and v of the activations' type (4 bytes, 2 in bf16), dK and dV fp32:
#     calls = 2 (3 cp - 2) L m,   bytes = 2 (C/tp) (B T/cp) L m (4 (cp-1) a + 2 cp 4)
# at cp 2 and 4, in bf16, with tp 2 under sequence parallelism, and with 4 micro-batches.
# And stage 11 at pp 2 x cp 2, where L is the layers of a rank's chunks (n_layer / pp, or
# 2 and 1 of n_layer = 3) and full activation checkpointing runs each block's forward, and
# its hops, twice:
#     calls = 2 ((f + 1)(cp - 1) + cp) L m with f forwards; selective recomputes none;
# stage 11 prints every rank's line, each held to its own L.
# Controls: the cp 4 run judged as cp 2, the bf16 run judged with 4-byte k and v, the
# full-recompute run judged with one forward, and the uneven stages judged as 2 layers
# each, must be rejected.
# Usage: ring_traffic.sh TRAIN10 TRAIN11 PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN10=$1 TRAIN11=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# judge LOG CP TP M ACT_BYTES [LAYERS FORWARDS]: exit 0 when rank 0's table, and every
# rank's line where the stage prints them, is the closed form (LAYERS: the attention layers
# of each pipeline rank, comma-separated, n_layer unless given; FORWARDS: 1 unless given)
judge() {
  /usr/bin/python3 - "$ROOT" "$@" << 'PY'
import json, re, sys
root = sys.argv[1]
sys.path.insert(0, root + "/scripts")
from comm_table import counted_rows, read_by_rank
cfg = json.load(open(root + "/configs/tiny.json"))
log_path = sys.argv[2]
cp, tp, m, a = map(int, sys.argv[3:7])
stage_layers = [int(n) for n in sys.argv[7].split(",")] if len(sys.argv) > 7 else [cfg["n_layer"]]
forwards = int(sys.argv[8]) if len(sys.argv) > 8 else 1
text = open(log_path).read()
rows = counted_rows(text, "context-parallel", log_path)
B = int(re.search(r"= micro-batch (\d+) x", text).group(1))
C, T = cfg["n_embd"], cfg["seq_len"]
message = 2 * (C // tp) * (B * T // cp)
kv_hops, dkv_hops = (forwards + 1) * (cp - 1), cp


def closed_form(L):
    return (2 * (kv_hops + dkv_hops) * L * m, message * L * m * 2 * (kv_hops * a + dkv_hops * 4))


want = closed_form(stage_layers[0])
if rows != {"point_to_point": want}:
    sys.exit(f"{log_path}: counted {rows}, the closed form for cp={cp} tp={tp} m={m} gives point_to_point {want}")
try:
    by_rank = read_by_rank(text, "context-parallel", log_path)
except ValueError:
    by_rank = {}  # stage 10 prints rank 0's table alone
for r, (calls, calls_f, nbytes, nbytes_f) in by_rank.items():
    mine = closed_form(stage_layers[r // (tp * cp) % len(stage_layers)])  # its pipeline rank's layers
    if (calls, nbytes) != (calls_f, nbytes_f) or (calls, nbytes) != mine:
        sys.exit(f"{log_path}: rank {r} counted {calls} calls {nbytes} bytes, formula {calls_f} calls "
                 f"{nbytes_f} bytes, closed form {mine}")
print(f"ok   {log_path.split('/')[-1]}: {want[0]} messages, {want[1]} bytes on rank 0" +
      (f", every one of {len(by_rank)} ranks its own" if by_rank else ""))
PY
}
# judged_step NAME NP TRAIN (judge's arguments) -- (the run's keys): tests/trainer/common.sh
passed=()
judged_step cp2 2 "$TRAIN10" 2 1 2 4 -- cp=2
judged_step cp4 4 "$TRAIN10" 4 1 2 4 -- cp=4
judged_step cp2_dp2 4 "$TRAIN10" 2 1 1 4 -- cp=2
judged_step cp2_bf16 2 "$TRAIN10" 2 1 2 2 -- cp=2 precision=bf16
judged_step cp2_tp2_sp 4 "$TRAIN10" 2 2 2 4 -- cp=2 tp=2 sequence_parallel=true
judged_step cp2_accum4 2 "$TRAIN10" 2 1 4 4 -- cp=2 micro_batch_size=1
judged_step s11_pp2_cp2 4 "$TRAIN11" 2 1 2 4 1 1 -- pp=2 cp=2
judged_step s11_full 4 "$TRAIN11" 2 1 2 4 1 2 -- pp=2 cp=2 activation_checkpointing=full
judged_step s11_selective 4 "$TRAIN11" 2 1 2 4 1 1 -- pp=2 cp=2 activation_checkpointing=selective
judged_step s11_uneven 4 "$TRAIN11" 2 1 2 4 2,1 1 -- pp=2 cp=2 n_layer=3
if passed_all cp4 cp2_bf16 s11_full; then
  judge "$WORK/cp4.log" 2 1 2 4 > /dev/null 2>&1 && fail "control: the cp 4 run passed as cp 2" ||
    echo "ok   (control) the cp 4 run is not cp 2's traffic"
  judge "$WORK/cp2_bf16.log" 2 1 2 4 > /dev/null 2>&1 && fail "control: the bf16 run passed with 4-byte k and v" ||
    echo "ok   (control) the bf16 run's k and v are not 4 bytes"
  judge "$WORK/s11_full.log" 2 1 2 4 1 1 > /dev/null 2>&1 && fail "control: full recompute passed with one forward" ||
    echo "ok   (control) full recompute's ring is not one forward's"
else
  fail "the controls need the runs cp4, cp2_bf16 and s11_full to pass first"
fi
if passed_all s11_uneven; then  # rank 0's table is right either way: the other stage's lines tell
  judge "$WORK/s11_uneven.log" 2 1 2 4 2,2 1 > /dev/null 2>&1 && fail "control: uneven stages passed as 2 layers" ||
    echo "ok   (control) the uneven stages' lines are not 2 layers each"
else
  fail "the control needs the run s11_uneven to pass first"
fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
