#!/usr/bin/env bash
# scripts/run_stage.sh, the launcher the docs tell users to run a stage with: bad
# arguments exit 2 with a message naming them, before mpirun starts; a stage named by
# number, directory or prefix runs on N ranks; the trainer's own exit status comes back
# through mpirun (bad input: 2); the cores it reports are the machine's; a relative
# --config, and a relative input path of --set, is found from the caller's directory.
# Usage: run_stage_script.sh BUILD_DIR PREPARE WORKDIR ROOT
set -euo pipefail
BUILD=$1 PREPARE=$2 WORK=$3 ROOT=$4
source "$ROOT/tests/trainer/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
export GPT_BUILD_DIR="$BUILD" OMP_NUM_THREADS=1
RUN="$ROOT/scripts/run_stage.sh"
failures=0

# expect NAME STATUS NEEDLE ARGS...: run_stage.sh ARGS exits STATUS and prints NEEDLE.
expect() {
  local name=$1 want=$2 needle=$3 status=0
  shift 3
  bash "$RUN" "$@" > "$WORK/out.txt" 2>&1 || status=$?
  if [ "$status" -ne "$want" ]; then
    echo "FAIL [$name]: exit status $status, expected $want"; tail -5 "$WORK/out.txt" | sed 's/^/    /'
    failures=$((failures + 1)); return
  fi
  if ! grep -qF -- "$needle" "$WORK/out.txt"; then
    echo "FAIL [$name]: the output does not contain '$needle':"; tail -8 "$WORK/out.txt" | sed 's/^/    /'
    failures=$((failures + 1)); return
  fi
  echo "ok   [$name]: $(grep -F -m1 -- "$needle" "$WORK/out.txt")"
}
tiny() { echo $(tiny_args "$WORK/data" "$WORK/run_$1") --set steps=1 --set sample_tokens=0 --set val_batches=0; }

expect "no arguments"         2 "scripts/run_stage.sh N STAGE"
expect "ranks not a number"   2 "N must be a number of ranks (1 or more), not 'two'" two 02
expect "zero ranks"           2 "not '0'"                             0 02
expect "ranks past 8 a core"  2 "N=999999 ranks on this machine's"    999999 02
expect "unknown stage"        2 "no stage '99'"                       2 99
expect "no stage number 0"    2 "no stage '0'"                        2 0
expect "an empty name"        2 "'' names several stages"             2 ""
expect "stage 01 on 2 ranks"  2 "stage 01_single_gpu trains on one device: N must be 1, not 2" 2 01
expect "--help"               0 "scripts/run_stage.sh N STAGE"        --help
# The trainer's bad input comes back as its exit status 2, from every rank.
expect "trainer's bad input"  2 "unknown key 'n_layers'"              2 02 $(tiny bad) --set n_layers=3
# Runs, with the stage named three ways.
expect "by number"            0 "stage 11 |"                          4 11 $(tiny n11) --set n_layer=4 --set pp=2 --set cp=2
expect "by directory"         0 "step     1/1"                        2 02_ddp $(tiny dir)
expect "by prefix"            0 "step     1/1"                        2 05_zero $(tiny prefix)
expect "stage 01 alone"       0 "step     1/1"                        1 1 $(tiny one)
# The machine's cores, whatever OMP_NUM_THREADS says (nproc honours it; this test sets 1).
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
expect "cores, not OMP's"     0 "2 rank(s) of $cores core(s)"        2 02 $(tiny cores)
# A relative --config from the caller's directory, which is not the root the trainer
# runs in (--config=FILE as well).
cp "$ROOT/configs/tiny.json" "$WORK/mine.json"
mine() { echo --set device=cpu --set "train_data=$WORK/data/train.bin" --set "val_data=$WORK/data/val.bin" \
  --set "run_dir=$WORK/run_$1" --set threads=1 --set steps=1 --set sample_tokens=0 --set val_batches=0; }
cd "$WORK"
expect "config from here"     0 "step     1/1"                        2 02 --config mine.json $(mine here)
expect "config= from here"    0 "step     1/1"                        2 02 --config=mine.json $(mine here2)
# Relative input paths of --set from here too (the shards, with --set and bare); the
# control: a relative path found nowhere is left as it is, and the trainer names it.
expect "--set data from here" 0 "step     1/1"                        2 02 --config mine.json $(mine here3) \
  --set train_data=data/train.bin val_data=data/val.bin
expect "a missing input"      2 "data file 'nowhere/train.bin' does not exist" 2 02 --config mine.json $(mine here4) \
  --set train_data=nowhere/train.bin
# Anything else goes to the trainer as it was given: a --set without '=' (the trainer names
# it), and a prompt that ends in a newline (its value unchanged: the sample starts with it).
expect "--set without ="      2 "expected key=value"                 2 02 --config mine.json $(mine here5) --set steps
expect "a prompt kept whole"  0 "step     1/1"                        2 02 --config mine.json $(mine here6) \
  --set sample_tokens=4 --set "prompt=Hi
"
grep -q '"text":"Hi\\n' "$WORK/run_here6/metrics.jsonl" ||
  { echo "FAIL [a prompt kept whole]: the sample does not start with the prompt's newline"
    failures=$((failures + 1)); }
cd - > /dev/null
[ "$failures" -eq 0 ] && echo "run_stage.sh refuses bad arguments and runs every stage it names" || exit 1
