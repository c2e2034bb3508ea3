#!/usr/bin/env bash
# Bad input to stage 10: each case must exit with status 2 and a message naming the
# key, under mpirun as a user would run it.
# Usage: bad_input_cp.sh TRAIN10 PREPARE WORKDIR ROOT MPIEXEC
set -euo pipefail
TRAIN10=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5
source "$ROOT/tests/trainer/common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
failures=0
expect() {  # expect NAME NEEDLE NP key=value...
  local name=$1 needle=$2 np=$3 sets=()
  shift 3
  for kv in "$@"; do sets+=(--set "$kv"); done
  local status=0
  "$MPIEXEC" -np "$np" --oversubscribe "$TRAIN10" $(tiny_args "$WORK/data" "$WORK/run_$RANDOM") --set steps=1 \
    --set sample_tokens=0 "${sets[@]}" > "$WORK/out.txt" 2>&1 || status=$?
  if [ "$status" -ne 2 ]; then
    echo "FAIL [$name]: exit status $status, expected 2"; tail -5 "$WORK/out.txt" | sed 's/^/    /'
    failures=$((failures + 1)); return
  fi
  if ! grep -qF -- "$needle" "$WORK/out.txt"; then
    echo "FAIL [$name]: the message does not name '$needle':"; sed 's/^/    /' "$WORK/out.txt" | head -8
    failures=$((failures + 1)); return
  fi
  echo "ok   [$name]: $(grep -F -m1 -- "$needle" "$WORK/out.txt")"
}
expect "seq_len not in 2 cp chunks"   "seq_len=32 does not divide into 6 chunks"   3 cp=3
expect "contiguous: seq_len by cp"    "seq_len=30 does not divide into 4 chunks"   4 cp=4 seq_len=30 cp_split=contiguous
expect "unknown cp_split"             "cp_split=ring"                              2 cp=2 cp_split=ring
expect "cp x dp not the ranks"        "but the job has 3 ranks"                    3 cp=2
expect "cp x tp x dp not the ranks"   "dp=1 x tp=2 x pp=1 x cp=2"                  2 cp=2 tp=2 dp=1
[ "$failures" -eq 0 ] && echo "all bad-input cases of stage 10 refused as they must be" || exit 1
