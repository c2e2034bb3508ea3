#!/usr/bin/env bash
# Each pipeline rank's memory by kind (stages 08, 09, 11), printed after the first step
# under its in-flight line (pipeline_report.h), is what its own layers need. A rank's
# local buffer holds P elements: on the first stage wte (V/tp rows, V padded to 128) and
# wpe (T C), on the last wte and ln_f (2 C), and its blocks between, each
# 12 C^2/tp + 7 C/tp + 6 C (tests/stages/dp_traffic.sh); with v chunks a rank holds v
# such buffers, chunk c being virtual stage c p + r of v p (T is block_size, the model's
# context: one run trains on shorter sequences). Under ZeRO 0 and 1 (stages
# 02 and 03 on that buffer):
#     params     a P   (a = 4 in fp32, 2 in bf16)
#     grads      4 P
#     optimizer  (8 | 12) S   (m and v, and the fp32 master in bf16), S = P under ZeRO-0,
#                else this rank's shard of P over the n ranks holding the same weights:
#                floor((g+1) P / n) - floor(g P / n) at group index g
# summed over the rank's chunks; exact, every rank.
# Controls: a stage judged as the whole model, and a bf16 run judged as fp32, rejected.
# Usage: memory_by_kind.sh TRAIN08 TRAIN09 TRAIN11 PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN08=$1 TRAIN09=$2 TRAIN11=$3 PREPARE=$4 WORK=$5 ROOT=$6 MPIEXEC=$7
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
# judge LOG key=value...: exit 0 when every rank's params, grads and optimizer equal the
# closed form above. Keys: dp, pp, cp, tp, v (1), L (n_layer, 2), zero (0), a (4), and
# whole_model=1 for the control.
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
found = {int(r): dict((k, int(n)) for k, n in re.findall(r"(\w+) (\d+)", kinds))
         for r, kinds in re.findall(r"^rank (\d+) \(pipeline rank .*\n  memory peaks by kind:(.*) bytes$", text, re.M)}
world = dp * pp * cp * tp
if sorted(found) != list(range(world)):
    sys.exit(f"{log_path}: memory lines for ranks {sorted(found)}, not one for each of the {world}")
n = dp * cp  # the ranks holding the same weights
for rank, got in found.items():
    r = rank // (tp * cp) % pp  # rank = ((dp_i pp + pp_i) cp + cp_i) tp + tp_i (common/mesh.h)
    g = rank // (tp * cp * pp) * cp + rank // tp % cp
    want = {"params": 0, "grads": 0, "optimizer": 0}
    for c in range(v):
        s = c * pp + r
        first, last = s == 0, s == v * pp - 1
        if o.get("whole_model"):
            first = last = True
        blocks = L if o.get("whole_model") else L // (v * pp)
        P = (Vp // tp * C if first or last else 0) + (T * C if first else 0) + blocks * block + (2 * C if last else 0)
        S = P if zero == 0 else (g + 1) * P // n - g * P // n
        want["params"] += a * P
        want["grads"] += 4 * P
        want["optimizer"] += (12 if a == 2 else 8) * S
    for kind, value in want.items():
        if got.get(kind) != value:
            sys.exit(f"{log_path}: rank {rank} {kind} {got.get(kind)} bytes, closed form {value}")
print(f"ok   {log_path.split('/')[-1]}: every rank's params, grads and optimizer are its layers' "
      f"(rank 0: {found[0]['params']}, {found[0]['grads']}, {found[0]['optimizer']} bytes)")
PY
}
passed=()
judged_step 1f1b_bf16 4 "$TRAIN08" dp=2 pp=2 a=2 -- pp=2 precision=bf16
judged_step interleaved_z1 4 "$TRAIN09" dp=2 pp=2 v=2 L=4 zero=1 -- pp=2 virtual_stages=2 n_layer=4 zero=1 \
  micro_batch_size=1 batch_size=4
judged_step 4d_z1 8 "$TRAIN11" dp=2 pp=2 tp=2 zero=1 -- pp=2 tp=2 zero=1 micro_batch_size=1 seq_len=16
judged_step 4d_cp_z1_bf16 8 "$TRAIN11" dp=2 pp=2 cp=2 zero=1 a=2 -- pp=2 cp=2 zero=1 precision=bf16 \
  micro_batch_size=1
control() {  # control WHAT LOG (judge's arguments)
  local what=$1 log=$2
  shift 2
  if judge "$WORK/$log.log" "$@" > /dev/null 2>&1; then fail "control: $what passed"
  else echo "ok   (control) $what is rejected"; fi
}
if passed_all 4d_z1 1f1b_bf16; then
  control "a stage judged as the whole model" 4d_z1 dp=2 pp=2 tp=2 zero=1 whole_model=1
  control "a bf16 run judged as fp32" 1f1b_bf16 dp=2 pp=2
else
  fail "the controls need 4d_z1 and 1f1b_bf16 to pass first"
fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
