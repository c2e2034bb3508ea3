#!/usr/bin/env bash
# Every rank must run rank 0's configuration: mpirun's MPMD form hands two ranks of stage
# 02 different learning rates, and the job must stop at once with exit 2, naming the
# rank, the key and both values (before, the replicas trained apart in silence), with no
# abort: every rank takes part in the comparison, and returns. Two stages' trainers in
# one job (02 and 03, the same configuration) stop the same way, naming both stages
# (before, they waited comm_timeout_s and blamed a lost peer). The control: ranks that
# differ only in `threads` train.
# Usage: configs_differ.sh TRAIN02 PREPARE WORKDIR ROOT MPIEXEC TRAIN03
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5 TRAIN03=$6
source "$(dirname "$0")/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rank() { echo -np 1 "$TRAIN" $(tiny_args "$WORK/data" "$WORK/run") --set steps=2 --set sample_tokens=0 "$@"; }

status=0
"$MPIEXEC" --oversubscribe $(rank --set lr=0.001) : $(rank --set lr=0.002) > "$WORK/differ.log" 2>&1 || status=$?
[ "$status" -eq 2 ] || { echo "FAIL: ranks with different lr: exit $status, expected 2"; tail -5 "$WORK/differ.log"; exit 1; }
grep -q "train: rank 1: error: this rank's configuration differs from rank 0's: lr=0.002 (rank 0: 0.001)" \
  "$WORK/differ.log" ||
  { echo "FAIL: the message does not name the rank, the key and both values"; cat "$WORK/differ.log"; exit 1; }
! grep -q "^step" "$WORK/differ.log" || { echo "FAIL: the ranks trained before refusing"; exit 1; }
! grep -q "MPI_ABORT" "$WORK/differ.log" || { echo "FAIL: the job was aborted (the ranks compare, then return)"; exit 1; }
echo "ok: $(grep -m1 "differs from rank 0" "$WORK/differ.log")"

status=0
"$MPIEXEC" --oversubscribe $(rank) : $(rank | sed "s|$TRAIN|$TRAIN03|") > "$WORK/stages.log" 2>&1 || status=$?
[ "$status" -eq 2 ] ||
  { echo "FAIL: stages 02 and 03 in one job: exit $status, expected 2"; tail -5 "$WORK/stages.log"; exit 1; }
grep -q "train: rank 1: error: this rank runs stage 03_zero1, rank 0 stage 02_ddp" "$WORK/stages.log" ||
  { echo "FAIL: the message does not name both stages"; cat "$WORK/stages.log"; exit 1; }
! grep -q "MPI_ABORT" "$WORK/stages.log" || { echo "FAIL: the job was aborted (the ranks compare, then return)"; exit 1; }
echo "ok: $(grep -m1 "runs stage" "$WORK/stages.log")"

rm -rf "$WORK/run"
"$MPIEXEC" --oversubscribe $(rank --set threads=1) : $(rank --set threads=2) > "$WORK/threads.log" 2>&1 ||
  { echo "FAIL: ranks differing only in threads did not train"; tail -5 "$WORK/threads.log"; exit 1; }
grep -q "^step     2/2" "$WORK/threads.log" || { echo "FAIL: no step 2 in the threads run"; exit 1; }
echo "ok: ranks that differ only in threads train"
echo PASS
