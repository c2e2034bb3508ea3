#!/usr/bin/env bash
# metrics.jsonl tells a resume from a new run: each launch that trains writes a "start"
# line with the step it trains from (docs/metrics.md), and notebooks/gptruns.py reads a
# run by them. Stage 01 trains 6 steps (checkpoint at 3), then a launch resumes step 3
# with another lr and trains 4..6 again, as a run killed after step 6 but saved at 3 would:
# the file holds steps 4..6 twice, and the run read from it must hold steps 1..6 once,
# 1..3 of the first launch and 4..6 of the second (their losses differ: the lr). The
# control: a fresh run appended to the same file (start 0) is read alone, and so is a
# checkpoint of another run directory resumed into it (its step never trained here); a run
# that wrote no checkpoint does not take the config of another run's later one.
# Usage: metrics_start.sh TRAIN01 PREPARE WORKDIR ROOT
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4
source "$(dirname "$0")/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
RUN="$WORK/run"
quiet=(--set val_every=0 --set val_batches=0 --set sample_tokens=0 --set keep_checkpoints=0)
"$TRAIN" $(tiny_args "$WORK/data" "$RUN") "${quiet[@]}" --set steps=6 --set checkpoint_every=3 > "$WORK/first.log"
"$TRAIN" $(tiny_args "$WORK/data" "$RUN") "${quiet[@]}" --set steps=6 --set "resume=$RUN/step_00000003" \
  --set lr=0.002 > "$WORK/resumed.log"
read_run() {  # read_run: the steps, starts and losses gptruns.py reads, and the file's
  GPT_NOTEBOOK_RUNS="$WORK" /usr/bin/python3 - "$ROOT" "$RUN" << 'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1] + "/notebooks")
import gptruns
lines = [json.loads(l) for l in open(sys.argv[2] + "/metrics.jsonl")]
run = gptruns.Run(os.path.basename(sys.argv[2]))  # a directory of GPT_NOTEBOOK_RUNS
print(json.dumps({"starts": [l["step"] for l in lines if l["kind"] == "start"],
                  "file_steps": [l["step"] for l in lines if l["kind"] == "train"],
                  "file_losses": [l["loss"] for l in lines if l["kind"] == "train"],
                  "steps": [l["step"] for l in run.train], "losses": [l["loss"] for l in run.train],
                  "config_lr": run.config.get("lr")}))
PY
}
/usr/bin/python3 - "$(read_run)" << 'PY'
import json, sys
r = json.loads(sys.argv[1])
assert r["starts"] == [0, 3], f"start lines at {r['starts']}, not [0, 3]"
assert r["file_steps"] == [1, 2, 3, 4, 5, 6, 4, 5, 6], f"the file's steps: {r['file_steps']}"
first, second = r["file_losses"][:6], r["file_losses"][6:]
assert first[3:] != second, "the control of the test itself: the resumed steps' losses should differ (another lr)"
assert r["steps"] == [1, 2, 3, 4, 5, 6], f"gptruns read the steps {r['steps']}, not 1..6 once"
assert r["losses"] == first[:3] + second, "gptruns did not take steps 1..3 of the first launch and 4..6 of the second"
print("ok   a resume's start line supersedes the steps past its checkpoint: 1..6 read once")
PY
"$TRAIN" $(tiny_args "$WORK/data" "$RUN") "${quiet[@]}" --set steps=2 > "$WORK/fresh.log"
/usr/bin/python3 - "$(read_run)" << 'PY'
import json, sys
r = json.loads(sys.argv[1])
assert r["starts"] == [0, 3, 0], f"start lines at {r['starts']}, not [0, 3, 0]"
assert r["steps"] == [1, 2] and r["losses"] == r["file_losses"][-2:], f"gptruns read {r['steps']} after a fresh run"
assert r["config_lr"] is not None, "the fresh run's own checkpoint (step 2) gave no config"
print("ok   a fresh run appended (start 0) is read alone")
PY
# A fresh run that writes no checkpoint, beside the step-2 checkpoint of the run before:
# that checkpoint is past this run's one step, so its config is not taken for this run's.
"$TRAIN" $(tiny_args "$WORK/data" "$RUN") "${quiet[@]}" --set steps=1 --set lr=0.001 --set checkpoint_at_end=false \
  > "$WORK/no_checkpoint.log"
/usr/bin/python3 - "$(read_run)" << 'PY'
import json, sys
r = json.loads(sys.argv[1])
assert r["steps"] == [1], f"gptruns read {r['steps']} after a one-step run"
assert r["config_lr"] is None, f"gptruns took the lr {r['config_lr']} of another run's checkpoint for this run's"
print("ok   another run's later checkpoint does not lend this run its config")
PY
# A checkpoint of another run directory resumed into this one: its start (step 5) follows
# no train line of step 5 here, so it begins a run of its own, steps 6..7 alone.
"$TRAIN" $(tiny_args "$WORK/data" "$WORK/other") "${quiet[@]}" --set steps=5 > "$WORK/other.log"
"$TRAIN" $(tiny_args "$WORK/data" "$RUN") "${quiet[@]}" --set steps=7 --set "resume=$WORK/other/step_00000005" \
  > "$WORK/from_other.log"
/usr/bin/python3 - "$(read_run)" << 'PY'
import json, sys
r = json.loads(sys.argv[1])
assert r["starts"] == [0, 3, 0, 0, 5], f"start lines at {r['starts']}, not [0, 3, 0, 0, 5]"
assert r["steps"] == [6, 7], f"gptruns read {r['steps']} after another directory's step 5 was resumed here"
print("ok   another run's checkpoint resumed here begins a run: steps 6..7 alone")
PY
echo "PASS"
