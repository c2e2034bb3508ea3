#!/usr/bin/env bash
# A training shard cut short while a run reads it (truncated in place, as `cp new.bin
# train.bin` or `truncate` does) ends the run with exit 2 and an error naming the shard,
# not with "Bus error" (common/mapping_fault.h). Control: a SIGBUS that is not a read of
# a shard (kill -BUS) still ends the process by the signal, as before.
# Usage: shard_cut.sh TRAIN01 PREPARE WORKDIR ROOT
set -euo pipefail
TRAIN01=$1 PREPARE=$2 WORK=$3 ROOT=$4
source "$ROOT/tests/trainer/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
ulimit -c 0  # the control's SIGBUS leaves no core file behind
make_corpus "$WORK" "$PREPARE"
failures=0

# start NAME: stage 01 on its own copy of the shards, for as long as it is let run; its pid
# in $pid, once it has logged a step (the shards mapped and read).
start() {
  mkdir -p "$WORK/$1"
  cp "$WORK/data/train.bin" "$WORK/data/val.bin" "$WORK/$1/"
  "$TRAIN01" $(tiny_args "$WORK/$1" "$WORK/$1/run") --set steps=1000000 --set val_every=0 --set sample_tokens=0 \
    > "$WORK/$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    grep -q '"kind":"train"' "$WORK/$1/run/metrics.jsonl" 2> /dev/null && return
    sleep 0.1
  done
  echo "FAIL [$1]: no step logged in 60 s"; exit 1
}
finish() {  # finish: $status, the exit status of $pid, or 124 if it runs on for 60 s
  for _ in $(seq 600); do
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  status=0
  if kill -0 "$pid" 2> /dev/null; then
    kill -KILL "$pid"
    wait "$pid" || true
    status=124
  else
    wait "$pid" || status=$?
  fi
}

start cut
truncate -s 2048 "$WORK/cut/train.bin"
finish
needle="error: shard '$WORK/cut/train.bin' could not be read while this process used it: it was truncated"
if [ "$status" = 2 ] && grep -qF -- "$needle" "$WORK/cut.log"; then
  echo "ok   the shard cut short: exit 2, $(grep -F -m1 -- "error:" "$WORK/cut.log" | cut -c1-120)..."
else
  echo "FAIL the shard cut short: exit status $status (expected 2), the error naming it $(grep -qF -- "$needle" \
    "$WORK/cut.log" && echo said || echo not said)"; tail -3 "$WORK/cut.log" | sed 's/^/    /'
  failures=$((failures + 1))
fi

start signalled
kill -BUS "$pid"
finish
if [ "$status" = $((128 + 7)) ] && ! grep -q "error: shard" "$WORK/signalled.log"; then
  echo "ok   kill -BUS: ended by the signal (status $status), no shard named"
else
  echo "FAIL kill -BUS: exit status $status (expected $((128 + 7)), SIGBUS's default action)"
  tail -3 "$WORK/signalled.log" | sed 's/^/    /'
  failures=$((failures + 1))
fi

((failures == 0)) || exit 1
echo "PASS"
