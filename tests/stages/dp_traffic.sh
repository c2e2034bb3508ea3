#!/usr/bin/env bash
# The data-parallel traffic of stages 02 and 03 is the one their keys ask for, and the one
# their READMEs derive. A run counts what its gradient buckets and weight gathers send
# through the communicator (a CountingCommunicator around the dp group) and prints it
# beside its formula (gradient_traffic, zero1_traffic); within tolerance a ring and the
# backend compute the same sums, so only this table tells them apart. For each run here,
# on 2 or 3 ranks:
#   every row      counted = formula, calls and bytes;
#   the kind       allreduce=ring and stage 03 move point_to_point messages only,
#                  allreduce=backend all_reduce calls only, one per bucket;
#   the ring       2 (N-1) messages per bucket (no piece of the tiny model reaches 4 MiB),
#                  and in one bucket of all P parameters, rank 0's payload is the ring's
#                  closed form from the chunk rule, computed here from P alone:
#                  reduce-scatter half (P - c_0) + (P - c_(N-1)) elements, all-gather half
#                  (P - c_1) + (P - c_0), sent plus received, c_i = floor((i+1) P / N) -
#                  floor(i P / N) (so 2 (N-1)/N P each way when N | P), 4 bytes each;
#   grad_accum 2   the same traffic as grad_accum 1: only the last micro-step communicates;
#   bf16           stage 02: the same bytes as fp32 (the gradients are fp32 in both modes);
#                  stage 03: the all-gather half moves the bf16 weights, 2 bytes each;
#   stage 03       in fp32, one bucket: stage 02's ring all-reduce to the byte (ZeRO-1's
#                  reduce-scatter and all-gather are that all-reduce's two halves).
# Controls: the ring run judged as a backend run, and the backend run as a ring run, must
# both be rejected, and stage 03's bf16 run judged with 4-byte weights.
# Usage: dp_traffic.sh TRAIN02 TRAIN03 PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN02=$1 TRAIN03=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# judge LOG NP KIND [CONFIG [WEIGHT_BYTES]]: exit 0 when the table of LOG is that of KIND
# (ring or backend); with CONFIG, of one bucket of the model it describes, whose all-gather
# half moves WEIGHT_BYTES per element (4 unless given)
judge() {
  /usr/bin/python3 - "$@" << 'PY'
import json, re, sys
log_path, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
one_bucket = len(sys.argv) > 4
weight_bytes = int(sys.argv[5]) if len(sys.argv) > 5 else 4
text = open(log_path).read()
table = re.search(r"data-parallel communication in step \d+, rank 0 \(counted \| formula, README\):\n((?:  .*\n)+)", text)
if not table:
    sys.exit(f"{log_path}: no communication table")
head = re.search(r"allreduce=(\w+), (\d+) buckets?\)", text)  # stage 02's header; stage 03's names no buckets
buckets = 1 if one_bucket else int(head.group(2)) if head else None
rows = {}
for line in table.group(1).splitlines():
    m = re.match(r"\s+(\w+)\s+(\d+) \|\s+(\d+) calls\s+(\d+) \|\s+(\d+) bytes$", line)
    if not m:
        sys.exit(f"{log_path}: unreadable row {line!r}")
    name, calls, calls_f, nbytes, nbytes_f = m.group(1), *map(int, m.groups()[1:])
    if (calls, nbytes) != (calls_f, nbytes_f):
        sys.exit(f"{log_path}: {name} counted {calls} calls {nbytes} bytes, formula {calls_f} calls {nbytes_f} bytes")
    rows[name] = (calls, nbytes)
want_op = "point_to_point" if kind == "ring" else "all_reduce"
if set(rows) != {want_op}:
    sys.exit(f"{log_path}: allreduce={kind} should move {want_op} only, the table has {sorted(rows)}")
calls, nbytes = rows[want_op]
want_calls = None if buckets is None else 2 * (n - 1) * buckets if kind == "ring" else buckets
if want_calls is not None and calls != want_calls:
    sys.exit(f"{log_path}: {calls} {want_op} calls, {want_calls} expected for {buckets} bucket(s) on {n} ranks")
if one_bucket:
    cfg = json.load(open(sys.argv[4]))
    V, C, T, L = cfg["vocab_size"], cfg["n_embd"], cfg["block_size"], cfg["n_layer"]
    P = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C  # wte, wpe, blocks, final layernorm
    c = [(i + 1) * P // n - i * P // n for i in range(n)]
    reduce_scatter, all_gather = (P - c[0]) + (P - c[n - 1]), (P - c[1 % n]) + (P - c[0])
    want_bytes = 4 * reduce_scatter + weight_bytes * all_gather if kind == "ring" else 4 * P
    if nbytes != want_bytes:
        sys.exit(f"{log_path}: {nbytes} bytes in one bucket of P = {P}, {want_bytes} expected")
print(f"ok   {log_path.split('/')[-1]}: {want_op} {calls} calls, {nbytes} bytes")
PY
}
tiny=$ROOT/configs/tiny.json
passed=()  # the runs whose table passed its own judgement
check() {  # check NAME NP TRAIN KIND [CONFIG [WEIGHT_BYTES]] -- key=value...: one step, then its judgement
  local name=$1 np=$2 bin=$3 kind=$4 judged=()
  shift 4
  while [ "$1" != "--" ]; do judged+=("$1"); shift; done
  shift
  one_step "$name" "$np" "$bin" "$@" || return 0
  if judge "$WORK/$name.log" "$np" "$kind" "${judged[@]}"; then passed+=("$name"); else fail "$name"; fi
}
check ring3_one 3 "$TRAIN02" ring "$tiny" -- allreduce=ring batch_size=6 bucket_mb=64
check ring3_many 3 "$TRAIN02" ring -- allreduce=ring batch_size=6 bucket_mb=0.01
check back3_one 3 "$TRAIN02" backend "$tiny" -- allreduce=backend batch_size=6 bucket_mb=64
check back3_many 3 "$TRAIN02" backend -- allreduce=backend batch_size=6 bucket_mb=0.01
check ring2_one 2 "$TRAIN02" ring "$tiny" -- allreduce=ring bucket_mb=64
check ring2_accum 2 "$TRAIN02" ring "$tiny" -- allreduce=ring bucket_mb=64 micro_batch_size=1
check ring2_bf16 2 "$TRAIN02" ring "$tiny" -- allreduce=ring bucket_mb=64 precision=bf16
check zero1_3_one 3 "$TRAIN03" ring "$tiny" -- batch_size=6 bucket_mb=64
check zero1_3_many 3 "$TRAIN03" ring -- batch_size=6 bucket_mb=0.01
check zero1_2_accum 2 "$TRAIN03" ring "$tiny" -- bucket_mb=64 micro_batch_size=1
check zero1_2_bf16 2 "$TRAIN03" ring "$tiny" 2 -- bucket_mb=64 precision=bf16
# The controls, on runs that passed their own judgement: each kind must fail the other's,
# and stage 03's bf16 gather must not pass as 4-byte weights.
has() { [[ " ${passed[*]} " == *" $1 "* ]]; }
if has back3_one && has ring3_one && has zero1_2_bf16; then
  judge "$WORK/back3_one.log" 3 ring "$tiny" > /dev/null 2>&1 && fail "control: the backend run passed as a ring run" ||
    echo "ok   (control) the backend run is not a ring run"
  judge "$WORK/ring3_one.log" 3 backend "$tiny" > /dev/null 2>&1 && fail "control: the ring run passed as a backend run" ||
    echo "ok   (control) the ring run is not a backend run"
  judge "$WORK/zero1_2_bf16.log" 2 ring "$tiny" 4 > /dev/null 2>&1 &&
    fail "control: stage 03's bf16 run passed with 4-byte weights" ||
    echo "ok   (control) stage 03's bf16 gather is not one of 4-byte weights"
else
  fail "the controls need ring3_one, back3_one and zero1_2_bf16 to pass first"
fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
