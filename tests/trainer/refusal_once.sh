#!/usr/bin/env bash
# A refusal that every rank of a job makes alike is said once. Stage 11 on 4 ranks with a
# mesh that does not fit them (pp=3), an unknown key (read before MPI starts), a model
# shape validate() refuses (n_head=5), limits of the stage's own technique (StageSpec::checks:
# pp=4 stages for 2 layers, an unknown schedule, full recompute with a schedule that splits
# its backwards), a train_data file that does not exist, a val_data glob that matches
# nothing, a token beyond vocab_size in train_data, comm=nccl on the CPU, a checkpoint to
# resume that is not there or of another model shape, a tensor failing its checksum as the
# ranks load it and a disk that fails a checkpoint's write mid-run (stage 11, and stage 02
# whose rank 0 alone writes): exit 2, the message on one line
# (without a rank, but for a checkpoint's, which names the rank that found it), and no Open
# MPI abort banner (the ranks return; none is aborted). Where the ranks differ
# (mpirun's MPMD form hands rank 3 threads=-1, the one key ranks may set apart), the rank
# that refused names itself, the others say nothing, and the job still ends with 2; also
# where rank 3 alone refuses a key before MPI starts (the ranks then join a plain MPI world
# on the CPU to compare, CommOptions::ready, whatever device the others asked for).
# Controls: the check must reject the mesh refusal's log with its line said twice, with
# another rank's line beside it, and with an abort banner.
# Usage: refusal_once.sh TRAIN11 PREPARE WORKDIR ROOT MPIEXEC TRAIN02
set -euo pipefail
TRAIN=$1 PREPARE=$2 WORK=$3 ROOT=$4 MPIEXEC=$5 TRAIN02=$6
source "$(dirname "$0")/common.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
make_corpus "$WORK" "$PREPARE"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args() { echo "$TRAIN" $(tiny_args "$WORK/data" "$WORK/run") --set steps=1 --set sample_tokens=0 "$@"; }

# once LOG NEEDLE: whether LOG holds NEEDLE on exactly one line, no other line says
# "error:" (no other rank spoke), and no abort banner.
once() {
  [ "$(grep -cF -- "$2" "$1" || true)" -eq 1 ] && [ "$(grep -c "error:" "$1" || true)" -eq 1 ] &&
    ! grep -q "MPI_ABORT" "$1"
}
# said NAME STATUS NEEDLE: the job whose log is $WORK/NAME.log ended with STATUS 2 and said
# NEEDLE once.
said() {
  local name=$1 status=$2 needle=$3 log="$WORK/$1.log"
  [ "$status" -eq 2 ] || { fail "$name: exit $status, expected 2"; tail -5 "$log"; return; }
  once "$log" "$needle" || { fail "$name: '$needle' not said once, or the job aborted"; cat "$log"; return; }
  echo "ok   $name: $(grep -m1 -F -- "$needle" "$log")"
}
run4() {  # run4 NAME key=value...: 4 ranks of stage 11 with the keys
  local name=$1 sets=() kv status=0
  shift
  for kv in "$@"; do sets+=(--set "$kv"); done
  timeout 120 "$MPIEXEC" -np 4 --oversubscribe $(args) "${sets[@]}" > "$WORK/$name.log" 2>&1 || status=$?
  echo $status
}
said mesh "$(run4 mesh pp=3)" "train: error: tp=1 x pp=3 x cp=1 = 3 ranks per model replica"
said unknown_key "$(run4 unknown_key bogus_key=1)" "train: error: --set bogus_key=1: unknown key"
said model_shape "$(run4 model_shape n_head=5)" "train: error: n_head=5 does not divide n_embd=32"
said stage_limit "$(run4 stage_limit pp=4)" "train: error: n_layer=2 is less than pp=4"
said schedule "$(run4 schedule pp=2 schedule=zb-h2)" "train: error: schedule=zb-h2: unknown pipeline schedule"
said recompute_split "$(run4 recompute_split pp=2 schedule=zb-h1 activation_checkpointing=full)" \
  "train: error: activation_checkpointing=full with schedule=zb-h1"
said no_data "$(run4 no_data pp=2 "train_data=$WORK/nothere.bin")" \
  "train: error: train_data: data file '$WORK/nothere.bin' does not exist"
said no_val_data "$(run4 no_val_data pp=2 "val_data=$WORK/nothere_*.bin")" "train: error: val_data: "
# Found once the run has started, as every rank maps the same shards (training_data).
said vocab_tokens "$(run4 vocab_tokens pp=2 vocab_size=64)" "train: error: train_data: shard '$WORK/data/train.bin'"
# A backend this device cannot use, refused before MPI starts: device=auto, which the
# hidden GPUs (if any) make the CPU, whatever the build.
status=0
timeout 120 "$MPIEXEC" -np 4 --oversubscribe -x CUDA_VISIBLE_DEVICES= $(args --set comm=nccl --set device=auto) \
  > "$WORK/nccl_on_cpu.log" 2>&1 || status=$?
said nccl_on_cpu "$status" "train: error: comm=nccl: NCCL moves GPU buffers"
status=0
timeout 120 "$MPIEXEC" --oversubscribe -np 3 $(args) : -np 1 $(args --set threads=-1) > "$WORK/one_rank.log" 2>&1 ||
  status=$?
said one_rank "$status" "train: rank 3: error: threads=-1"
# The same for a key refused before MPI starts: the ranks join a plain world to compare.
status=0
timeout 120 "$MPIEXEC" --oversubscribe -np 3 $(args) : -np 1 $(args --set bogus_key=1) > "$WORK/one_rank_early.log" \
  2>&1 || status=$?
said one_rank_early "$status" "train: rank 3: error: --set bogus_key=1: unknown key"
# The checkpoint to resume is checked with the keys: a path that is not there, and a
# checkpoint of another model shape.
[ "$(run4 first_checkpoint pp=2)" -eq 0 ] ||
  { fail "first_checkpoint: the run failed"; tail -5 "$WORK/first_checkpoint.log"; }
said resume_typo "$(run4 resume_typo pp=2 steps=2 "resume=$WORK/run/step_00000009")" \
  "train: error: resume=$WORK/run/step_00000009: checkpoint $WORK/run/step_00000009 does not exist"
said resume_shape "$(run4 resume_shape pp=2 n_layer=4 steps=2 "resume=$WORK/run/step_00000001")" \
  "train: error: resume=$WORK/run/step_00000001: checkpoint of another model shape: n_layer is 2"
# Found by every rank together in a checkpoint they read or write as one (checkpoint_agree.cpp):
# said once, by rank 0 naming the rank that found it, and no abort. A tensor that fails its
# checksum as the ranks load their parts; then a disk that refuses the next checkpoint's
# files (a file size limit, as a full disk: the ranks ignore SIGXFSZ, so a write fails with
# EFBIG) after a step has trained: the checkpoint before it stays as it was, and resumes.
cp -r "$WORK/run/step_00000001" "$WORK/kept"
cp -r "$WORK/run/step_00000001" "$WORK/corrupt"
printf '\xff\xff\xff\xff' | dd of="$WORK/corrupt/param.bin" bs=1 seek=100 conv=notrunc 2> /dev/null
said corrupt "$(run4 corrupt pp=2 steps=2 "resume=$WORK/corrupt" "run_dir=$WORK/run_corrupt")" \
  "train: error: rank 0: tensor param/wte in $WORK/corrupt/param.bin fails its checksum"
status=0
# The shared-memory transport would map its segments as files under the limit: TCP instead.
timeout 120 "$MPIEXEC" -np 4 --oversubscribe --mca btl self,tcp bash -c \
  "trap '' XFSZ; ulimit -f 100; exec $(args --set pp=2 --set steps=3 --set resume=latest --set checkpoint_every=1)" \
  > "$WORK/disk_full.log" 2>&1 || status=$?
said disk_full "$status" "train: error: rank 0: cannot size $WORK/run/step_00000002.tmp/param.bin: File too large"
if diff -r "$WORK/kept" "$WORK/run/step_00000001" > /dev/null && ! ls -d "$WORK/run/step_00000002"* 2> /dev/null &&
  [ "$(run4 after_disk_full pp=2 steps=2 resume=latest)" -eq 0 ] &&
  grep -q "resumed from $WORK/run/step_00000001 at step 1" "$WORK/after_disk_full.log"; then
  echo "ok   disk_full: step 1's checkpoint is unchanged, no part of step 2's is left, and it resumes"
else fail "disk_full: the checkpoint before the failed save was changed or does not resume"; fi
# Stage 02, whose replicas each load the whole checkpoint and whose rank 0 alone writes one
# (save_checkpoint_by_lead): the same.
args02() { echo "$TRAIN02" $(tiny_args "$WORK/data" "$WORK/run02") --set sample_tokens=0 "$@"; }
timeout 120 "$MPIEXEC" -np 2 --oversubscribe $(args02 --set steps=1) > "$WORK/first_checkpoint02.log" 2>&1 ||
  fail "first_checkpoint02: the run failed"
cp "$WORK/run02/step_00000001/param.bin" "$WORK/param02.bin"
printf '\xff\xff\xff\xff' | dd of="$WORK/run02/step_00000001/param.bin" bs=1 seek=100 conv=notrunc 2> /dev/null
status=0
timeout 120 "$MPIEXEC" -np 2 --oversubscribe $(args02 --set steps=2 --set resume=latest) > "$WORK/corrupt02.log" 2>&1 ||
  status=$?
said corrupt02 "$status" \
  "train: error: rank 0: tensor param/wte in $WORK/run02/step_00000001/param.bin fails its checksum"
cp "$WORK/param02.bin" "$WORK/run02/step_00000001/param.bin"
cp -r "$WORK/run02/step_00000001" "$WORK/kept02"
status=0
timeout 120 "$MPIEXEC" -np 2 --oversubscribe --mca btl self,tcp bash -c \
  "trap '' XFSZ; ulimit -f 100; exec $(args02 --set steps=3 --set resume=latest --set checkpoint_every=1)" \
  > "$WORK/disk_full02.log" 2>&1 || status=$?
said disk_full02 "$status" "train: error: rank 0: cannot size $WORK/run02/step_00000002.tmp/param.bin: File too large"
resumes02() {  # the checkpoint of step 1 resumes: exit 0 and its line
  timeout 120 "$MPIEXEC" -np 2 --oversubscribe $(args02 --set steps=2 --set resume=latest) \
    > "$WORK/after_disk_full02.log" 2>&1 &&
    grep -q "resumed from $WORK/run02/step_00000001 at step 1" "$WORK/after_disk_full02.log"
}
if diff -r "$WORK/kept02" "$WORK/run02/step_00000001" > /dev/null &&
  ! ls -d "$WORK/run02/step_00000002"* 2> /dev/null && resumes02; then
  echo "ok   disk_full02: step 1's checkpoint is unchanged, no part of step 2's is left, and it resumes"
else fail "disk_full02: the checkpoint before the failed save was changed or does not resume"; fi
# Ranks that resume different checkpoints (run_dir is not one directory for all, as on
# nodes that do not share it: here a relative run_dir from two working directories, and
# resume=latest finds a checkpoint on rank 0's side only): refused by the rank that differs.
mkdir -p "$WORK/node0/run" "$WORK/node1"
cp -r "$WORK/kept02" "$WORK/node0/run/step_00000001"
apart=$(args02 --set steps=2 --set resume=latest --set run_dir=run)
status=0
timeout 120 "$MPIEXEC" --oversubscribe -np 1 -wdir "$WORK/node0" $apart : -np 1 -wdir "$WORK/node1" $apart \
  > "$WORK/resume_apart.log" 2>&1 || status=$?
said resume_apart "$status" "train: rank 1: error: resume=latest is '' here but 'run/step_00000001' on rank 0"
# Controls: the check must reject the refusal said twice, said once beside another rank's
# line, and said once before an abort banner.
needle="train: error: tp=1 x pp=3"
cat "$WORK/mesh.log" "$WORK/mesh.log" > "$WORK/twice.log"
{ cat "$WORK/mesh.log"; echo "train: rank 2: error: tp=1 x pp=3 x cp=1"; } > "$WORK/another.log"
{ cat "$WORK/mesh.log"; echo "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD"; } > "$WORK/aborted.log"
for control in twice another aborted; do
  if once "$WORK/$control.log" "$needle"; then fail "control: the log '$control' passed"
  else echo "ok   (control) the log '$control' is rejected"; fi
done
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo PASS
