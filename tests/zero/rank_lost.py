#!/usr/bin/env python3
"""A rank lost mid-run ends the whole job quickly, with an error naming the lost rank.

  rank_lost.py --mode kill|stop --np N --victim R --metrics FILE --log FILE
               [--limit 60] -- MPIEXEC_COMMAND...

Starts the multi-rank job (MPIEXEC_COMMAND, e.g. `mpirun -np 3 ... train ...`) in a
session of its own, waits until rank 0 has logged a few training steps, then takes
rank R away:
  kill: SIGKILL, a rank that dies outright; mpirun notices the death and ends the job
        ("mpirun noticed that process rank R ... exited on signal 9").
  stop: SIGSTOP, a rank that hangs without dying (a wedged node, a lost network link);
        nothing notices but the peers' communication timeout (comm_timeout_s), after
        which a peer reports "no message from rank R ... peer lost?" and aborts the job.
Passes when mpirun and every rank have exited within --limit seconds of the signal,
with a non-zero status, and the output names rank R in one of those two messages.

Whatever happens, every process it started is killed at the end: mpirun's session and
each rank by pid (Open MPI puts each rank in a process group of its own), checked by
start time so a recycled pid is never hit. Linux only (/proc).
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time


def proc_stat(pid):
    """(state, ppid, start time) of pid, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()  # after "pid (comm) "
    return fields[0], int(fields[1]), int(fields[19])


def alive(pid, start):
    st = proc_stat(pid)
    return st is not None and st[2] == start and st[0] not in ("Z", "X")


def world_rank(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"OMPI_COMM_WORLD_RANK=") or kv.startswith(b"PMI_RANK="):
            return int(kv.split(b"=", 1)[1])
    return None


def descendants(root):
    """[(pid, start time)] of every process below root, whatever its session or group."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st:
                children.setdefault(st[1], []).append((int(name), st[2]))
    found, todo = [], [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            found.append((pid, start))
            todo.append(pid)
    return found


def find_ranks(root):
    """{world rank: (pid, start time)} among the descendants of root."""
    ranks = {}
    for pid, start in descendants(root):
        r = world_rank(pid)
        if r is not None and r not in ranks:
            ranks[r] = (pid, start)
    return ranks


def train_steps(metrics, enough=None):
    """The train lines in the metrics file; with `enough`, counting stops there (a running
    job appends to the file, and on a busy machine faster than a reader of it all)."""
    count = 0
    try:
        with open(metrics) as f:
            for line in f:
                count += '"kind":"train"' in line
                if enough is not None and count >= enough:
                    break
    except OSError:
        pass
    return count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("kill", "stop"), required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--victim", type=int, required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--limit", type=float, default=60.0, help="seconds the job may take to end")
    ap.add_argument("--min-steps", type=int, default=5)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command

    log = open(args.log, "wb")
    job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ranks = {}
    failures = []
    try:
        # Up and training: rank 0 has logged some steps and every rank is found.
        deadline = time.monotonic() + 60
        while True:
            if job.poll() is not None:
                sys.exit(f"FAIL: the job ended (status {job.returncode}) before the rank was taken away; see {args.log}")
            if time.monotonic() > deadline:
                sys.exit(f"FAIL: no {args.min_steps} training steps logged within 60 s; see {args.log}")
            ranks.update(find_ranks(job.pid))
            if len(ranks) == args.np and train_steps(args.metrics, args.min_steps) >= args.min_steps:
                break
            time.sleep(0.1)
        steps_before = train_steps(args.metrics)
        victim_pid = ranks[args.victim][0]
        os.kill(victim_pid, signal.SIGKILL if args.mode == "kill" else signal.SIGSTOP)
        t0 = time.monotonic()
        print(f"{args.mode}: rank {args.victim} (pid {victim_pid}) after {steps_before} steps")

        try:
            status = job.wait(timeout=args.limit)
        except subprocess.TimeoutExpired:
            status = None
        job_s = time.monotonic() - t0
        while time.monotonic() - t0 < args.limit and any(alive(p, s) for p, s in ranks.values()):
            time.sleep(0.1)
        all_s = time.monotonic() - t0
        left = [r for r, (p, s) in sorted(ranks.items()) if alive(p, s)]

        log.flush()
        with open(args.log, errors="replace") as f:
            out = f.read()
        v = args.victim
        # A killed rank may be named by mpirun itself; a stopped one only by a peer's
        # timeout (mpirun's own line about signal 9 can follow the abort that kills it,
        # so it must not count there).
        # A point-to-point message (the pipeline's, the ring attention's) names its tag.
        ours = (rf"no message from rank {v} within[^\n]*|rank {v} did not take our message within[^\n]*|"
                rf"\w+ from rank {v} \(tag \d+\): no message within[^\n]*|"
                rf"\w+ to rank {v} \(tag \d+\): not received within[^\n]*")
        mpiruns = rf"process rank {v} with PID \d+ on node \S+ exited on signal 9[^\n]*"
        named = [m.group(0) for m in re.finditer(f"{mpiruns}|{ours}" if args.mode == "kill" else ours, out)]

        print(f"mpirun exited: {'no' if status is None else f'yes, status {status}'}, "
              f"{job_s:.1f} s after the signal; ranks still running after {all_s:.1f} s: {left or 'none'}")
        if status is None:
            failures.append(f"mpirun still running {args.limit:.0f} s after rank {v} was "
                            f"{'killed' if args.mode == 'kill' else 'stopped'}: the job hangs")
        elif status == 0:
            failures.append("mpirun exited with status 0 after losing a rank")
        if left:
            failures.append(f"ranks {left} still running {args.limit:.0f} s after the signal")
        if named:
            print(f"the output names the lost rank: {named[0].strip()}")
        else:
            failures.append(f"no message naming rank {v} as lost ('process rank {v} ... exited on signal 9', "
                            f"'no message from rank {v}', or a send or receive with rank {v} that timed out)")
    finally:
        # No orphans: mpirun's session, then every rank by pid (each has its own group).
        if job.poll() is None:  # once reaped, its group id could be someone else's
            try:
                os.killpg(job.pid, signal.SIGKILL)
            except OSError:
                pass
        for pid, start in ranks.values():
            if alive(pid, start):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        try:
            job.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        log.close()
    if failures:
        print("---- last lines of the job's output ----")
        with open(args.log, errors="replace") as f:
            print("".join(f.readlines()[-25:]), end="")
        for msg in failures:
            print("FAIL:", msg)
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
