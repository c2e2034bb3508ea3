#!/usr/bin/env bash
# The context split a run asks for is the one it runs. Within tolerance a contiguous split
# and a zigzag one compute the same model, so the equivalence tests cannot tell them
# apart; the attention work each rank reports (ContextSplit::work_line, from the split its
# ring attention uses) can. For a causal mask a rank's work is the sum, over the positions
# it holds, of the keys each one sees (position q sees q + 1): computed here from the
# split's definition (zigzag: rank r holds chunks r and 2cp-1-r of 2cp; contiguous: chunk r
# of cp) for stage 10 at cp 2 and 4 and stage 11 at cp 2, each split. The zigzag's work is
# equal on every rank and the contiguous split's is not, so a run that ignored cp_split
# fails one of the two. And sequence parallelism, asked with tp 2 at cp 2, is named by the
# run's header (the flag its slices are built with), and not named without it. Asked at
# tp 1 (and a contiguous split at cp 1), each is noted as changing nothing.
# Usage: keys_in_effect.sh TRAIN10 TRAIN11 PREPARE WORK ROOT MPIEXEC
set -euo pipefail
TRAIN10=$1 TRAIN11=$2 PREPARE=$3 WORK=$4 ROOT=$5 MPIEXEC=$6
source "$ROOT/tests/trainer/common.sh"
start_mpi_test "$WORK" "$PREPARE"
for run in "s10_cp2 2 $TRAIN10 2" "s10_cp4 4 $TRAIN10 4" "s11_cp2 2 $TRAIN11 2"; do
  read -r name np bin cp <<< "$run"
  for split in zigzag contiguous; do
    one_step "${name}_$split" "$np" "$bin" "cp=$cp" "cp_split=$split" || continue
    /usr/bin/python3 - "$WORK/${name}_$split.log" "$cp" "$split" << 'PY' || failures=$((failures + 1))
import re, sys
log, cp, split = open(sys.argv[1]).read(), int(sys.argv[2]), sys.argv[3]
T = 32  # configs/tiny.json's seq_len
found = re.search(r"by cp rank:((?: \d+)+) \|", log)
if not found:
    sys.exit(f"FAIL: {sys.argv[1]}: no attention work line")
reported = [int(w) for w in found.group(1).split()]
if split == "zigzag":
    n = T // (2 * cp)
    chunks = [[r, 2 * cp - 1 - r] for r in range(cp)]
else:
    n = T // cp
    chunks = [[r] for r in range(cp)]
want = [sum(q + 1 for c in cs for q in range(c * n, c * n + n)) for cs in chunks]
if reported != want:
    sys.exit(f"FAIL: {sys.argv[1]}: cp={cp} cp_split={split} reports work {reported}, its split gives {want}")
print(f"ok   cp={cp} cp_split={split}: work by rank {reported}")
PY
  done
done
if one_step s10_sp 4 "$TRAIN10" cp=2 tp=2 sequence_parallel=true; then
  if grep -q "^stage 10 .*sequence parallel" "$WORK/s10_sp.log"; then echo "ok   stage 10 runs sequence parallel when asked"
  else fail "stage 10 at tp 2 with sequence_parallel=true does not say it runs sequence parallel"; fi
fi
one_step s10_no_sp 4 "$TRAIN10" cp=2 tp=2 &&
  { ! grep -q "^stage 10 .*sequence parallel" "$WORK/s10_no_sp.log" && echo "ok   (control) and not when not asked" ||
    fail "stage 10 at tp 2 without sequence_parallel says it runs sequence parallel"; }
# A key whose axis is 1 here is said to change nothing; where the axis is 2 it is not.
# notes_say LOG NEEDLE: whether the run's notes name the key.
notes_say() { grep -q "^note: $2 at .*changes nothing" "$WORK/$1.log"; }
if one_step s11_idle_keys 2 "$TRAIN11" pp=2 sequence_parallel=true cp_split=contiguous zero=1; then
  for key in sequence_parallel=true cp_split=contiguous zero=1; do
    notes_say s11_idle_keys "$key" && echo "ok   at pp 2 alone, $key is said to change nothing" ||
      fail "stage 11 at tp 1 and cp 1 does not say that $key changes nothing"
  done
fi
one_step s10_zero1_cp2 2 "$TRAIN10" cp=2 zero=1 || true
! notes_say s10_sp sequence_parallel=true && ! notes_say s11_cp2_contiguous cp_split=contiguous &&
  ! grep -q "^note: zero=" "$WORK/s10_zero1_cp2.log" && echo "ok   (control) none is said where its axis is 2" ||
  fail "a run at tp 2 or cp 2 says its sequence_parallel, cp_split or zero changes nothing"
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
