#!/usr/bin/env bash
# The trainer steps with the learning rate lr_schedule names: each schedule's run of 12
# steps (warmup 3, lr_decay_fraction 0.5, min_lr_ratio 0.1) logs in metrics.jsonl, for
# every step, the rate this script computes on its own from docs/config.md's formula
# (Python, double: relative difference at most 1e-12; the trainer prints the rate with
# 17 significant digits).
# Negative control: each run's rates are checked against every other schedule's formula
# too, and must fail there (the four differ after the warmup), so a trainer that ignored
# lr_schedule could not pass.
# Then the use wsd is for: the wsd run is saved at step 6 and resumed with steps=24. Steps
# 7 and 8 are in the stable phase in both (the 12-step run decays from step 9 on), so the
# resumed run takes the same rate, lr, at both, and step 8's loss (a forward on the
# weights step 7 updated) equals the 12-step run's bit for bit. A cosine run resumed the
# same way takes another rate at step 7 (higher: its decay is stretched) and step 8's loss
# differs (the control).
# The resumes say what they changed: the schedule's keys, with step 7's rate against the
# checkpoint's run's (equal for wsd, not for cosine; none said when no key changed), and
# the validation's windows when micro_batch_size changes their count, and the update's
# keys (AdamW's, the clip, the precision) with both values.
# Usage: lr_schedules.sh TRAIN PREPARE WORKDIR ROOT
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4
source "$(dirname "$0")/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"

keys=(--set steps=12 --set warmup_steps=3 --set lr_decay_fraction=0.5 --set min_lr_ratio=0.1 --set lr=0.002
      --set val_batches=0 --set sample_tokens=0 --set checkpoint_every=6 --set keep_checkpoints=0)
for schedule in cosine linear constant wsd; do
  "$TRAIN" $(tiny_args "$WORK/data" "$WORK/$schedule") "${keys[@]}" --set lr_schedule=$schedule \
    > "$WORK/$schedule.log" 2>&1 || { echo "FAIL: the $schedule run"; tail -5 "$WORK/$schedule.log"; exit 1; }
done

/usr/bin/python3 - "$WORK" <<'EOF'
import json, math, sys
work = sys.argv[1]
lr, r, warmup, steps, f = 0.002, 0.1, 3, 12, 0.5

def expected(schedule, s):  # s: the 0-based step; docs/config.md's formula
    if s < warmup:
        return lr * (s + 1) / warmup
    p = min(1.0, (s - warmup) / (steps - warmup))
    left = {"cosine": (1 + math.cos(math.pi * p)) / 2, "linear": 1 - p, "constant": 1.0,
            "wsd": 1 - math.sqrt(max(0.0, (p - (1 - f)) / f))}[schedule]
    return lr if schedule == "constant" else lr * (r + (1 - r) * left)

schedules = ["cosine", "linear", "constant", "wsd"]
failures = 0
for run in schedules:
    logged = [json.loads(l)["lr"] for l in open(f"{work}/{run}/metrics.jsonl") if '"kind":"train"' in l]
    if len(logged) != steps:
        print(f"FAIL {run}: {len(logged)} train lines, expected {steps}")
        failures += 1
        continue
    for formula in schedules:
        worst = max(abs(got - expected(formula, s)) / expected(formula, s) for s, got in enumerate(logged))
        if formula == run and worst > 1e-12:
            print(f"FAIL {run}: the logged rates differ from the formula by {worst:.3g} (relative)")
            failures += 1
        elif formula != run and worst < 1e-3:
            print(f"FAIL (control) {run}: the logged rates also pass as {formula}'s ({worst:.3g})")
            failures += 1
    print(f"{run}: {' '.join(f'{x:.6g}' for x in logged)}")
sys.exit(1 if failures else 0)
EOF
echo "PASS: every schedule's logged rates are its formula's, and no other's"

# train_line RUN STEP FIELD: a field of a train line of a run's metrics.
train_line() {
  /usr/bin/python3 -c 'import json, sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    if m["kind"] == "train" and m["step"] == int(sys.argv[2]): print(repr(m[sys.argv[3]]))' "$1/metrics.jsonl" "$2" "$3"
}
for schedule in wsd cosine; do
  "$TRAIN" $(tiny_args "$WORK/data" "$WORK/${schedule}_longer") "${keys[@]}" --set lr_schedule=$schedule \
    --set "resume=$WORK/$schedule/step_00000006" --set steps=24 > "$WORK/${schedule}_longer.log" 2>&1 ||
    { echo "FAIL: the $schedule resume"; tail -5 "$WORK/${schedule}_longer.log"; exit 1; }
done
for at in "7 lr" "8 lr" "8 loss"; do
  set -- $at
  a=$(train_line "$WORK/wsd" $1 $2) b=$(train_line "$WORK/wsd_longer" $1 $2)
  [ -n "$a" ] && [ "$a" = "$b" ] ||
    { echo "FAIL: wsd resumed with steps=24: step $1's $2 is $b, the 12-step run's $a"; exit 1; }
  echo "wsd, step $1's $2: $a in both"
done
c=$(train_line "$WORK/cosine" 8 loss) d=$(train_line "$WORK/cosine_longer" 8 loss)
[ -n "$c" ] && [ -n "$d" ] && [ "$c" != "$d" ] ||
  { echo "FAIL (control): cosine resumed with steps=24: step 8's loss '$d', the 12-step run's '$c'"; exit 1; }
echo "PASS: wsd resumed with more steps keeps the run's rates and losses; cosine's step 8 loss moves ($c -> $d)"

# The resume says that the schedule changed, and the rate step 7 takes against the one the
# checkpoint's run took (its metrics): cosine's moves, wsd's is the same. The control: a
# resume that changes no schedule key says nothing of it.
/usr/bin/python3 - "$WORK" << 'EOF'
import json, re, sys
work = sys.argv[1]
def logged_lr(run, step):
    for line in open(f"{work}/{run}/metrics.jsonl"):
        m = json.loads(line)
        if m["kind"] == "train" and m["step"] == step:
            return m["lr"]
for schedule in ("cosine", "wsd"):
    log = open(f"{work}/{schedule}_longer.log").read()
    found = re.search(r"the learning-rate schedule changed \(steps 12 -> 24\): step 7 trains at lr (\S+?),"
                      r" (?:where the checkpoint's run would have used (\S+)|as the checkpoint's run would have)", log)
    if not found:
        sys.exit(f"FAIL: the {schedule} resume with steps=24 did not say the schedule changed:\n{log}")
    now, then = float(found.group(1)), float(found.group(2) or found.group(1))
    want_now, want_then = logged_lr(f"{schedule}_longer", 7), logged_lr(schedule, 7)
    # The note prints 4 significant digits: a relative 5e-4 at most.
    if abs(now - want_now) > 1e-3 * want_now or abs(then - want_then) > 1e-3 * want_then:
        sys.exit(f"FAIL: {schedule}: the note says {now} against {then}, the runs logged {want_now} and {want_then}")
    if (now == then) != (schedule == "wsd"):
        sys.exit(f"FAIL: {schedule}: the note's rates {now} and {then} should be equal for wsd alone")
    print(f"ok   {schedule} resumed with steps=24 says: step 7 at lr {now}, the checkpoint's run {then}")
EOF
"$TRAIN" $(tiny_args "$WORK/data" "$WORK/wsd_same") "${keys[@]}" --set lr_schedule=wsd \
  --set "resume=$WORK/wsd/step_00000006" --set steps=12 > "$WORK/wsd_same.log" 2>&1 ||
  { echo "FAIL: the unchanged wsd resume"; tail -5 "$WORK/wsd_same.log"; exit 1; }
! grep -q "schedule changed" "$WORK/wsd_same.log" ||
  { echo "FAIL (control): a resume with the same schedule said it changed"; grep "schedule" "$WORK/wsd_same.log"
    exit 1; }
echo "PASS: a resume names the schedule keys it changed and the next step's rate against the checkpoint's run's"

# A validation reads val_batches x micro_batch_size windows: from a run that validated 2 x 2
# (configs/tiny.json), a resume with micro-batches of 4 reads 2 x 4 = 8 and says so; the
# control, a resume with the checkpoint's micro-batches, says nothing of it.
"$TRAIN" $(tiny_args "$WORK/data" "$WORK/validated") --set steps=2 --set sample_tokens=0 > "$WORK/validated.log" 2>&1 ||
  { echo "FAIL: the validated run"; tail -5 "$WORK/validated.log"; exit 1; }
for mb in 2 4; do
  "$TRAIN" $(tiny_args "$WORK/data" "$WORK/validated") --set steps=4 --set sample_tokens=0 --set resume=latest \
    --set micro_batch_size=$mb --set checkpoint_at_end=false > "$WORK/validated_mb$mb.log" 2>&1 ||
    { echo "FAIL: the resume with micro_batch_size=$mb"; tail -5 "$WORK/validated_mb$mb.log"; exit 1; }
done
grep -qF "a validation now reads 8 windows (val_batches 2 x micro_batch_size 4), the checkpoint's run read 4 (2 x 2)" \
  "$WORK/validated_mb4.log" ||
  { echo "FAIL: the resume with other micro-batches did not name its validation windows"; exit 1; }
! grep -q "a validation now reads" "$WORK/validated_mb2.log" ||
  { echo "FAIL (control): a resume with the same validation said it changed"; exit 1; }
# That run had ended at step 2 (steps 2 -> 4): no rate of its own at step 3 to compare, so
# the note gives the one it ended at.
grep -qF "the learning-rate schedule changed (steps 2 -> 4): step 3 trains at lr" "$WORK/validated_mb2.log" &&
  grep -qF "(the checkpoint's run ended at step 2, at lr" "$WORK/validated_mb2.log" ||
  { echo "FAIL: extending a finished run does not say where the checkpoint's run ended"; exit 1; }
echo "PASS: a resume that validates on other windows says how many, against the checkpoint's run"

# The update's keys: a resume with other AdamW values, clip and precision names each, with
# the checkpoint's value and its own; the control (validated_mb2, none changed) names none.
"$TRAIN" $(tiny_args "$WORK/data" "$WORK/validated") --set steps=4 --set sample_tokens=0 --set resume=latest \
  --set checkpoint_at_end=false --set beta2=0.99 --set grad_clip=0 --set precision=bf16 > "$WORK/update.log" 2>&1 ||
  { echo "FAIL: the resume with another update"; tail -5 "$WORK/update.log"; exit 1; }
grep -qF 'the update changed (grad_clip 1.0 -> 0.0, precision "fp32" -> "bf16", beta2 0.95 -> 0.99): from step 3' \
  "$WORK/update.log" || { echo "FAIL: the resume with another update did not name it:"; grep resume= "$WORK/update.log"
  exit 1; }
! grep -q "the update changed" "$WORK/validated_mb2.log" ||
  { echo "FAIL (control): a resume with the same update said it changed"; exit 1; }
echo "PASS: a resume that changes the update names its keys and both values"
