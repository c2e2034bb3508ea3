#!/usr/bin/env bash
# A run directory holds one run's checkpoints. A run whose run_dir already holds a
# checkpoint past the step it starts from (a fresh run: any checkpoint; resume=PATH: one
# newer than PATH) would write beside another run's checkpoints: pruning, which keeps
# the newest steps, would delete its own saves first, and resume=latest would later pick
# the other run's. Such a run stops with exit status 2 and a message naming the
# directory and the newest checkpoint, and changes nothing there. Controls: resume=latest,
# resume=<the newest>, and a fresh run in a directory without checkpoints all train.
# Also: a save killed between publish's two renames leaves step_N.old as the only copy
# of step N; resume=latest finds it, and pruning removes it later like any checkpoint.
# Usage: run_dir_history.sh TRAIN01 PREPARE WORKDIR ROOT
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4
source "$(dirname "$0")/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
D="$WORK/data" RUN="$WORK/run"
quiet=(--set val_every=0 --set val_batches=0 --set sample_tokens=0)
train() { "$TRAIN" $(tiny_args "$D" "$RUN") "${quiet[@]}" "$@"; }
snapshot() { (cd "$RUN" && find . -path ./.lock -prune -o -type f -print0 | sort -z | xargs -0 sha256sum); }

# The earlier run: checkpoints at steps 2 and 4, all kept.
train --set steps=4 --set checkpoint_every=2 --set keep_checkpoints=0 > "$WORK/first.log"
[ -d "$RUN/step_00000002" ] && [ -d "$RUN/step_00000004" ] || { echo "FAIL: the first run left no checkpoints"; exit 1; }
snapshot > "$WORK/before.txt"

expect_refused_here() {  # NAME KEYS...: exit 2, names run_dir and step_00000004, no change
  local name=$1 status=0
  shift
  train "$@" > "$WORK/$name.log" 2>&1 || status=$?
  [ "$status" -eq 2 ] || { echo "FAIL: $name exited $status, expected 2"; cat "$WORK/$name.log"; exit 1; }
  grep -q "run_dir '$RUN' already holds checkpoints .*step_00000004" "$WORK/$name.log" ||
    { echo "FAIL: $name's message names neither the directory nor its newest checkpoint"; cat "$WORK/$name.log"; exit 1; }
  snapshot > "$WORK/after_$name.txt"
  diff "$WORK/before.txt" "$WORK/after_$name.txt" || { echo "FAIL: the refused $name changed the run directory"; exit 1; }
  echo "ok: $name refused: $(grep -m1 'already holds' "$WORK/$name.log" | cut -c1-110)..."
}
expect_refused_here fresh --set steps=3 --set keep_checkpoints=1
expect_refused_here older --set steps=3 --set "resume=$RUN/step_00000002"

# Controls: continuing the run is accepted, by name or by latest; so is a fresh run in a
# directory that holds metrics but no checkpoint.
train --set steps=5 --set "resume=$RUN/step_00000004" --set keep_checkpoints=0 > "$WORK/newest.log"
grep -q "resumed from $RUN/step_00000004 at step 4" "$WORK/newest.log" || { echo "FAIL: resume=<newest> did not resume"; exit 1; }
train --set steps=6 --set resume=latest --set keep_checkpoints=0 > "$WORK/latest.log"
grep -q "resumed from $RUN/step_00000005 at step 5" "$WORK/latest.log" || { echo "FAIL: resume=latest did not resume"; exit 1; }
mkdir -p "$WORK/metrics_only" && cp "$RUN/metrics.jsonl" "$WORK/metrics_only/"
"$TRAIN" $(tiny_args "$D" "$WORK/metrics_only") "${quiet[@]}" --set steps=1 > "$WORK/metrics_only.log" ||
  { echo "FAIL: a fresh run in a directory without checkpoints was refused"; cat "$WORK/metrics_only.log"; exit 1; }

# A save of step 6 killed between its renames: step_00000006 moved aside, not replaced.
mv "$RUN/step_00000006" "$RUN/step_00000006.old"
train --set steps=7 --set resume=latest --set keep_checkpoints=2 > "$WORK/old.log"
grep -q "resumed from $RUN/step_00000006.old at step 6" "$WORK/old.log" ||
  { echo "FAIL: resume=latest did not find step_00000006.old"; cat "$WORK/old.log"; exit 1; }
# keep 2: steps 6 (as .old) and 7 stay, the older ones are pruned.
kept=$(cd "$RUN" && ls -d step_* | tr '\n' ' ')
[ "$kept" = "step_00000006.old step_00000007 " ] || { echo "FAIL: after pruning to 2 the directory holds: $kept"; exit 1; }
train --set steps=8 --set resume=latest --set keep_checkpoints=1 > "$WORK/prune_old.log"
kept=$(cd "$RUN" && ls -d step_* | tr '\n' ' ')
[ "$kept" = "step_00000008 " ] || { echo "FAIL: after pruning to 1 the directory holds: $kept"; exit 1; }
echo "PASS"
