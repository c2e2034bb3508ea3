#!/usr/bin/env bash
# A run directory holds one run's checkpoints. A run that starts below checkpoints
# already there (a fresh run: any; resume=PATH: those at or past its step but PATH) moves them, bytes
# unchanged, into run_dir/set_aside_<time>/ and says so, before it writes anything:
# left in place, pruning (newest steps kept) would delete the new run's saves first,
# and resume=latest would later continue the other run. Checked: the moved files keep
# their bytes; the new run's checkpoints are the only step_ directories left; a run that
# writes no checkpoint (steps=0, checkpoint_at_end=false) and resume=latest move nothing;
# a run that trains no step (steps=0, or a finished run resumed with its own steps)
# writes, moves and prunes nothing even with checkpoint_at_end and keep_checkpoints=1.
# The moving waits for the run's first save: a run refused at start (a missing shard, a
# corrupt checkpoint to resume) moves nothing, on one rank and on two (TRAIN02, which
# also sets aside at its first save, as stage 01 does).
# checkpoint_at_end=false still saves a last step that checkpoint_every falls on.
# Also: a save killed between publish's two renames leaves step_N.old as the only copy
# of step N; resume=latest finds it, and pruning removes it later like any checkpoint.
# Usage: run_dir_history.sh TRAIN01 PREPARE WORKDIR ROOT [TRAIN02 MPIEXEC]
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4 TRAIN02=${5:-} MPIEXEC=${6:-}
source "$(dirname "$0")/common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
D="$WORK/data" RUN="$WORK/run"
quiet=(--set val_every=0 --set val_batches=0 --set sample_tokens=0)
train() { "$TRAIN" $(tiny_args "$D" "$RUN") "${quiet[@]}" "$@"; }
steps_here() { (cd "$RUN" && ls -d step_* 2>/dev/null | tr '\n' ' '); }
hashes() { (cd "$1" && sha256sum step_*/*); }

# resume=latest in an empty run_dir starts at step 0 and says so (a mistyped run_dir shows).
train --set steps=1 --set resume=latest --set checkpoint_at_end=false > "$WORK/fresh_latest.log"
grep -q "resume=latest: no complete checkpoint in $RUN yet, so training starts at step 0" "$WORK/fresh_latest.log" ||
  { echo "FAIL: resume=latest in an empty run_dir did not say it starts fresh"; cat "$WORK/fresh_latest.log"; exit 1; }
rm -rf "$RUN"

# The earlier run: checkpoints at steps 2 and 4, all kept.
train --set steps=4 --set checkpoint_every=2 --set keep_checkpoints=0 > "$WORK/first.log"
[ "$(steps_here)" = "step_00000002 step_00000004 " ] || { echo "FAIL: the first run left $(steps_here)"; exit 1; }
hashes "$RUN" > "$WORK/first.sha"

# A run refused at start moves nothing (it would have set both aside): resume=latest
# still continues the earlier run.
refused() {  # refused NAME COMMAND...: exit status 2, and run_dir as the first run left it
  local name=$1 status=0
  shift
  "$@" > "$WORK/refused.log" 2>&1 || status=$?
  [ "$status" = 2 ] || { echo "FAIL: $name: exit status $status, expected 2"; cat "$WORK/refused.log"; exit 1; }
  [ "$(steps_here)" = "step_00000002 step_00000004 " ] && ! ls -d "$RUN"/set_aside_* > /dev/null 2>&1 ||
    { echo "FAIL: $name (refused) moved checkpoints: $(steps_here)"; cat "$WORK/refused.log"; exit 1; }
  hashes "$RUN" | diff - "$WORK/first.sha" || { echo "FAIL: $name (refused) changed a checkpoint"; exit 1; }
}
cp -r "$RUN/step_00000002" "$WORK/corrupt_step" && truncate -s 100 "$WORK/corrupt_step/param.bin"
refused "a missing shard" train --set steps=3 --set "train_data=$WORK/missing.bin"
refused "a corrupt checkpoint to resume" train --set steps=3 --set "resume=$WORK/corrupt_step"
if [ -n "$TRAIN02" ]; then
  mpi=("$MPIEXEC" -np 2 --oversubscribe "$TRAIN02")
  refused "a missing shard, 2 ranks" "${mpi[@]}" $(tiny_args "$D" "$RUN") "${quiet[@]}" --set steps=3 \
    --set "train_data=$WORK/missing.bin"
fi
echo "ok: runs refused at start moved nothing"

# A run that writes no checkpoint moves nothing: evaluating step 2 beside step 4.
train --set steps=0 --set "resume=$RUN/step_00000002" --set checkpoint_at_end=false > "$WORK/eval.log"
[ "$(steps_here)" = "step_00000002 step_00000004 " ] || { echo "FAIL: an evaluation moved checkpoints: $(steps_here)"; exit 1; }
! grep -q "set_aside" "$WORK/eval.log" || { echo "FAIL: an evaluation reported moving checkpoints"; exit 1; }

# A run that trains no step leaves the directory as it was, with the defaults' end
# checkpoint on and a pruning that would keep one: an evaluation of step 2, and the
# finished run resumed with its own steps; the evaluation again with the path spelled
# with a trailing slash (or a dot segment), as a shell's completion writes it.
for run in "steps=0 resume=$RUN/step_00000002" "steps=4 resume=latest" "steps=0 resume=$RUN/step_00000002/" \
           "steps=0 resume=$RUN/./step_00000002/."; do
  read -r steps resume <<< "$run"
  train --set "$steps" --set "$resume" --set keep_checkpoints=1 > "$WORK/no_step.log"
  [ "$(steps_here)" = "step_00000002 step_00000004 " ] ||
    { echo "FAIL: $run (no step trained) left $(steps_here)"; cat "$WORK/no_step.log"; exit 1; }
  hashes "$RUN" | diff - "$WORK/first.sha" || { echo "FAIL: $run (no step trained) rewrote a checkpoint"; exit 1; }
  ! grep -q "set_aside\|^checkpoint:" "$WORK/no_step.log" ||
    { echo "FAIL: $run (no step trained) moved or wrote a checkpoint"; cat "$WORK/no_step.log"; exit 1; }
done
# The same evaluation run inside the run directory, spelled relative to it (run_dir=.).
(cd "$RUN" && train --set run_dir=. --set steps=0 --set resume=./step_00000002 --set keep_checkpoints=1 \
  > "$WORK/no_step.log")
[ "$(steps_here)" = "step_00000002 step_00000004 " ] ||
  { echo "FAIL: resume=./step_00000002 in run_dir=. left $(steps_here)"; cat "$WORK/no_step.log"; exit 1; }
hashes "$RUN" | diff - "$WORK/first.sha" || { echo "FAIL: resume=./step_00000002 rewrote a checkpoint"; exit 1; }
echo "ok: runs that train no step write, move and prune nothing"

# A fresh run: both earlier checkpoints are set aside, unchanged; the new run's 3 is left.
train --set steps=3 --set keep_checkpoints=1 > "$WORK/fresh.log"
aside=$(ls -d "$RUN"/set_aside_* | head -1)
grep -q "moved to $aside" "$WORK/fresh.log" || { echo "FAIL: the fresh run did not say where it moved them"; cat "$WORK/fresh.log"; exit 1; }
[ "$(steps_here)" = "step_00000003 " ] || { echo "FAIL: after the fresh run run_dir holds $(steps_here)"; exit 1; }
hashes "$aside" | diff - "$WORK/first.sha" || { echo "FAIL: the set-aside checkpoints changed"; exit 1; }
echo "ok: a fresh run set the earlier run's checkpoints aside, unchanged: ${aside#"$RUN"/}"

# resume=latest continues this run and moves nothing; resuming an older step sets the
# newer ones aside.
train --set steps=5 --set resume=latest --set checkpoint_every=1 --set keep_checkpoints=0 > "$WORK/latest.log"
grep -q "resumed from $RUN/step_00000003 at step 3" "$WORK/latest.log" || { echo "FAIL: resume=latest did not resume step 3"; exit 1; }
! grep -q "passed over" "$WORK/latest.log" || { echo "FAIL: resume=latest passed over a checkpoint in a sound run_dir"; exit 1; }
[ "$(steps_here)" = "step_00000003 step_00000004 step_00000005 " ] || { echo "FAIL: after resume=latest: $(steps_here)"; exit 1; }
[ "$(ls -d "$RUN"/set_aside_* | wc -l)" = 1 ] || { echo "FAIL: resume=latest set checkpoints aside"; exit 1; }
train --set steps=6 --set "resume=$RUN/step_00000003" --set keep_checkpoints=0 > "$WORK/older.log"
[ "$(steps_here)" = "step_00000003 step_00000006 " ] || { echo "FAIL: after resuming step 3: $(steps_here)"; exit 1; }
[ "$(ls -d "$RUN"/set_aside_*/step_* | wc -l)" = 4 ] || { echo "FAIL: steps 4 and 5 were not set aside"; ls -R "$RUN"; exit 1; }
echo "ok: resuming step 3 set steps 4 and 5 aside"

# A save of step 6 killed between its renames: step_00000006 moved aside, not replaced.
mv "$RUN/step_00000006" "$RUN/step_00000006.old"
train --set steps=7 --set resume=latest --set keep_checkpoints=2 > "$WORK/old.log"
grep -q "resumed from $RUN/step_00000006.old at step 6" "$WORK/old.log" ||
  { echo "FAIL: resume=latest did not find step_00000006.old"; cat "$WORK/old.log"; exit 1; }
[ "$(steps_here)" = "step_00000006.old step_00000007 " ] || { echo "FAIL: after pruning to 2 the directory holds: $(steps_here)"; exit 1; }
# What a prune killed while deleting leaves (it renames a checkpoint step_N.pruned first,
# so no step_N without its manifest is left behind) goes at the next prune; an entry
# that only ends in .pruned is not the run's and stays.
mkdir -p "$RUN/step_00000001.pruned" "$RUN/step_00000002.old.pruned" "$RUN/notes.pruned"
echo half > "$RUN/step_00000001.pruned/adam_v.bin"
train --set steps=8 --set resume=latest --set keep_checkpoints=1 > "$WORK/prune_old.log"
[ "$(steps_here)" = "step_00000008 " ] || { echo "FAIL: after pruning to 1 the directory holds: $(steps_here)"; exit 1; }
[ -d "$RUN/notes.pruned" ] || { echo "FAIL: pruning removed notes.pruned, which is not a checkpoint"; exit 1; }
rm -r "$RUN/notes.pruned"
echo "ok: pruning removed what a cut-short prune left"
# A metrics log whose last line a stopped run tore (killed mid-write, a full disk): the
# next run ends that line and writes its own on lines of their own, the torn bytes kept.
truncate -s -20 "$RUN/metrics.jsonl"
torn=$(tail -c 80 "$RUN/metrics.jsonl")  # the torn line's last bytes (lines are longer)
train --set steps=9 --set resume=latest > "$WORK/torn.log"
/usr/bin/python3 - "$RUN/metrics.jsonl" "$torn" <<'PY' || { echo "FAIL: the log after a torn line"; exit 1; }
import json, sys
lines = open(sys.argv[1]).read().split("\n")
def ok(line):
    try:
        json.loads(line)
        return True
    except ValueError:
        return False
bad = [line for line in lines if line.strip() and not ok(line)]
assert len(bad) == 1 and bad[0].endswith(sys.argv[2]), f"torn lines: {bad}"
assert any(ok(l) and json.loads(l).get("step") == 9 for l in lines), "no line of step 9"
PY
echo "ok: a torn last line stays as it was, ended; the next run's lines parse"

# What a save would replace or pruning delete at the run's start step itself is another
# run's too: a fresh run's step 0 over another run's step 0; a resume of run B's step 2
# into run A, which holds its own step 2; and entries named step_N that are no
# checkpoint (a directory without a manifest, a file). Each is set aside, bytes unchanged.
other() { "$TRAIN" $(tiny_args "$D" "$1") "${quiet[@]}" "${@:2}"; }
aside_hashes() { (cd "$1"/set_aside_* && find step_* -type f | sort | xargs sha256sum); }
other "$WORK/c" --set steps=0 --set seed=1 > /dev/null
(cd "$WORK/c" && find step_00000000 -type f | sort | xargs sha256sum) > "$WORK/c0.sha"
other "$WORK/c" --set steps=0 --set seed=2 --set keep_checkpoints=1 > "$WORK/c.log"
aside_hashes "$WORK/c" | diff - "$WORK/c0.sha" > /dev/null ||
  { echo "FAIL: a fresh steps=0 run did not set the other run's step 0 aside, unchanged"; cat "$WORK/c.log"; exit 1; }
other "$WORK/a" --set steps=2 > /dev/null
other "$WORK/b" --set steps=2 --set seed=7 > /dev/null
(cd "$WORK/a" && find step_00000002 -type f | sort | xargs sha256sum) > "$WORK/a2.sha"
other "$WORK/a" --set steps=3 --set seed=7 --set "resume=$WORK/b/step_00000002" > "$WORK/ab.log"
aside_hashes "$WORK/a" | diff - "$WORK/a2.sha" > /dev/null ||
  { echo "FAIL: resuming B's step 2 into A did not set A's own step 2 aside"; cat "$WORK/ab.log"; exit 1; }
mkdir -p "$WORK/d/step_00000001" && echo notes > "$WORK/d/step_00000001/notes.txt" && echo a file > "$WORK/d/step_00000002"
other "$WORK/d" --set steps=2 --set checkpoint_every=1 > "$WORK/d.log"
[ "$(cat "$WORK"/d/set_aside_*/step_00000001/notes.txt)" = notes ] && [ "$(cat "$WORK"/d/set_aside_*/step_00000002)" = "a file" ] ||
  { echo "FAIL: entries named step_N that are no checkpoint were not set aside"; ls -R "$WORK/d"; exit 1; }
echo "ok: another run's step 0, A's own step 2 under B's, and step_N entries that are no checkpoint were set aside"

# resume=latest passes over a newest step_N without its manifest (damaged), and says so
# as the run starts, before it trains: the run resumes the newest complete one.
other "$WORK/e" --set steps=2 --set checkpoint_every=1 --set keep_checkpoints=0 > /dev/null
rm "$WORK/e/step_00000002/manifest.json"
other "$WORK/e" --set steps=3 --set resume=latest > "$WORK/e.log"
grep -q "resume=latest: passed over step_00000002 in $WORK/e: no manifest.json" "$WORK/e.log" &&
  grep -q "resumed from $WORK/e/step_00000001 at step 1" "$WORK/e.log" ||
  { echo "FAIL: resume=latest did not name the damaged step_00000002 it passed over"; cat "$WORK/e.log"; exit 1; }
[ "$(head -n 1 "$WORK/e.log" | grep -c "passed over")" = 1 ] ||
  { echo "FAIL: the note on step_00000002 was not the run's first line"; cat "$WORK/e.log"; exit 1; }
echo "ok: resume=latest named the damaged newest checkpoint it passed over"

# Two ranks set the earlier run's checkpoints aside at their first save (a copy of the
# directory's one checkpoint now, step 8).
if [ -n "$TRAIN02" ]; then
  mkdir "$WORK/run02" && cp -r "$RUN/step_00000008" "$WORK/run02/"
  "${mpi[@]}" $(tiny_args "$D" "$WORK/run02") "${quiet[@]}" --set steps=1 > "$WORK/fresh02.log" 2>&1 ||
    { echo "FAIL: the 2-rank fresh run failed"; cat "$WORK/fresh02.log"; exit 1; }
  grep -q "moved to $WORK/run02/set_aside_" "$WORK/fresh02.log" ||
    { echo "FAIL: the 2-rank run did not say it moved step 8"; cat "$WORK/fresh02.log"; exit 1; }
  left=$(cd "$WORK/run02" && ls -d step_* | tr '\n' ' ') moved=$(cd "$WORK/run02" && ls -d set_aside_*/step_*)
  [ "$left" = "step_00000001 " ] && [ "${moved#*/}" = step_00000008 ] ||
    { echo "FAIL: after the 2-rank run run_dir holds $left and $moved"; exit 1; }
  echo "ok: two ranks set step 8 aside at their first save"
fi

# checkpoint_at_end=false keeps the periodic saves, the last step's among them when
# checkpoint_every falls on it (saved once, at the end); the control: a last step it does
# not fall on is not saved. On one rank (stage 01) and on two (the driver).
last_saves() {  # last_saves NAME STEPS EXPECTED COMMAND...
  local name=$1 steps=$2 want=$3 dir="$WORK/last_$1"
  shift 3
  "$@" $(tiny_args "$D" "$dir") "${quiet[@]}" --set "steps=$steps" --set checkpoint_every=2 \
    --set checkpoint_at_end=false --set keep_checkpoints=0 > "$dir.log" 2>&1 ||
    { echo "FAIL: $name: the run failed"; tail -5 "$dir.log"; exit 1; }
  local got
  got=$(cd "$dir" && ls -d step_* | tr '\n' ' ')
  [ "$got" = "$want" ] ||
    { echo "FAIL: $name: steps=$steps checkpoint_every=2 checkpoint_at_end=false saved $got, not $want"; exit 1; }
  echo "ok: $name: steps=$steps checkpoint_every=2 checkpoint_at_end=false saves $want"
}
last_saves one_rank 4 "step_00000002 step_00000004 " "$TRAIN"
last_saves one_rank_odd 5 "step_00000002 step_00000004 " "$TRAIN"
if [ -n "$TRAIN02" ]; then
  last_saves two_ranks 4 "step_00000002 step_00000004 " "${mpi[@]}"
  last_saves two_ranks_odd 5 "step_00000002 step_00000004 " "${mpi[@]}"
fi
echo "PASS"
