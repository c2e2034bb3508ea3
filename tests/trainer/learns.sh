#!/usr/bin/env bash
# The trainer learns: on a repetitive corpus the loss must fall well below the
# uniform-guess loss ln(256) = 5.55 within 300 steps, in fp32 and in bf16, and
# metrics.jsonl must hold one train line per step, validation lines and a sample. The
# same model before its first step must fail the check.
# Usage: learns.sh TRAIN PREPARE WORKDIR ROOT
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4
source "$(dirname "$0")/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
# The check both the trained runs and the control go through: the last validation loss
# of a run's metrics, and whether it is below 2.0 (the bound's reason is below).
last_val_loss() { grep '"kind":"val"' "$1/metrics.jsonl" | tail -1 | sed -E 's/.*"val_loss":([^,}]*).*/\1/'; }
learned() { awk -v l="$1" 'BEGIN { exit !(l < 2.0) }'; }

# Negative control: the same model evaluated before any step (steps=0) must not pass.
"$TRAIN" $(tiny_args "$WORK/data" "$WORK/untrained") --set steps=0 --set threads=1 > "$WORK/untrained.log"
untrained=$(last_val_loss "$WORK/untrained")
[ -n "$untrained" ] || { echo "FAIL (control): the untrained run logged no validation loss"; exit 1; }
if learned "$untrained"; then echo "FAIL (control): the untrained model's $untrained passes"; exit 1; fi
echo "PASS (control): the untrained model's validation loss $untrained is rejected"

for precision in fp32 bf16; do
  run="$WORK/$precision"
  "$TRAIN" $(tiny_args "$WORK/data" "$run") --set steps=300 --set precision=$precision \
    --set val_every=100 --set lr=0.01 --set threads=1 > "$run.log"
  m="$run/metrics.jsonl"
  n_train=$(grep -c '"kind":"train"' "$m")
  [ "$n_train" -eq 300 ] || { echo "FAIL ($precision): $n_train train lines, expected 300"; exit 1; }
  grep -q '"kind":"val"' "$m" || { echo "FAIL ($precision): no validation line"; exit 1; }
  grep -q '"kind":"sample"' "$m" || { echo "FAIL ($precision): no sample line"; exit 1; }
  # A whole sample: as many tokens as configured, not cut short (tests/trainer/stop_signal.py
  # has a sample a stop signal cut).
  sample_tokens=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["sample_tokens"])' \
    "$ROOT/configs/tiny.json")
  /usr/bin/python3 - "$m" "$sample_tokens" <<'PY' || { echo "FAIL ($precision): the sample line"; exit 1; }
import json, sys
s = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "sample"][-1]
assert s["cut_short"] is False and s["tokens"] == int(sys.argv[2]), (s["cut_short"], s["tokens"], sys.argv[2])
PY
  last=$(last_val_loss "$run")
  # The corpus is two sentences repeated with a counter: a model that has learned
  # anything is far below the uniform 5.55 (seen: 1.3 in fp32, 1.6 in bf16 at 300
  # steps); 2.0 leaves room for any sane run and still fails a model that did not learn.
  learned "$last" ||
    { echo "FAIL ($precision): final validation loss $last is not below 2.0"; exit 1; }
  echo "PASS ($precision): final validation loss $last"
done
