"""Reading the runs that scripts/notebook_runs.sh makes, for the notebooks beside this file.

Nothing here knows a number of a run: every value comes from a run directory
(metrics.jsonl, the checkpoint's manifest.json, trace.rank<r>.json, the trainer's
stdout.txt) or from a file the script saved (allreduce.txt). The memory formulas at the end are the stage
READMEs' ones, evaluated on a run's resolved config and layout.

Where the runs are: $GPT_NOTEBOOK_RUNS when set (a relative one taken from the
repository root, as scripts/notebook_runs.sh takes it: this file's parent directory),
else runs/notebooks under the repository root (found by walking up from the working
directory to the directory that holds both notebooks/ and stages/).

Uses the standard library only; the notebooks bring numpy and matplotlib.
"""
import glob
import json
import math
import os
import pathlib
import re
import sys
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
import trace_spans  # noqa: E402  (scripts/: reading a trace and finding its steps, written once)
import comm_table  # noqa: E402  (scripts/: reading a stage's printed communication table)


def repo_root(start=None):
    """The repository root: the first directory at or above `start` (default: the
    working directory) with both notebooks/ and stages/ in it."""
    here = os.path.abspath(start or os.getcwd())
    while True:
        if os.path.isdir(os.path.join(here, "notebooks")) and os.path.isdir(os.path.join(here, "stages")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            raise FileNotFoundError("no repository root (a directory with notebooks/ and stages/) above "
                                    + os.path.abspath(start or os.getcwd()))
        here = parent


def runs_root():
    """Where scripts/notebook_runs.sh put the runs ($GPT_NOTEBOOK_RUNS, else runs/notebooks);
    a relative $GPT_NOTEBOOK_RUNS is taken from the repository root, this file's parent
    directory, as the script takes it (a notebook's kernel runs in notebooks/)."""
    given = os.environ.get("GPT_NOTEBOOK_RUNS")
    if given:
        root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), given)
    else:
        root = os.path.join(repo_root(), "runs", "notebooks")
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} does not exist: make the runs first with scripts/notebook_runs.sh")
    return root


def path(*parts):
    """A path inside the runs directory; fails, naming the script, when it is missing."""
    p = os.path.join(runs_root(), *parts)
    if not os.path.exists(p):
        raise FileNotFoundError(f"{p} is missing: run scripts/notebook_runs.sh again")
    return p


def since_steps_went_down(lines):
    """The lines from the last train step that did not follow on from the one before (files
    written before start lines: such a step began a new run)."""
    last_start, previous = 0, None
    for i, line in enumerate(lines):
        if line.get("kind") == "train":
            if previous is not None and line["step"] <= previous:
                last_start = i
            previous = line["step"]
    return lines[last_start:]


def last_run(lines):
    """The lines of the last run in a metrics file (docs/metrics.md): a "start" line at step
    0 begins a run; one at step s > 0 resumes a checkpoint of step s, and continues the run
    before it when that run trained step s (its lines past s, which a killed launch left,
    are superseded), else it begins one (a checkpoint of another run directory)."""
    first = next((i for i, line in enumerate(lines) if line.get("kind") == "start"), len(lines))
    kept = since_steps_went_down(lines[:first])
    trained = {k["step"] for k in kept if k.get("kind") == "train"}  # the steps of kept's train lines
    for line in lines[first:]:
        if line.get("kind") == "start":
            s = line["step"]
            if s > 0 and s in trained:  # it continues: kept's steps rise, so its lines past s are a tail
                while kept[-1]["step"] > s:
                    dropped = kept.pop()
                    if dropped.get("kind") == "train":
                        trained.discard(dropped["step"])
            else:
                kept, trained = [], set()
        kept.append(line)
        if line.get("kind") == "train":
            trained.add(line["step"])
    return kept


def step_of_dir(directory):
    """N of a checkpoint directory step_N, or step_N.old (a save's rename interrupted: the
    trainer names a checkpoint after its step)."""
    m = re.fullmatch(r"step_(\d+)(\.old)?", os.path.basename(directory))
    return int(m.group(1)) if m else -1


class Run:
    """One run directory: its metrics lines, its resolved config and its layout.

    train, val   the "train" and "val" lines of the last run in metrics.jsonl (a file
                 can hold several runs: a "start" line at step 0 begins one, and a
                 resume's supersedes the lines past its step; docs/metrics.md)
    config       the complete config the trainer ran with (defaults included), from the
                 manifest.json of the newest checkpoint whose step lies within that last
                 run's steps (from the step before its first): one past them is another
                 run's, left where this run wrote none. Steps alone cannot tell runs
                 apart: a run that writes no checkpoint beside an earlier run's of a step
                 it also trained reads that one. {} when there is none
    layout       {"dp", "tp", "pp", "cp"} from the same manifest
    """

    def __init__(self, *parts):
        self.dir = path(*parts)
        self.name = "/".join(parts)
        lines = []
        with open(os.path.join(self.dir, "metrics.jsonl")) as f:
            for number, text in enumerate(f, 1):
                if not text.strip():
                    continue
                try:
                    line = json.loads(text)
                except json.JSONDecodeError:  # a run killed mid-line leaves it torn
                    warnings.warn(f"{self.dir}/metrics.jsonl line {number} is not JSON (torn by a stopped run): skipped")
                    continue
                step = line.get("step") if isinstance(line, dict) else None
                if not isinstance(step, int) or isinstance(step, bool):
                    raise ValueError(f"{self.dir}/metrics.jsonl line {number}: not a metrics line (an object with "
                                     f"an integer step, docs/metrics.md): {text.strip()[:120]}")
                lines.append(line)
        lines = last_run(lines)
        self.train = [line for line in lines if line.get("kind") == "train"]
        self.val = [line for line in lines if line.get("kind") == "val"]
        if not self.train:
            raise ValueError(f"{self.dir}/metrics.jsonl has no train line")
        first, last = self.train[0]["step"], self.train[-1]["step"]
        manifests = sorted((m for m in glob.glob(os.path.join(self.dir, "step_*", "manifest.json"))
                            if first - 1 <= step_of_dir(os.path.dirname(m)) <= last),
                           key=lambda m: (step_of_dir(os.path.dirname(m)), not m.endswith(".old/manifest.json")))
        self.config, self.layout = {}, {}
        if manifests:
            try:
                with open(manifests[-1]) as f:
                    manifest = json.load(f)
                self.config, self.layout = manifest["config"], manifest["layout"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{manifests[-1]}: not a checkpoint manifest with a config and a layout ({e!r})")

    def steps(self):
        return [line["step"] for line in self.train]

    def losses(self):
        return [line["loss"] for line in self.train]

    def mem(self):
        """Bytes by kind of rank 0, from the last train line (the peaks so far)."""
        return self.train[-1]["mem"]

    def comm_table(self, kind):
        """Rank 0's communication in the first step, as the trainer printed it to
        stdout.txt (scripts/comm_table.py): {operation: {"calls", "bytes",
        "formula_calls", "formula_bytes"}}; empty when the step moved nothing."""
        stdout = os.path.join(self.dir, "stdout.txt")
        with open(stdout) as f:
            return comm_table.read_comm_table(f.read(), kind, stdout)

    def traces(self):
        """{rank: [complete events]} of the run's trace files: trace.rank<r>.json of stages
        02+, or stage 01's trace.json (or trace) as rank 0's."""
        out = {}
        for p in glob.glob(os.path.join(self.dir, "*.rank*.json")):
            m = re.search(r"\.rank(\d+)\.json$", p)
            if m:  # not trace.rank0.old.json and the like
                out[int(m.group(1))] = trace_spans.read_spans(p)  # TraceError naming a bad file
        for name in ("trace.json", "trace"):  # stage 01 writes trace_file as named
            if not out and os.path.isfile(os.path.join(self.dir, name)):
                out[0] = trace_spans.read_spans(os.path.join(self.dir, name))
        if not out:
            raise FileNotFoundError(f"{self.dir} has no trace files (TRACE.rank<r>.json, or stage 01's trace.json)")
        return dict(sorted(out.items()))


def step_starts(events):
    """Start times (us) of the steps of one rank's trace (trace_spans: each step's first
    "zero_grads", however many model chunks a rank zeroes)."""
    return trace_spans.step_starts(events)


# ---------------------------------------------------------------------------------------
# Pipelines (stages 07-09): what the trainer prints, the schedule, the bubble from traces.

# The spans of a pipeline rank's trace that are computation: a forward, a whole backward,
# or (ZB-H1) a backward's input half and its weight half. Everything else inside a step's
# schedule (waiting for a message, for sends to finish) or no span at all is idle time.
COMPUTE_SPANS = ("forward", "backward", "backward_input", "backward_weight")
SCHEDULE_SPANS = COMPUTE_SPANS + ("recv_activation", "recv_gradient", "wait_send", "wait_sends")


def pipeline_report(run):
    """What a pipeline trainer printed (stdout.txt of the run directory):
      ranks   {rank: {"pp_rank", "in_flight", "bound", "activations_mib", "slots", "block_sets",
              "peak_mib", "activations_bytes"}}, the lines every rank prints after the first
              step (block_sets: the sets of the block pool an interleaved rank's chunks
              share, None without one; the bytes: the activations' peak, exact, from the
              memory line under it, None in the logs of runs from before the line printed it)
      bubble  {rank: idle share} and bubble_mean, theory: the last line of the run
    (the numbers as printed: percentages as fractions, MiB with two decimals)."""
    with open(os.path.join(run.dir, "stdout.txt")) as f:
        text = f.read()
    ranks = {}
    for m in re.finditer(r"^rank (\d+) \(pipeline rank (\d+) of \d+\): "
                         r"(?:micro-batches|chunk activations) in flight (\d+) "
                         r"\(schedule's bound (\d+)\), activations ([\d.]+) MiB "
                         r"\((\d+) slots?(?:: [\d +]+ by chunk)?(?:, blocks' activations in (\d+) shared sets)?\), "
                         r"peak memory ([\d.]+) MiB(?:\n  memory peaks .* activations (\d+) \|)?", text, re.M):
        ranks[int(m[1])] = {"pp_rank": int(m[2]), "in_flight": int(m[3]), "bound": int(m[4]),
                            "activations_mib": float(m[5]), "slots": int(m[6]),
                            "block_sets": int(m[7]) if m[7] else None, "peak_mib": float(m[8]),
                            "activations_bytes": int(m[9]) if m[9] else None}
    if not ranks:
        raise ValueError(f"{run.dir}/stdout.txt has no 'micro-batches in flight' line: not a pipeline run?")
    world = math.prod(run.layout.values()) if run.layout else len(ranks)
    if sorted(ranks) != list(range(world)):  # a line that stopped matching must not drop its rank
        raise ValueError(f"{run.dir}/stdout.txt: 'micro-batches in flight' lines of ranks {sorted(ranks)}, "
                         f"not of each of the {world} ranks")
    out = {"ranks": dict(sorted(ranks.items()))}
    m = re.search(r"^pipeline bubble .*?:(?P<ranks>( pp rank \d+ [\d.]+%)+) \| mean (?P<mean>[\d.]+)% \| "
                  r"theory (?P<theory>[\d.]+)%", text, re.M)
    if not m:
        raise ValueError(f"{run.dir}/stdout.txt has no 'pipeline bubble' line (the run trained no step?)")
    out["bubble"] = {int(r): float(v) / 100 for r, v in re.findall(r"rank (\d+) ([\d.]+)%", m["ranks"])}
    out["bubble_mean"], out["theory"] = float(m["mean"]) / 100, float(m["theory"]) / 100
    return out


def read_schedule(file_path):
    """The actions of every rank in the order the rank runs them, from the output of
    build/bin/pipeline_schedule that scripts/notebook_runs.sh saves (schedule.txt):
    {rank: [(kind, micro-batch, chunk)]}, kind "F" (forward), "B" (backward, or its input
    half where a "W" follows) or "W" (the weight half); chunk 0, 1, ... for a, b, ..."""
    out = {}
    with open(file_path) as f:
        for line in f:
            m = re.match(r"^rank (\d+) \|(.*)\|\s*$", line)
            if m:
                out[int(m[1])] = [(k, int(i), ord(c) - ord("a") if c else 0)
                                  for k, i, c in re.findall(r"([FBW])(\d+)([a-z]?)", m[2])]
    if not out:
        raise ValueError(f"{file_path} holds no schedule (lines 'rank R |...|')")
    return dict(sorted(out.items()))


def pipeline_windows(events):
    """(start, end) in microseconds of every step's schedule on one rank: from its first
    span of the schedule (a forward, or the wait for its input) to the end of its
    "wait_sends" span, the executor's last act. A step starts with a barrier of the
    pipeline ranks, so the starts are one instant on every rank (each in its own clock)."""
    spans = sorted((e for e in events if e.get("tid", 0) == 0), key=lambda e: e["ts"])
    out, start, in_step = [], None, False
    for e in spans:
        if e["name"] == "zero_grads":  # a step begins
            start, in_step = None, True
        elif in_step and e["name"] in SCHEDULE_SPANS:
            if start is None:
                start = e["ts"]
            if e["name"] == "wait_sends":  # the schedule is done; what follows (validation) is no step's
                out.append((start, e["ts"] + e["dur"]))
                in_step = False
    return out


def compute_spans(events, window):
    """A rank's computation spans (COMPUTE_SPANS) inside a window, in time order."""
    t0, t1 = window
    return sorted((e for e in events if e.get("tid", 0) == 0 and e["name"] in COMPUTE_SPANS and t0 <= e["ts"] < t1),
                  key=lambda e: e["ts"])


def pipeline_bubbles(traces):
    """The bubble of every rank in every step, from the traces, as the trainers define it:

        bubble(rank, step) = 1 - busy(rank) / makespan(step)

    busy: the rank's time in computation spans within the step's schedule; makespan: the
    longest of the ranks' schedule windows (they all start at the step's barrier).
    Returns ({rank: [bubble per step]}, [makespan per step in microseconds])."""
    windows = {r: pipeline_windows(ev) for r, ev in traces.items()}
    n = min((len(w) for w in windows.values()), default=0)
    if n == 0:
        raise ValueError("the traces have no complete pipeline step (no wait_sends span)")
    makespans = [max(windows[r][k][1] - windows[r][k][0] for r in traces) for k in range(n)]
    out = {}
    for r, events in traces.items():
        busy = [sum(e["dur"] for e in compute_spans(events, windows[r][k])) for k in range(n)]
        out[r] = [1 - b / s for b, s in zip(busy, makespans)]
    return out, makespans


def read_allreduce(file_path):
    """Rows of bench_allreduce's tables: dicts with implementation, size_mib, ranks, ms,
    algbw and busbw (GB/s). The columns are read from the right, since an
    implementation's name has spaces in it."""
    rows = []
    pattern = re.compile(r"^(?P<name>\S.*?)\s+(?P<size>[\d.]+)\s+(?P<ranks>\d+)\s+(?P<ms>[\d.]+)\s+"
                         r"(?P<ratio>[\d.]+)\s+(?P<alg>[\d.]+)\s+(?P<bus>[\d.]+)$")
    with open(file_path) as f:
        for line in f:
            m = pattern.match(line.rstrip())
            if m and not line.startswith("implementation"):
                rows.append({"implementation": m["name"], "size_mib": float(m["size"]), "ranks": int(m["ranks"]),
                             "ms": float(m["ms"]), "algbw": float(m["alg"]), "busbw": float(m["bus"])})
    if not rows:
        raise ValueError(f"{file_path} holds no bench_allreduce table")
    return rows


# ---------------------------------------------------------------------------------------
# Memory formulas of the stage READMEs (02-05 and 06; 10 applies 06's over dp x cp).

KINDS = ("params", "grads", "optimizer")


def padded_vocab(vocab_size):
    """The vocabulary rounded up to a multiple of 128 (common/config.h)."""
    return (vocab_size + 127) // 128 * 128


def units(config, tp=1, tp_rank=0):
    """Parameter counts of the units one rank holds, in layout order: the embeddings
    (this rank's rows of the padded vocabulary and every position), each block (its
    matrices split by tp, its layernorms and row-parallel biases whole), the final
    layernorm. With tp = 1 these are the whole model's units, and their sum is P."""
    C, L = config["n_embd"], config["n_layer"]
    Vp = padded_vocab(config["vocab_size"])
    vocab_rows = Vp * (tp_rank + 1) // tp - Vp * tp_rank // tp
    embeddings = vocab_rows * C + config["block_size"] * C
    block = 12 * C * C // tp + 7 * C // tp + 6 * C
    return [embeddings] + [block] * L + [2 * C]


def buckets(unit_sizes, bucket_mb):
    """Gradient buckets in backward order (final layernorm, last block ... first, then
    the embeddings), each closed once it holds bucket_mb MiB of fp32: a list of
    (elements, [unit indices])."""
    limit = max(1, int(bucket_mb * 1024 * 1024 / 4))
    order = [len(unit_sizes) - 1] + list(range(len(unit_sizes) - 2, 0, -1)) + [0]
    out = []
    for u in order:
        if not out or out[-1][0] >= limit:
            out.append([0, []])
        out[-1][0] += unit_sizes[u]
        out[-1][1].append(u)
    return [tuple(b) for b in out]


def zero_memory(unit_sizes, zero, ranks, rank, bucket_mb, precision):
    """Bytes of params, grads and optimizer state one rank holds when ZeRO stage `zero`
    shards these units over `ranks` ranks (stage 02 is zero 0, 03-05 are 1-3).

      P = the units' sum; S = rank's shard [floor(r P / N), floor((r+1) P / N))
      live buckets = the embeddings' bucket + the largest other one, twice (one fills
                     while the other is reduced; once when there is only one)
      gathered     = the embeddings + two blocks (the current one and the prefetched)
      zero 0: wP, 4P, k P      zero 1: wP, 4P, k S      zero 2: wP, 4(S + live), k S
      zero 3: w(S + gathered), 4(S + live), k S          (k = 8 in fp32, 12 in bf16)
    w = 4 in fp32, 2 in bf16 (every stage stores bf16 weights in bf16 mode).
    Returns (bytes by kind, the terms)."""
    P = sum(unit_sizes)
    S = P * (rank + 1) // ranks - P * rank // ranks
    bk = buckets(unit_sizes, bucket_mb)
    emb = bk[-1][0]
    others = [b[0] for b in bk[:-1]]
    live = emb + min(2, len(others)) * max(others, default=0)
    E, B = unit_sizes[0], unit_sizes[1]
    gathered = E + 2 * B if len(unit_sizes) >= 4 else E + B + unit_sizes[-1]  # one block: ln_f prefetched beside it
    k = 12 if precision == "bf16" else 8
    w = 2 if precision == "bf16" else 4
    params = w * (S + gathered) if zero == 3 else w * P
    grads = 4 * (S + live) if zero >= 2 else 4 * P
    optimizer = k * (S if zero >= 1 else P)
    terms = {"P": P, "S": S, "buckets": [b[0] for b in bk], "live buckets": live, "gathered": gathered}
    return {"params": params, "grads": grads, "optimizer": optimizer}, terms


# The ZeRO stage each stage applies by construction (06 and 10 take the `zero` key).
STAGE_ZERO = {"01": 0, "02": 0, "03": 1, "04": 2, "05": 3}


def formula(stage, run):
    """The README formula of `stage` ("01" ... "10") for rank 0 of `run`, from the run's
    resolved config and layout: (bytes by kind, terms)."""
    cfg, lay = run.config, run.layout
    if not cfg:
        raise ValueError(f"{run.dir} has no checkpoint manifest: its config is unknown")
    tp, dp, cp = lay.get("tp", 1), lay.get("dp", 1), lay.get("cp", 1)
    zero = STAGE_ZERO.get(stage, cfg["zero"])
    # Stage 10 keeps a ZeRO shard per rank of dp x cp: all of them hold the same slices.
    return zero_memory(units(cfg, tp, 0), zero, dp * cp, 0, cfg["bucket_mb"], cfg["precision"])


# ---------------------------------------------------------------------------------------
# Activation checkpointing (stage 11): what recompute takes off a rank's activations.

def block_activation_bytes(config, layout):
    """One block's activations for one micro-batch on one rank (common/model_block.h's
    BlockActivations; values of 4 bytes, 2 in bf16, statistics of 4): ln1, resid2, ln2,
    resid3 on the residual rows r; q|k|v, the attention output and the MLP's two hidden layers on the N tokens,
    this rank's heads and hidden units; the layernorms' mean and rstd on r rows, the
    attention's logsumexp per local head and token. N = micro_batch_size x seq_len / cp,
    r = N / tp under sequence parallelism, else N. Returns (block bytes, bytes of its
    output (the rows x C values full recompute keeps), bytes of its cheap buffers ln1, ln2
    and fch_gelu (the ones selective recompute rebuilds))."""
    tp, cp = layout.get("tp", 1), layout.get("cp", 1)
    C, heads = config["n_embd"], config["n_head"] // tp
    N = config["micro_batch_size"] * config["seq_len"] // cp
    r = N // tp if config.get("sequence_parallel") else N
    W, F = C // tp, 4 * C // tp
    values = 4 * r * C + N * (3 * W + W + 2 * F)
    stats = 4 * r + N * heads
    a = 2 if config.get("precision") == "bf16" else 4  # bytes of a stored value
    return a * values + 4 * stats, a * r * C, a * (2 * r * C + N * F)


def recompute_saved_bytes(config, layout, slots, layers_per_chunk, chunks=1, block_sets=None):
    """Bytes of activations the run's activation_checkpointing mode (config) saves on a
    rank whose model chunks have `slots` activation slots in all and `layers_per_chunk`
    layers each, against the same run keeping every activation. The blocks' activations
    are kept in `block_sets` sets (the block pool interleaved chunks share, as the run
    without recompute printed it; one per slot when None). full: every slot keeps its
    blocks' outputs, no set their activations; selective: each set keeps all but the
    cheap buffers. Either way the rank holds, for the block running now, what a kept block
    lacks (`chunks` such sets where each chunk keeps its own; stage 11's chunks share one)."""
    block, output, cheap = block_activation_bytes(config, layout)
    mode = config["activation_checkpointing"]
    mode = {True: "full", False: "none"}.get(mode, mode)  # manifests from when the key was a switch
    sets = slots if block_sets is None else block_sets
    kept_without = sets * layers_per_chunk * block
    kept = {"none": kept_without, "full": slots * layers_per_chunk * output,
            "selective": sets * layers_per_chunk * (block - cheap)}[mode]
    working_set = {"none": 0, "full": block, "selective": cheap}[mode]
    return kept_without - kept - chunks * working_set
