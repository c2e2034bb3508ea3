#!/usr/bin/env bash
# Runs a stage's trainer on N ranks of this machine under mpirun.
#
#   scripts/run_stage.sh N STAGE [trainer arguments...]
#
# STAGE is a stage directory (02_ddp), its number (02 or 2) or a prefix of its name;
# the binary is build/stages/STAGE/train (GPT_BUILD_DIR overrides build). Arguments
# after STAGE go to every rank unchanged, e.g.
#   scripts/run_stage.sh 4 02 --config configs/tiny.json --set micro_batch_size=1 --set steps=20
# Each rank gets OMP_NUM_THREADS = cores / N (at least 1) unless it is already set, and
# OMP_WAIT_POLICY=passive when ranks outnumber cores, so that idle OpenMP threads sleep
# instead of spinning on a core another rank needs. mpirun runs with --oversubscribe
# (more ranks than cores is fine for learning, just slower) and --bind-to none. As root,
# Open MPI also needs OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1,
# which are set then only. Extra mpirun options go in GPT_MPIRUN_ARGS. The trainer runs
# in the repository root, like scripts/train.sh, and as there a relative --config FILE
# is taken from the caller's directory when it is there (else from the root), and so is a
# --set input path (train_data, val_data, eval_choices, tokenizer, resume); the config's
# paths and the outputs' (run_dir, metrics_file, trace_file) are the root's. Across nodes
# or under Slurm, call mpirun or srun directly: see docs/distributed.md.
#
# Ctrl-C (or SIGTERM, SIGHUP, SIGUSR1 to this script: closing its terminal too) stops the
# job cleanly: the ranks finish the step in progress, write a checkpoint of it and exit
# with status 3, and resume=latest goes on from there (docs/checkpoints.md). mpirun itself
# would end the ranks a second after a Ctrl-C, too soon to save, so it runs in a session
# of its own, out of the terminal's reach, and this script hands it the trainer's stop
# signal, SIGUSR1, which mpirun passes on to every rank (as the job starts, once mpirun
# and the ranks can take it). A second Ctrl-C (or Ctrl-\), a second or more after the
# first, ends the job at once, and the script exits 128 + the signal's number (130 for
# SIGINT), as a shell reports a command a signal ended. Only signals to this script are
# turned into a stop: a scheduler that signals every process of the job (a cgroup) reaches
# mpirun too, which ends the ranks at once on SIGTERM; under a scheduler send SIGUSR1.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  print_help >&2
  exit 2
}
usage_error() {
  printf 'run_stage.sh: %s\n' "$*" >&2
  printf 'usage: scripts/run_stage.sh N STAGE [trainer arguments...] (--help for more)\n' >&2
  exit 2
}

[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && {
  print_help
  exit 0
}
(($# >= 2)) || usage
ranks="$1"
stage="$2"
shift 2

if ! [[ "$ranks" =~ ^[0-9]{1,6}$ ]] || ((10#$ranks < 1)); then
  usage_error "N must be a number of ranks (1 or more), not '$ranks'"
fi
ranks=$((10#$ranks))

# The stages that exist, and the one STAGE names: exactly, by number, or by prefix.
stages=()
for dir in "$GPT_ROOT"/stages/[0-9][0-9]_*/; do
  [[ -d "$dir" ]] && stages+=("$(basename "$dir")")
done
pattern="$stage"
[[ "$stage" =~ ^[0-9]{1,3}$ ]] && pattern="$(printf '%02d_' "$((10#$stage))")"
matches=()
for name in "${stages[@]}"; do
  if [[ "$name" == "$stage" ]]; then
    matches=("$name")
    break
  fi
  [[ "$name" == "$pattern"* ]] && matches+=("$name")
done
((${#matches[@]} > 0)) || usage_error "no stage '$stage' (stages: ${stages[*]})"
((${#matches[@]} == 1)) || usage_error "'$stage' names several stages: ${matches[*]}"
name="${matches[0]}"
# Stage 01 trains on one device: N copies would be N unrelated runs in one run_dir.
[[ "$name" != 01_* ]] || ((ranks == 1)) || usage_error "stage $name trains on one device: N must be 1, not $ranks"

train="$(abs_dir "$GPT_BUILD_DIR")/stages/$name/train"
[[ -x "$train" ]] || die "$train is not built: build first ($(build_hint))"
command -v mpirun >/dev/null || die "mpirun not found: install Open MPI (scripts/setup.sh installs openmpi-bin)"

if why="$(too_many_ranks N "$ranks")"; then
  usage_error "$why; for more, run on several machines (docs/distributed.md)"
fi
cores="$(machine_cores)"
if [[ -z "${OMP_NUM_THREADS:-}" ]]; then
  threads=$((cores / ranks))
  ((threads >= 1)) || threads=1
  export OMP_NUM_THREADS="$threads"
fi
if ((ranks > cores)) && [[ -z "${OMP_WAIT_POLICY:-}" ]]; then
  export OMP_WAIT_POLICY=passive
fi
if ((EUID == 0)); then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# A relative --config found from the caller's directory, made absolute for the trainer,
# which runs in the repository root; so are the input paths of --set (the data shards or
# their glob, an eval file, a tokenizer file, a checkpoint to resume) when they are found
# there. Outputs (run_dir, metrics_file, trace_file) stay the root's, as documented above.
from_caller() {  # KEY=VALUE: sets `arg` to it, VALUE made absolute if it is an input found here
  arg=$1
  [[ "$1" == *=* ]] || return 0  # not key=value: the trainer says what is wrong with it
  local key=${1%%=*} value=${1#*=}
  case "$key" in
    train_data | val_data | eval_choices | tokenizer | resume)
      if [[ -n "$value" && "$value" != /* && "$value" != latest && "$value" != bytes ]] &&
        compgen -G "$value" > /dev/null; then
        arg="$key=$(pwd)/$value"
      fi
      ;;
  esac
  return 0
}
trainer_args=()
while (($# > 0)); do
  arg="$1" file=""
  shift
  case "$arg" in
    --config) (($# == 0)) || { file="$1"; shift; } ;;
    --config=*) file="${arg#--config=}" arg=--config ;;
    --set)
      trainer_args+=("$arg")
      if (($# > 0)); then
        from_caller "$1"
        trainer_args+=("$arg")
        shift
      fi
      continue
      ;;
    [!-]*=*) from_caller "$arg" ;;
  esac
  [[ -n "$file" && "$file" != /* && -f "$file" ]] && file="$(pwd)/$file"
  trainer_args+=("$arg")
  [[ "$arg" != --config || -z "$file" ]] || trainer_args+=("$file")
done

# shellcheck disable=SC2206  # GPT_MPIRUN_ARGS is split into words on purpose
cmd=(mpirun -np "$ranks" --oversubscribe --bind-to none ${GPT_MPIRUN_ARGS:-} "$train" "${trainer_args[@]}")
log "stage $name on $ranks rank(s) of $cores core(s), OMP_NUM_THREADS=$OMP_NUM_THREADS${OMP_WAIT_POLICY:+, OMP_WAIT_POLICY=$OMP_WAIT_POLICY}"
{
  printf '+'
  printf ' %q' "${cmd[@]}"
  printf '\n'
} >&2
cd "$GPT_ROOT"
command -v setsid > /dev/null || exec "${cmd[@]}"  # no setsid: mpirun takes Ctrl-C itself

# stop SIGNAL: the first signal asks the ranks to stop after their step (SIGUSR1 to
# mpirun, which passes it on). A second SIGINT, SIGTERM, SIGHUP or SIGQUIT a second or
# more later ends the job at once; one within a second is the first come by two routes,
# and SIGUSR1 again changes nothing (the trainer's rules: common/stop_request.h). The
# signal goes first and the line after it, which may fail: the terminal may be gone
# (SIGHUP) or its reader dead.
job="" first_stop="" early="" ended_by=""
stop() {
  if [[ -z "$job" ]]; then  # before mpirun started: handled as soon as it has
    early=${early:-$1}
    return
  fi
  local now=${EPOCHREALTIME:-$SECONDS.000000}  # seconds, to the microsecond (bash 5)
  now=${now//[.,]/}
  if [[ -z "$first_stop" ]]; then
    first_stop=$now
    if ! job_catches_usr1; then
      log "$1: the job is starting: the stop waits until its ranks can take it" || true
      wait_until_usr1_caught || return 0  # the job ended meanwhile (a second Ctrl-C can end it)
    fi
    kill -USR1 "$job" 2> /dev/null || true
    log "$1: the ranks stop after this step and save a checkpoint (again, a second or more later, to end them at once)" \
      || true
  elif [[ "$1" != SIGUSR1 ]] && ((10#$now - 10#$first_stop >= 1000000)); then
    ended_by=$1
    kill -TERM "$job" 2> /dev/null || true
    log "$1 again: ending the job now" || true
  fi
}

# SIGUSR1 asks for a stop only once the process has a handler for it: until then its
# default action ends the process. mpirun installs its handler as it starts, each rank
# after MPI's start-up (common/driver.cpp), and mpirun passes the signal on to the ranks
# it has: a stop in the job's first second would end mpirun or a rank, or miss a rank not
# yet started. So the first stop waits, polling /proc, until mpirun and every trainer
# process below it on this machine catch SIGUSR1, and there are `ranks` of them, or the
# job has ended. Ranks on other machines cannot be seen from here: 30 s after the launch
# the ones seen stand for all (and an mpirun that never catches SIGUSR1 gets it then).
catches_usr1() {  # PID: whether process PID has a handler for SIGUSR1 (signal 10: bit 9 of SigCgt)
  local key mask
  while read -r key mask; do
    [[ "$key" == SigCgt: ]] || continue
    (((16#$mask >> 9) & 1)) && return 0  # (a bare `return` in a trap returns the status from before it)
    return 1
  done 2> /dev/null < "/proc/$1/status"
  return 1
}
descends_from_job() {  # PID: whether process PID runs below mpirun (ancestors read from /proc/*/stat)
  local pid=$1 depth stat
  for ((depth = 0; depth < 16 && pid > 1; ++depth)); do
    [[ "$pid" == "$job" ]] && return 0
    read -r stat 2> /dev/null < "/proc/$pid/stat" || return 1
    stat=${stat##*) }  # after the command's name, which may hold spaces and parentheses
    stat=${stat#* }    # past the state: the parent's pid first
    pid=${stat%% *}
  done
  return 1
}
job_catches_usr1() {
  local late=0 dir pid found=0
  ((SECONDS - launched_at < 30)) || late=1
  catches_usr1 "$job" || return $((1 - late))
  for dir in /proc/[0-9]*; do
    [[ "$dir/exe" -ef "$train" ]] || continue  # -ef: the same file, the link followed
    pid=${dir#/proc/}
    descends_from_job "$pid" || continue
    catches_usr1 "$pid" || return 1  # a rank seen starting is waited for, however long
    found=$((found + 1))
  done
  ((found >= ranks || late)) && return 0
  return 1
}
wait_until_usr1_caught() {  # fails when the job has ended first
  while kill -0 "$job" 2> /dev/null; do
    job_catches_usr1 && return 0
    sleep 0.05
  done
  return 1
}
trap 'stop SIGINT' INT
trap 'stop SIGTERM' TERM
trap 'stop SIGHUP' HUP
trap 'stop SIGQUIT' QUIT
trap 'stop SIGUSR1' USR1

# mpirun in a session of its own (so in a process group the terminal's Ctrl-C does not
# reach), run in the background so that this shell can take the signals meant for it,
# reading this script's standard input as before. It gets SIGTERM if this script is
# killed outright (setpriv's parent-death signal), rather than run on with no one to stop it.
launch=(setsid)
command -v setpriv > /dev/null && launch+=(setpriv --pdeathsig TERM)
launched_at=$SECONDS
"${launch[@]}" "${cmd[@]}" <&0 &
job=$!
trap '' PIPE  # a dead reader of this script's output must not end it while mpirun runs
[[ -z "$early" ]] || stop "$early"
# A trapped signal cuts `wait` short while mpirun runs on: wait again until it has ended.
# Bash reaps an ended mpirun itself and keeps its status for the next `wait`, which
# returns it (or 127 when a `wait` above has returned it already).
status=0
while :; do
  wait "$job" && status=0 || status=$?
  if ! kill -0 "$job" 2> /dev/null; then
    wait "$job" 2> /dev/null && last=0 || last=$?
    ((last == 127)) || status=$last
    break
  fi
done
# A job this script ended on a second signal exits as a shell reports a command that a
# signal ended, 128 + its number (130 for SIGINT), not with mpirun's status for a job
# whose ranks were killed (1: "a bug" in docs/cli.md), unless it had stopped cleanly first.
if [[ -n "$ended_by" ]] && ((status != 0 && status != 3)); then
  exit $((128 + $(kill -l "${ended_by#SIG}")))
fi
exit "$status"
