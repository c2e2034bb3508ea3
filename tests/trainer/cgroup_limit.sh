#!/usr/bin/env bash
# A run larger than its memory cgroup's limit (a container's --memory, a batch job's
# allocation) but smaller than the machine stops with exit 2 and a message naming the
# cgroup, instead of being killed by the kernel's OOM killer inside the cgroup (exit 137,
# no word). Two checks read the cgroup (common/host_memory.h):
#   - before anything is built, the weights, gradients and AdamW state a rank must hold
#     against the cgroup's limit (config.cpp): tiny.json at n_layer 6000, about 1.22 GB;
#     and in fp64, whose every buffer is a double: n_layer 4000, 1.6 GB (0.8 GB in fp32,
#     which would fit);
#   - the same check with eval_choices, whose whole copy of the weights every rank holds
#     while it scores: tiny.json at n_layer 4700, 0.96 GB of training state (which fits)
#     plus 0.24 GB for the copy (which does not);
#   - before each host allocation, the room the limit leaves: tiny.json at n_layer 3000
#     and micro-batches of 4 sequences, whose 0.6 GB of weights pass the first check and
#     whose activations (about 0.8 GB more) do not fit.
# The trainer runs in a child memory cgroup made for the test, limited to 1 GiB: both runs
# are below the machine's memory, so only the cgroup can refuse them. Skipped (77) where no
# memory cgroup can be made (not root, a read-only cgroup file system, no memory controller).
# Negative control: the same runs with the limit lifted get past what the limit refuses
# (they are stopped by steps=0 before they train), so each refusal is the limit's.
# Usage: cgroup_limit.sh TRAIN PREPARE WORKDIR ROOT
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4
source "$(dirname "$0")/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"

# The memory cgroup of this shell: v1's memory controller, else v2's unified hierarchy.
self=$(cat /proc/self/cgroup)
if [ -d /sys/fs/cgroup/memory ] && grep -q '^[0-9]*:[^:]*memory[^:]*:' <<< "$self"; then
  path=$(grep '^[0-9]*:[^:]*memory[^:]*:' <<< "$self" | head -1 | cut -d: -f3-)
  base=/sys/fs/cgroup/memory$path; [ -d "$base" ] || base=/sys/fs/cgroup/memory
  limit_file=memory.limit_in_bytes
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  path=$(grep '^0::' <<< "$self" | cut -d: -f3-)
  base=/sys/fs/cgroup$path; [ -d "$base" ] || base=/sys/fs/cgroup
  limit_file=memory.max
else
  echo "skipped: no memory cgroup file system"; exit 77
fi
group="$base/gpt_test_cgroup_$$"
if ! mkdir "$group" 2> /dev/null || ! echo $((1 << 30)) > "$group/$limit_file" 2> /dev/null; then
  rmdir "$group" 2> /dev/null || true
  echo "skipped: cannot make a memory cgroup under $base (not root, or not delegated)"; exit 77
fi
cleanup() { rmdir "$group" 2> /dev/null || true; }
trap cleanup EXIT

make_corpus "$WORK" "$PREPARE"
common=($(tiny_args "$WORK/data" "$WORK/run") --set steps=0 --set val_batches=0 --set sample_tokens=0
        --set checkpoint_at_end=false)
weights_args=("${common[@]}" --set n_layer=6000)
fp64_args=("${common[@]}" --set n_layer=4000 --set precision=fp64)
# One example in llm.c's eval format (ids below tiny.json's 256), for the eval case.
/usr/bin/python3 "$ROOT/tests/llmc/eval_file.py" one "$WORK/eval.bin" 10,11 12 13 --label 1
eval_args=("${common[@]}" --set n_layer=4700 --set "eval_choices=$WORK/eval.bin")
activations_args=("${common[@]}" --set n_layer=3000 --set micro_batch_size=4 --set batch_size=4)
# in_group CMD...: CMD run inside the test's cgroup (a child shell moves itself there first).
in_group() { bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$group" "$@"; }

failures=0
# refused NAME PATTERN ARGS...: under the limit the run must exit 2 with PATTERN in its output.
refused() {
  local name=$1 pattern=$2 status=0
  shift 2
  in_group "$TRAIN" "$@" > "$WORK/limited.log" 2>&1 || status=$?
  if [ "$status" = 2 ] && grep -qE "$pattern" "$WORK/limited.log"
  then echo "ok   $name under a 1 GiB cgroup: $(grep -oE "$pattern[^;]*" "$WORK/limited.log" | head -1)"
  else
    echo "FAIL: $name under a 1 GiB cgroup: the run exited $status (137: killed by the OOM killer), expected 2"
    echo "      with /$pattern/:"; tail -5 "$WORK/limited.log" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}
refused "weights" "GB for the weights.*more than the 1.07 GB of this process's memory cgroup limit" \
  "${weights_args[@]}"
refused "fp64 weights" \
  "GB for the weights.*32 bytes each, fp64.*more than the 1.07 GB of this process's memory cgroup limit" \
  "${fp64_args[@]}"
refused "eval copy" "eval_choices=.*whole copy of the model's .* more than the 1.07 GB of this process's memory cgroup limit" \
  "${eval_args[@]}"
refused "activations" "out of host memory: .*\(under this process's memory cgroup limit" "${activations_args[@]}"

# The controls build models of up to 1.6 GB: under GPT_TEST_QUICK=1 (the sanitizer pass)
# they are left to the default pass, which has run them on the same code.
controls=(weights fp64 eval activations)
quick_run && { controls=(); echo "quick run (GPT_TEST_QUICK=1): the controls are left to the default pass"; }
echo max > "$group/$limit_file" 2> /dev/null || echo -1 > "$group/$limit_file"
for name in "${controls[@]}"; do
  declare -n run_args="${name}_args"
  status=0
  in_group "$TRAIN" "${run_args[@]}" > "$WORK/unlimited.log" 2>&1 || status=$?
  if [ "$status" = 0 ]; then echo "ok   control: without the limit the $name run builds its model and stops at steps=0"
  else
    echo "FAIL: control: without the limit the $name run exited $status:"; tail -5 "$WORK/unlimited.log"
    failures=$((failures + 1))
  fi
done

[ $failures = 0 ] || exit 1
echo "the cgroup's limit stops the run with a message, not the OOM killer"
