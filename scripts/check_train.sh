#!/usr/bin/env bash
# Checks scripts/train.sh, the one command from a fresh machine to a sample:
#   1. arguments the trainer would refuse for their form (an unknown flag, an unknown
#      key, a setting without '=', a missing config file, one that is not JSON, over
#      1 MiB, nested too deeply or names an unknown key) exit with status 2 and a
#      message naming the argument, before anything is installed or built: the build
#      directory it is given is never created and no step is logged;
#   2. valid arguments in each form (--set key=value, --set=key=value, key=value) reach
#      the trainer: a short run of the latest stage trains the steps asked for,
#      validates and prints a sample;
#   3. a config on standard input reaches the trainer unread, and a config file that
#      names its device keeps it (no device=auto added).
# Uses the build in GPT_BUILD_DIR (test.sh's `default` preset; GPT_TRAIN_PRESET names
# another) and does not install packages (GPT_SKIP_SETUP=1).
#
#   scripts/check_train.sh
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
takes_no_arguments "$@"
cd "$GPT_ROOT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_refused NAME NEEDLE ARGS...: train.sh ARGS exits 2 naming NEEDLE, untouched.
expect_refused() {
  local name="$1" needle="$2" status=0
  shift 2
  GPT_BUILD_DIR="$work/never_built" scripts/train.sh "$@" > "$work/out.txt" 2> "$work/err.txt" || status=$?
  if [[ $status != 2 ]]; then fail "$name: exit $status, not 2 ($(tail -1 "$work/err.txt"))"
  elif ! grep -qF -- "$needle" "$work/err.txt"; then fail "$name: the message does not name '$needle': $(cat "$work/err.txt")"
  elif [[ -e "$work/never_built" ]] || grep -q '^==>' "$work/err.txt"; then fail "$name: refused only after setup or build began"
  else echo "ok   $name: $(cat "$work/err.txt")"; fi
}
expect_refused "unknown flag" "argument '--steps'" --steps 3
expect_refused "unknown key after --set" "unknown key 'stepz'" --set stepz=3
expect_refused "unknown key in --set=" "unknown key 'lrate'" --set=lrate=0.1
expect_refused "unknown bare key" "unknown key 'devise'" devise=cpu
expect_refused "a setting without =" "argument 'steps'" steps
expect_refused "--set without a value" "--set needs key=value" --set
expect_refused "missing config" "config file 'configs/nope.json' not found" --config configs/nope.json
expect_refused "config a directory" "config file 'configs' is a directory" --config configs
expect_refused "config twice" "--config given twice ('configs/tiny.json' and 'configs/small.json')" \
  --config configs/tiny.json --config=configs/small.json
expect_refused "config empty" "--config needs a file name (it was empty)" --config=
printf '{ "steps": 3, }\n' > "$work/trailing_comma.json"
expect_refused "config not JSON" "config file '$work/trailing_comma.json': not JSON" \
  --config "$work/trailing_comma.json"
printf '[1, 2]\n' > "$work/array.json"
expect_refused "config not an object" "'$work/array.json': not a JSON object" --config "$work/array.json"
sed 's/"steps"/"stepz"/' configs/small.json > "$work/typo.json"
expect_refused "config with an unknown key" "'$work/typo.json': unknown key 'stepz'" --config "$work/typo.json"
truncate -s 2M "$work/big.json"
expect_refused "config over 1 MiB" "'$work/big.json' is over 1 MiB long" --config "$work/big.json"
# 65 levels with the object itself (the trainer's bound is 64), and brackets in a string
# with an escaped quote, which do not count.
python3 -c "print('{\"prompt\": \"a\\\\\"[[\", \"top_k\": ' + '[' * 64 + ']' * 64 + '}')" > "$work/deep.json"
expect_refused "config nested too deeply" "'$work/deep.json': nested deeper than 64 levels" --config "$work/deep.json"

# The three forms of a setting, accepted and applied: 3 steps, a 24-token sample.
status=0
GPT_SKIP_SETUP=1 scripts/train.sh --set steps=3 --set=sample_tokens=24 "run_dir=$work/run" device=cpu \
  > "$work/out.txt" 2> "$work/err.txt" || status=$?
stage="$(latest_stage)"
if [[ $status != 0 ]]; then fail "a valid run exited $status: $(tail -5 "$work/err.txt")"
else
  grep -q "training stage $stage with configs/small.json" "$work/err.txt" || fail "the run did not train the latest stage, $stage"
  grep -qE '^step +3/3 ' "$work/out.txt" || fail "no progress line of step 3/3 (steps=3 not applied?)"
  grep -qE '^step +4/' "$work/out.txt" && fail "the run went past step 3"
  grep -q 'val loss' "$work/out.txt" || fail "no validation loss"
  grep -q -- '---- sample' "$work/out.txt" || fail "no sample"
  [[ -d "$work/run/step_00000003" ]] || fail "no checkpoint of step 3 in run_dir (run_dir not applied?)"
  ((failures > 0)) || echo "ok   a valid run of $stage: 3 steps, validation, sample, checkpoint in run_dir"
fi
# A config that is a stream (/dev/stdin, <(...)) reaches the trainer unread: the early
# check must not consume it, or refuse what the trainer accepts.
status=0
GPT_SKIP_SETUP=1 scripts/train.sh --config /dev/stdin steps=1 sample_tokens=0 "run_dir=$work/stdin_run" device=cpu \
  < configs/tiny.json > "$work/out.txt" 2> "$work/err.txt" || status=$?
if [[ $status != 0 ]]; then fail "a config on standard input exited $status: $(tail -3 "$work/err.txt")"
elif ! grep -qE '^step +1/1 ' "$work/out.txt"; then fail "a config on standard input trained no step"
else echo "ok   a config on standard input reaches the trainer unread"; fi
# A config file that names its device keeps it: train.sh adds device=auto only when
# neither the command line nor the file chose (a --set would override the file's).
sed 's/^{/{ "device": "cpu",/' configs/small.json > "$work/cpu.json"
status=0
GPT_SKIP_SETUP=1 scripts/train.sh --config "$work/cpu.json" steps=1 sample_tokens=0 "run_dir=$work/cpu_run" \
  > "$work/out.txt" 2> "$work/err.txt" || status=$?
if [[ $status != 0 ]]; then fail "a run with the config's device exited $status: $(tail -5 "$work/err.txt")"
elif grep -q "device=auto" "$work/err.txt" || ! grep -q "device chosen by" "$work/err.txt"; then
  fail "the config file's device was overridden: $(grep -m1 '^+' "$work/err.txt")"
else echo "ok   the config file's device is kept: $(grep -m1 "device chosen by" "$work/err.txt")"; fi
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "train.sh: every check passed"
