#!/usr/bin/env python3
"""A stop signal ends a run cleanly, and resume=latest continues it as if it never stopped.

  stop_signal.py --train01 T01 --train02 T02 --mpiexec MPIEXEC --data DIR --work DIR
                 --root ROOT

  1. stage 01, SIGTERM: exit status 3, "stopped after step N by SIGTERM", a checkpoint
     of step N, and metrics whose train lines end at step N, followed by a "stop" line.
     Resumed to N + 4 steps, its losses are
     a straight run's to the bit (lr_schedule=constant, so that the two runs' different
     `steps` do not change the rates); control: the straight run at lr x 1.001 is told
     apart at those steps.
  2. stage 01, SIGINT twice: 0.05 s apart (one signal by two routes) the run still stops
     after its step, exit 3; 1.5 s apart, within one step, the second ends the process at
     once, by the signal.
  3. stage 02 on 2 ranks, SIGUSR1 to rank 1 alone (rank 0 never gets it): both ranks
     stop after the same step, mpirun exits 3, rank 0 says "a stop signal on 1 of 2
     ranks", and the resumed run matches a straight one to the bit. Without the ranks'
     agreement rank 1 would stop alone and rank 0 wait for it until its timeout.
  4. stage 02 on 2 ranks, SIGTERM to rank 1: not trapped in a job of several ranks, so
     the job ends at once, without a stop.
  5. stage 02 on 2 ranks, SIGUSR1 during the end-of-run sample: the sample is cut short
     and the run, whose training is done, exits 0 at once.
  6. stage 02 on 2 ranks, SIGUSR1 during a periodic save: the run stops on that save.
  7. scripts/run_stage.sh 2 02, Ctrl-C (SIGINT to the script's process group, as a
     terminal sends it; twice, 0.05 s apart): the script hands mpirun SIGUSR1, and the
     job stops after its step with a checkpoint, status 3. Without the script's help
     mpirun would take the SIGINT itself and end the ranks without one. Ctrl-C again
     1.5 s later, while that checkpoint is being written, ends the job at once, status
     130 (128 + SIGINT, as a shell reports it), and no rank outlives it by more than a
     few seconds; SIGUSR1 twice in the same place (a
     scheduler's stop signal sent again) still stops it cleanly, status 3.
  8. scripts/run_stage.sh 2 02, Ctrl-C the moment the first rank's process exists, before
     it can take SIGUSR1 (whose default action ends a process): the script waits until
     mpirun and both ranks have their handlers, and the job stops after a step, status 3.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero"))
from rank_lost import alive, descendants, find_ranks  # noqa: E402  (the processes below an mpirun job)

STOPPED = 3  # kStoppedExit, common/stop_request.h
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def train_losses(run_dir):
    """{step: loss} of the train lines in run_dir/metrics.jsonl (a resumed run appends)."""
    losses = {}
    path = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                m = json.loads(line)
                if m.get("kind") == "train":
                    losses[m["step"]] = m["loss"]
    return losses


def stop_line(run_dir):
    """The last line of run_dir/metrics.jsonl when it is a "stop" line, else None."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        last = json.loads(f.readlines()[-1])
    return last if last.get("kind") == "stop" else None


def logged_steps(run_dir, steps):
    """Whether run_dir/metrics.jsonl holds `steps` train lines, read no further than the
    last of them. The runs waited for train until stopped, 1000+ steps a second: a reader
    of the whole file, slowed on a busy machine, would never reach its end (the ranks
    append faster than it reads, and take the cores it needs to catch up)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return False
    seen = 0
    with open(path) as f:
        for line in f:
            if line.endswith("\n") and json.loads(line).get("kind") == "train":
                seen += 1
                if seen >= steps:
                    return True
    return False


def wait_for_steps(job, run_dir, steps, limit=60):
    deadline = time.monotonic() + limit
    while not logged_steps(run_dir, steps):
        if job.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def finish(job, limit=60):
    try:
        return job.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        # mpirun and its ranks, which run_stage.sh puts in a session of their own, out of
        # reach of a kill of its process group; checked by start time (no recycled pid hit)
        below = descendants(job.pid)
        os.killpg(job.pid, signal.SIGKILL)
        for pid, start in below:
            if alive(pid, start):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:  # it ended in between
                    pass
        job.wait()
        return None


def runs(pid, program):
    """Whether process pid runs the executable `program`."""
    try:
        return os.path.samefile(f"/proc/{pid}/exe", program)
    except OSError:  # ended, or not ours to look at
        return False


def catches_usr1(pid):
    """Whether process pid has a handler for SIGUSR1 (bit 9 of /proc's SigCgt mask)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("SigCgt:") and int(line.split()[1], 16) >> 9 & 1 for line in f)
    except OSError:
        return None


def stopped_step(log_path):
    """N of the "stopped after step N" line, or None."""
    with open(log_path, errors="replace") as f:  # the byte tokenizer's sample need not be UTF-8
        for line in f:
            if line.startswith("stopped after step "):
                return int(line.split()[3])
    return None


def has_checkpoint(run_dir, step):
    return os.path.exists(os.path.join(run_dir, f"step_{step:08d}", "manifest.json"))


def compare_resumed(name, resumed_dir, straight_dir, control_dir, first, last):
    """The resumed run's losses of steps first..last are the straight run's, bit for bit,
    and the control's are not."""
    resumed, straight, control = train_losses(resumed_dir), train_losses(straight_dir), train_losses(control_dir)
    steps = range(first, last + 1)
    got = [resumed.get(s) for s in steps]
    want = [straight.get(s) for s in steps]
    check(None not in want and got == want, f"{name}: resumed steps {first}-{last} are the straight run's: {got}")
    check([control.get(s) for s in steps] != want, f"{name}: control (lr x 1.001) differs at those steps")


def main():
    ap = argparse.ArgumentParser()
    for key in ("train01", "train02", "mpiexec", "data", "work", "root"):
        ap.add_argument("--" + key, required=True)
    a = ap.parse_args()
    with open(os.path.join(a.root, "configs/tiny.json")) as f:
        control_lr = "lr=" + repr(json.load(f)["lr"] * 1.001)  # the control's lr: tiny.json's x 1.001
    common = ["--config", os.path.join(a.root, "configs/tiny.json"), "--set", "device=cpu", "--set", "threads=1",
              "--set", f"train_data={a.data}/train.bin", "--set", f"val_data={a.data}/val.bin",
              "--set", "val_every=0", "--set", "val_batches=0", "--set", "sample_tokens=0", "--set", "log_every=1",
              "--set", "lr_schedule=constant", "--set", "warmup_steps=0"]

    def run_dir(name):
        return os.path.join(a.work, name)

    def start(cmd, name, log_name=None, **env):  # env: test hooks added to the environment
        log = open(os.path.join(a.work, (log_name or name) + ".log"), "wb")
        return subprocess.Popen(cmd + ["--set", f"run_dir={run_dir(name)}"], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=dict(os.environ, **env))

    def straight(cmd, name, steps, *extra):
        job = start(cmd + ["--set", f"steps={steps}", "--set", "checkpoint_at_end=false", *extra], name)
        return finish(job, 120) == 0

    def stopped_then_resumed(stage, cmd, name, n, signal_text, more):
        """The run in run_dir(name) stopped after step n with its checkpoint, metrics that end
        there and a stop line naming signal_text; resumed `more` steps, it is a straight run's
        to the bit, and the control's is not."""
        check(n is not None and has_checkpoint(run_dir(name), n) and max(train_losses(run_dir(name))) == n,
              f"{stage}: stopped after step {n}, its checkpoint written, its metrics ending there")
        line = stop_line(run_dir(name))
        check(line is not None and line["step"] == n and line["signal"] == signal_text and
              line["checkpoint"].endswith(f"step_{n:08d}"), f"{stage}: the metrics' stop line {line}")
        if n is None:
            return
        resumed = start(cmd + ["--set", f"steps={n + more}", "--set", "resume=latest",
                               "--set", "checkpoint_at_end=false"], name, name + "_resumed")
        check(finish(resumed, 120) == 0, f"{stage}: resume=latest to {more} more steps")
        check(straight(cmd, name + "_straight", n + more), f"{stage}: the straight run")
        check(straight(cmd, name + "_control", n + more, "--set", control_lr), f"{stage}: the control run")
        compare_resumed(stage, run_dir(name), run_dir(name + "_straight"), run_dir(name + "_control"), n + 1, n + more)

    # 1. Stage 01, SIGTERM.
    t01 = [a.train01] + common
    job = start(t01 + ["--set", "steps=1000000"], "s01")
    if not wait_for_steps(job, run_dir("s01"), 3):
        check(False, "stage 01: three steps logged")
    job.send_signal(signal.SIGTERM)
    status = finish(job)
    n = stopped_step(os.path.join(a.work, "s01.log"))
    check(status == STOPPED, f"stage 01, SIGTERM: exit status {status}, expected {STOPPED}")
    stopped_then_resumed("stage 01", t01, "s01", n, "SIGTERM", 4)

    # 2. Stage 01, SIGINT twice. 0.05 s apart (one signal come by two routes) the run still
    # stops after its step, exit 3, whenever the two come. 1.5 s apart (the user's second
    # Ctrl-C) the second ends the process at once, by the signal: sent inside a step of
    # about 3 s (configs/small.json at batch 160 on one thread; batch 16 under the
    # sanitizers' GPT_TEST_QUICK=1, whose steps are some 30x slower: about 9 s), after a
    # first step, so that the handler is in place.
    job = start(t01 + ["--set", "steps=1000000"], "s01_twice_at_once")
    if wait_for_steps(job, run_dir("s01_twice_at_once"), 3):
        job.send_signal(signal.SIGINT)
        time.sleep(0.05)
        job.send_signal(signal.SIGINT)
    status = finish(job)
    check(status == STOPPED, f"stage 01, SIGINT twice 0.05 s apart: status {status}, expected {STOPPED}")
    batch = "16" if os.environ.get("GPT_TEST_QUICK") == "1" else "160"
    slow = [a.train01, "--config", os.path.join(a.root, "configs/small.json"), "--set", "device=cpu",
            "--set", "threads=1", "--set", f"train_data={a.data}/train.bin", "--set", f"val_data={a.data}/val.bin",
            "--set", f"batch_size={batch}", "--set", "steps=1000", "--set", "log_every=1", "--set", "val_batches=0",
            "--set", "sample_tokens=0"]
    job = start(slow, "s01_twice_later")
    if wait_for_steps(job, run_dir("s01_twice_later"), 1, limit=120):
        time.sleep(0.5)  # inside the second step
        job.send_signal(signal.SIGINT)
        time.sleep(1.5)
        job.send_signal(signal.SIGINT)
    status = finish(job)
    check(status == -signal.SIGINT, f"stage 01, SIGINT twice 1.5 s apart: status {status}, expected {-signal.SIGINT}")

    # 3. Stage 02 on 2 ranks, SIGUSR1 to rank 1 alone.
    t02 = [a.mpiexec, "-np", "2", "--oversubscribe", a.train02] + common
    job = start(t02 + ["--set", "steps=1000000"], "s02")
    ranks = {}
    if wait_for_steps(job, run_dir("s02"), 3):
        ranks = find_ranks(job.pid)
    check(sorted(ranks) == [0, 1], f"stage 02: both ranks found ({sorted(ranks)})")
    if 1 in ranks:
        os.kill(ranks[1][0], signal.SIGUSR1)
    status = finish(job)
    n = stopped_step(os.path.join(a.work, "s02.log"))
    with open(os.path.join(a.work, "s02.log"), errors="replace") as f:
        log = f.read()
    check(status == STOPPED, f"stage 02, SIGUSR1 to rank 1: mpirun's exit status {status}, expected {STOPPED}")
    check("by a stop signal on 1 of 2 ranks" in log, "stage 02: rank 0 says the signal came to 1 of the 2 ranks")
    stopped_then_resumed("stage 02", t02, "s02", n, "a stop signal on 1 of 2 ranks", 3)

    # 4. Stage 02 on 2 ranks, SIGTERM to rank 1: a job of several ranks leaves SIGTERM to
    # its default action (mpirun sends it to every rank when it ends a failed job, which
    # must not wait), so rank 1 dies and the job ends at once, with no stop.
    job = start(t02 + ["--set", "steps=1000000"], "s02_term")
    ranks = find_ranks(job.pid) if wait_for_steps(job, run_dir("s02_term"), 3) else {}
    if 1 in ranks:
        os.kill(ranks[1][0], signal.SIGTERM)
    began = time.monotonic()
    status = finish(job)
    took = time.monotonic() - began
    check(status not in (None, 0, STOPPED) and took < 30 and stopped_step(os.path.join(a.work, "s02_term.log")) is None,
          f"stage 02, SIGTERM to rank 1: the job ended in {took:.1f} s with status {status}, no stop")

    # 5. Stage 02 on 2 ranks, SIGUSR1 to mpirun during the end-of-run sample (held 0.05 s a
    # token, 20 s in all): the lead ends it where it is, and the run exits 0 (its training
    # is done, its checkpoint written) in far less than the sample's time.
    log_path = os.path.join(a.work, "s02_sample.log")
    job = start(t02 + ["--set", "steps=3", "--set", "sample_tokens=400"], "s02_sample",
                GPT_TEST_SAMPLE_TOKEN_DELAY_S="0.05")
    deadline = time.monotonic() + 60
    while job.poll() is None and time.monotonic() < deadline and not has_checkpoint(run_dir("s02_sample"), 3):
        time.sleep(0.05)
    time.sleep(1.0)  # into the sample
    job.send_signal(signal.SIGUSR1)
    began = time.monotonic()
    status = finish(job)
    took = time.monotonic() - began
    with open(log_path, errors="replace") as f:  # the byte tokenizer's sample need not be UTF-8
        log = f.read()
    check(status == 0 and took < 10 and "cut short by a stop signal" in log,
          f"stage 02, SIGUSR1 during the final sample: status {status} after {took:.1f} s, the sample cut short")
    # Its metrics line says so too: fewer tokens than asked for, and cut_short.
    with open(os.path.join(run_dir("s02_sample"), "metrics.jsonl")) as f:
        samples = [r for r in map(json.loads, f) if r.get("kind") == "sample"]
    check(len(samples) == 1 and samples[0].get("cut_short") is True and 0 < samples[0].get("tokens", 0) < 400,
          "stage 02, the cut sample's metrics line: cut_short, with fewer than 400 tokens: "
          f"{[(r.get('cut_short'), r.get('tokens')) for r in samples]}")

    # 6. Stage 02 on 2 ranks, SIGUSR1 to mpirun during the periodic save of step 5 (held 3 s
    # by GPT_TEST_SAVE_DELAY_S): the run stops on that checkpoint, rather than train step 6
    # and save again within the scheduler's grace period.
    log_path = os.path.join(a.work, "s02_save.log")
    job = start(t02 + ["--set", "steps=1000000", "--set", "checkpoint_every=5"], "s02_save", GPT_TEST_SAVE_DELAY_S="3")
    if wait_for_steps(job, run_dir("s02_save"), 5):
        time.sleep(1.0)  # into the save
        job.send_signal(signal.SIGUSR1)
    status = finish(job)
    n = stopped_step(log_path)
    saves = sorted(d for d in os.listdir(run_dir("s02_save")) if d.startswith("step_"))
    check(status == STOPPED and n == 5 and saves == ["step_00000005"],
          f"stage 02, SIGUSR1 during the save of step 5: status {status}, stopped after step {n}, saves {saves}")

    # 7. scripts/run_stage.sh 2 02, Ctrl-C. The terminal sends SIGINT to the foreground
    # process group: the script's, which mpirun, in a session of its own, is not in.
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(a.train02))))  # BUILD/stages/02_ddp/train
    run_stage = ["bash", os.path.join(a.root, "scripts", "run_stage.sh"), "2", "02"] + common
    # The script runs the first mpirun on PATH: the one the other cases run.
    path = os.path.dirname(os.path.abspath(a.mpiexec)) + os.pathsep + os.environ.get("PATH", "")
    hooks = {"GPT_BUILD_DIR": build, "OMP_NUM_THREADS": "1", "PATH": path}
    job = start(run_stage + ["--set", "steps=1000000"], "run_stage", **hooks)
    if wait_for_steps(job, run_dir("run_stage"), 3):
        os.killpg(job.pid, signal.SIGINT)
        time.sleep(0.05)
        os.killpg(job.pid, signal.SIGINT)
    status = finish(job)
    n = stopped_step(os.path.join(a.work, "run_stage.log"))
    check(status == STOPPED and n is not None and has_checkpoint(run_dir("run_stage"), n),
          f"run_stage.sh, Ctrl-C twice 0.05 s apart: status {status}, stopped after step {n} with its checkpoint")
    with open(os.path.join(a.work, "run_stage.log"), errors="replace") as f:
        said = "SIGINT: the ranks stop after this step and save a checkpoint" in f.read()
    check(said, "run_stage.sh says what the Ctrl-C does")
    # The second Ctrl-C during the save of that step (held 5 s by GPT_TEST_SAVE_DELAY_S).
    job = start(run_stage + ["--set", "steps=1000000"], "run_stage_twice", GPT_TEST_SAVE_DELAY_S="5", **hooks)
    ranks = {}
    if wait_for_steps(job, run_dir("run_stage_twice"), 3):
        ranks = find_ranks(job.pid)
        os.killpg(job.pid, signal.SIGINT)
        time.sleep(1.5)
        os.killpg(job.pid, signal.SIGINT)
    began = time.monotonic()
    status = finish(job)
    deadline = time.monotonic() + 10
    while any(alive(*rank) for rank in ranks.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    took = time.monotonic() - began
    left = [r for r, rank in ranks.items() if alive(*rank)]
    for r in left:
        os.kill(ranks[r][0], signal.SIGKILL)
    check(len(ranks) == 2 and status == 128 + signal.SIGINT and took < 10 and not left,
          f"run_stage.sh, Ctrl-C again 1.5 s later, during the save: status {status}, the job and its "
          f"ranks {sorted(ranks)} ended in {took:.1f} s (still running: {left})")
    # SIGUSR1 to the script twice, 1.5 s apart, during that save: a scheduler's preemption
    # signal sent again changes nothing, as for the trainer; the run stops on its checkpoint.
    job = start(run_stage + ["--set", "steps=1000000"], "run_stage_usr1", GPT_TEST_SAVE_DELAY_S="5", **hooks)
    if wait_for_steps(job, run_dir("run_stage_usr1"), 3):
        job.send_signal(signal.SIGUSR1)
        time.sleep(1.5)
        job.send_signal(signal.SIGUSR1)
    status = finish(job)
    n = stopped_step(os.path.join(a.work, "run_stage_usr1.log"))
    check(status == STOPPED and n is not None and has_checkpoint(run_dir("run_stage_usr1"), n),
          f"run_stage.sh, SIGUSR1 twice 1.5 s apart: status {status}, stopped after step {n} with its checkpoint")

    # 8. Ctrl-C as the job starts: the moment the first rank's process appears below
    # mpirun, before it has a handler for SIGUSR1 (it installs one after MPI's start-up),
    # when the signal's default action would end it. The script holds the signal until
    # mpirun and both ranks catch it: the job stops after a step, with its checkpoint.
    # A rank seen only once its handler was in place tests nothing of that moment: the
    # case runs again, three times at most, and fails if it never saw a rank without one.
    for attempt in range(1, 4):
        name = f"run_stage_early{attempt}"
        job = start(run_stage + ["--set", "steps=1000000"], name, **hooks)
        deadline, rank = time.monotonic() + 60, None
        while rank is None and job.poll() is None and time.monotonic() < deadline:
            rank = next((pid for pid, _ in descendants(job.pid) if runs(pid, a.train02)), None)
            time.sleep(0.002)  # (MPI's start-up takes some 100 ms: a rank is seen long before its handler)
        handled = catches_usr1(rank) if rank else None
        if rank:
            os.killpg(job.pid, signal.SIGINT)
        status = finish(job)
        if handled is not True:
            break
    n = stopped_step(os.path.join(a.work, f"{name}.log"))
    check(rank is not None and handled is False and status == STOPPED and n is not None and
          has_checkpoint(run_dir(name), n),
          f"run_stage.sh, Ctrl-C as the first rank started, before its SIGUSR1 handler (attempt {attempt}; handler "
          f"in place: {handled}): status {status}, stopped after step {n} with its checkpoint")

    if failures:
        sys.exit(f"{len(failures)} failure(s); logs in {a.work}")
    print("PASS")


if __name__ == "__main__":
    main()
