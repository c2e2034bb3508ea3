#!/usr/bin/env python3
"""bench_sdpa: PyTorch's causal attention, the yardstick of bench_attention's ladder.

  bench_sdpa.py [--reps N] [--warmup N] [--seconds S] [--no-flush] [--T 1024,2048,4096]
                [--hs 64,128] [--tokens 16384] [--json FILE]

Times torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) in bf16
on the GPU at exactly the shapes bench_attention (kernels/bench/bench_attention.cu) uses:
head size 64 (C = 768, NH = 12: GPT-2 124M) and 128 (C = 1024, NH = 8), T = 1024, 2048,
4096, B = tokens / T (16384 by default), so both programs time the same work. Each row is
one of PyTorch's fused backends, forced with torch.nn.attention.sdpa_kernel:

  flash   SDPBackend.FLASH_ATTENTION   (FlashAttention-2 inside PyTorch)
  cudnn   SDPBackend.CUDNN_ATTENTION   (cuDNN's fused attention), only where this PyTorch,
                                       its cuDNN and the GPU offer it; otherwise the rows
                                       say "unavailable" and why (PyTorch's own reasons)

and one of three passes:

  fwd       out = sdpa(q, k, v), with q, k, v requiring gradients as in training (so the
            forward also keeps the logsumexp the backward needs, as ours does)
  bwd       out.backward(dout, retain_graph=True) alone: the forward ran once, before and
            outside the timed region, and its graph is kept so the backward can be
            repeated. (Not fwd+bwd minus fwd: the difference of two noisy medians is
            not the median of anything.)
  fwd+bwd   forward then out.backward(dout), as one training step runs them

Layout. Our kernels read q, k, v packed as qkv (B, T, 3C) and write out (B, T, C);
SDPA wants (B, NH, T, hs). The inputs are made in our layout and rearranged into
contiguous (B, NH, T, hs) tensors ONCE, before anything is timed: PyTorch is timed on
the layout it prefers, without the transposes a model would pay around it. The
gradients q.grad, k.grad, v.grad are cleared before every repetition (no kernel: the
memory goes back to PyTorch's allocator), so the backward writes fresh gradients
instead of adding to old ones.

Timing, the same method as bench_attention (kernels/bench/bench_common.h):
  * warm-up calls first (--warmup, default 2), uncounted; the last one sizes the run:
    repetitions = --seconds / (its time), clamped to [3, --reps] (default 20);
  * before every repetition a buffer of 4 x the L2 (at least 64 MiB; 256 MiB where
    PyTorch does not report the L2 size) is written, outside the timed events, so every
    repetition reads its inputs from memory as in training, not from the cache
    (--no-flush turns this off); where one set of inputs is smaller than twice the L2,
    several copies are rotated as well;
  * each repetition is bracketed by CUDA events on the current stream; all repetitions
    are queued before the host waits once; the median is reported with min and max.
  Python adds tens of microseconds of host time per call (dispatch, autograd). A
  repetition whose start event the GPU reached before the host had queued its kernels
  would time the host, so a spin kernel (torch.cuda._sleep) queued before the
  repetitions gives the host a head start it cannot use up.

FLOPs, the convention of bench_attention: the forward is two products per (batch,
head), S = Q K^T and O = P V, 2 * 2 * T^2 * hs flops, halved because causal attention
skips the masked half:
  forward  = 4 B T^2 NH hs / 2;  backward = 2.5 x forward;  fwd+bwd = 3.5 x forward.
TFLOP/s = flops / median time.

Correctness: before timing, each backend runs once on the first set of inputs and its
out and (dq, dk, dv) are compared with PyTorch's math backend in float64 (one batch
element at a time, so the (NH, T, T) scores fit): error = max|x - x_ref| / max|x_ref|,
"ok" within 2e-2, the bf16 tolerance bench_attention derives and uses for its own
versions, so a row of each program means the same.

Output: a table, and with --json FILE one JSON line per row with bench_attention's
field names (bench, impl, kernels, dtype, pass, B, T, NH, hs, C, causal, ms, ms_min,
ms_max, reps, tflops, flops, error, reference, check, device) plus "backend" and
"torch"; an unavailable row has null numbers, check "unavailable" and a "reason".
kernels/bench/attention_vs_pytorch.py joins this file with bench_attention's.

Exit status: 0 after the table, 1 when there is no CUDA device (or no PyTorch), 2 on
bad arguments.
"""
import argparse
import json
import math
import sys
import warnings

HEADS_FOR_HEAD_SIZE = {64: 12, 128: 8}  # hs -> NH: C = 768 (GPT-2 124M) and C = 1024
BF16_TOLERANCE = 2e-2                   # bench_attention's kToleranceBf16
FLOPS_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
PASSES = ("fwd", "bwd", "fwd+bwd")
BACKENDS = (("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"))  # (our name, SDPBackend member)
MIB = 1 << 20
# Spin cycles queued ahead of the timed repetitions, per repetition: about half a
# millisecond at an H100's clock, far more than Python spends queuing one repetition.
# Capped at 200 repetitions' worth (~0.1 s): the host can only fall behind a little per
# repetition, and the head start must not grow into seconds of waiting for long runs.
HEAD_START_CYCLES_PER_REP = 1_000_000
HEAD_START_MAX_REPS = 200

torch = None  # imported in main(), after the arguments: --help works without PyTorch
F = None


class Shape:
    def __init__(self, B, T, NH, hs):
        self.B, self.T, self.NH, self.hs = B, T, NH, hs
        self.C = NH * hs

    def forward_flops(self):
        return 4.0 * self.B * self.T * self.T * self.NH * self.hs / 2.0  # causal: half

    def set_bytes(self):
        """One set's bytes, counted as bench_attention counts them: q, k, v, out, dout,
        dq, dk, dv in bf16 and the fp32 logsumexp."""
        return self.B * self.T * self.C * 8 * 2 + self.B * self.NH * self.T * 4


def rotation_sets(working_set_bytes, l2_bytes, max_sets=16):
    """Copies of the inputs to cycle through so that one is used again only after at
    least 2 x L2 bytes of other copies: (sets - 1) * bytes >= 2 * L2 (bench_common.h)."""
    if working_set_bytes == 0 or l2_bytes == 0 or working_set_bytes >= 2 * l2_bytes:
        return 1
    needed = -(-2 * l2_bytes // working_set_bytes) + 1
    return min(needed, max_sets)


# ---- inputs --------------------------------------------------------------------------------

class Inputs:
    """One set of q, k, v (leaves requiring gradients), dout, and the kept forward output
    of the backward-alone rows. Values uniform in (-1, 1), as bench_attention's."""

    def __init__(self, s, seed):
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)

        def uniform(shape):
            x = torch.rand(shape, generator=gen, device="cuda", dtype=torch.float32)
            return x.mul_(2).sub_(1).to(torch.bfloat16)

        # Made in our layout, qkv (B, T, 3, NH, hs), then rearranged once, here, into
        # the contiguous (B, NH, T, hs) tensors SDPA takes.
        qkv = uniform((s.B, s.T, 3, s.NH, s.hs))
        self.q, self.k, self.v = (qkv[:, :, i].transpose(1, 2).contiguous().requires_grad_() for i in range(3))
        del qkv
        self.dout = uniform((s.B, s.T, s.NH, s.hs)).transpose(1, 2).contiguous()
        self.out = None  # the forward kept for the backward-alone rows

    def clear_grads(self):
        self.q.grad = self.k.grad = self.v.grad = None

    def attention(self):
        return F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=True)


class Reference:
    """out and (dq, dk, dv) of one set by the math backend in float64, stored as fp32."""

    def __init__(self, x, s):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self.out = torch.empty(x.q.shape, device="cuda", dtype=torch.float32)
        self.grads = [torch.empty_like(self.out) for _ in range(3)]
        with sdpa_kernel(SDPBackend.MATH):
            for b in range(s.B):  # one batch element at a time: (NH, T, T) float64 scores fit
                q, k, v = (t[b:b + 1].detach().double().requires_grad_() for t in (x.q, x.k, x.v))
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                grads = torch.autograd.grad(out, (q, k, v), x.dout[b:b + 1].double())
                self.out[b:b + 1].copy_(out.detach())
                for dst, g in zip(self.grads, grads):
                    dst[b:b + 1].copy_(g)
                del q, k, v, out, grads


def relative_error(outputs, references):
    """max|x - x_ref| / max|x_ref| over all the pairs together (as over dqkv). NaN when
    anything is not finite."""
    diff = max(float((x.float() - r).abs().max()) for x, r in zip(outputs, references))
    mag = max(float(r.abs().max()) for r in references)
    if not (math.isfinite(diff) and math.isfinite(mag)):
        return math.nan
    return diff / mag if mag > 0 else diff


def verdict(error):
    if math.isnan(error):
        return "NaN"
    return "ok" if error <= BF16_TOLERANCE else "WRONG"


# ---- timing --------------------------------------------------------------------------------

class L2Flush:
    """Writes a buffer of 4 x L2 (at least 64 MiB), or 256 MiB where the L2 size is not
    known, with a value that changes every time, so no call can be skipped."""

    def __init__(self, l2_bytes):
        size = max(4 * l2_bytes, 64 * MIB) if l2_bytes > 0 else 256 * MIB
        self.buffer = torch.empty(size, dtype=torch.uint8, device="cuda")
        self.value = 0

    def __call__(self):
        self.value += 1
        self.buffer.fill_(self.value & 0xFF)


class Timing:
    def __init__(self, times_ms):
        times_ms = sorted(times_ms)
        n = len(times_ms)
        self.reps = n
        self.min_ms, self.max_ms = times_ms[0], times_ms[-1]
        self.median_ms = times_ms[n // 2] if n % 2 else 0.5 * (times_ms[n // 2 - 1] + times_ms[n // 2])


def time_on_device(launch, opt, flush):
    """bench_common.h's time_on_device: `launch(call)` queues one repetition's work on the
    current stream; call = 0, 1, 2, ... picks the input set."""
    event = lambda: torch.cuda.Event(enable_timing=True)
    call = 0
    estimate_ms = 0.0
    for _ in range(max(opt.warmup, 1)):
        if opt.flush:
            flush()
        start, stop = event(), event()
        start.record()
        launch(call)
        call += 1
        stop.record()
        stop.synchronize()
        estimate_ms = start.elapsed_time(stop)
    reps = opt.reps
    if estimate_ms > 0:
        reps = int(min(reps, math.floor(opt.seconds * 1e3 / estimate_ms)))
    reps = max(reps, min(3, opt.reps), 1)

    starts = [event() for _ in range(reps)]
    stops = [event() for _ in range(reps)]
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(HEAD_START_CYCLES_PER_REP * min(reps, HEAD_START_MAX_REPS))
    for r in range(reps):
        if opt.flush:
            flush()
        starts[r].record()
        launch(call)
        call += 1
        stops[r].record()
    stops[-1].synchronize()
    return Timing([a.elapsed_time(b) for a, b in zip(starts, stops)])


# ---- the benchmark ---------------------------------------------------------------------------

def attempt(action):
    """Runs action(); returns (result, None), or (None, reason) when PyTorch refuses the
    forced backend. PyTorch gives its reasons as warnings before the error
    ("No available kernel"), so those are collected too."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return action(), None
        except (RuntimeError, NotImplementedError) as e:
            said = [str(w.message).strip() for w in caught]
            error_lines = str(e).strip().splitlines()
            return None, "; ".join(said + [error_lines[0] if error_lines else type(e).__name__])


class Bench:
    def __init__(self, opt, json_file, device_name, l2_bytes, torch_version):
        self.opt = opt
        self.json = json_file  # None without --json
        self.device_name = device_name
        self.l2_bytes = l2_bytes
        self.torch_version = torch_version
        self.flush = L2Flush(l2_bytes)
        self.rows = []  # (cells, note) per table row; None for a blank line

    def emit(self, s, backend, enum_name, pass_name, timing=None, error=math.nan, reference="", reason=""):
        """One row, to the table and the JSON file. timing None: the backend was refused."""
        flops = s.forward_flops() * FLOPS_FACTOR[pass_name]
        available = timing is not None
        tflops = flops / (timing.median_ms * 1e-3) * 1e-12 if available else math.nan
        check = (verdict(error) if reference else "no reference") if available else "unavailable"
        cells = [backend, pass_name, str(s.B), str(s.T), str(s.NH), str(s.hs)]
        if available:
            cells += [f"{timing.median_ms:.3f}", f"{timing.min_ms:.3f}", f"{timing.max_ms:.3f}", str(timing.reps),
                      f"{tflops:.1f}", f"{error:.1e}" if reference else "-", check]
        else:
            cells += ["-"] * 6 + [check]
        self.rows.append((cells, short(reason)))
        if self.json:
            def number(x):
                return float(f"{x:.6g}") if x is not None and math.isfinite(x) else None

            line = {
                "bench": "sdpa", "impl": "pytorch-" + backend, "backend": backend,
                "kernels": "torch sdpa " + enum_name, "dtype": "bf16", "pass": pass_name,
                "B": s.B, "T": s.T, "NH": s.NH, "hs": s.hs, "C": s.C, "causal": True,
                "ms": number(timing.median_ms if available else None),
                "ms_min": number(timing.min_ms if available else None),
                "ms_max": number(timing.max_ms if available else None),
                "reps": timing.reps if available else 0,
                "tflops": number(tflops), "flops": number(flops), "error": number(error),
                "reference": reference, "check": check, "device": self.device_name, "torch": self.torch_version,
            }
            if not available:
                line["reason"] = reason
            self.json.write(json.dumps(line) + "\n")
            self.json.flush()

    def run_shape(self, s):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        sets = [Inputs(s, 1000 * (i + 1)) for i in range(rotation_sets(s.set_bytes(), self.l2_bytes))]
        reference, reference_name = None, ""
        try:
            reference, reference_name = Reference(sets[0], s), "math-fp64"
        except torch.cuda.OutOfMemoryError:
            print(f"bench_sdpa: T={s.T} hs={s.hs}: no memory for the float64 reference, not checked",
                  file=sys.stderr)
        torch.cuda.empty_cache()

        for backend, enum_name in BACKENDS:
            member = getattr(SDPBackend, enum_name, None)
            if member is None:
                for p in PASSES:
                    self.emit(s, backend, enum_name, p, reason=f"this PyTorch has no SDPBackend.{enum_name}")
                continue
            with sdpa_kernel(member):  # this backend or an error, never a silent fallback
                self.run_backend(s, backend, enum_name, sets, reference, reference_name)
            for x in sets:
                x.out = None
                x.clear_grads()
        self.rows.append(None)
        del sets, reference
        torch.cuda.empty_cache()

    def run_backend(self, s, backend, enum_name, sets, reference, reference_name):
        # The check run on set 0: the forward, then the backward, each of which the
        # backend may refuse on its own (a backend can have a forward and no backward).
        x0 = sets[0]
        out, why_no_forward = attempt(x0.attention)
        if out is None:
            for p in PASSES:
                self.emit(s, backend, enum_name, p, reason=why_no_forward)
            return
        grads, why_no_backward = attempt(lambda: torch.autograd.grad(out, (x0.q, x0.k, x0.v), x0.dout))
        torch.cuda.synchronize()
        error_forward = error_backward = math.nan
        if reference is not None:
            error_forward = relative_error([out], [reference.out])
            if grads is not None:
                error_backward = relative_error(grads, reference.grads)
        del out, grads

        def set_for(call):  # rotation through the copies of the inputs
            return sets[call % len(sets)]

        def forward(call):
            set_for(call).attention()

        def backward(call):
            x = set_for(call)
            x.clear_grads()
            x.out.backward(x.dout, retain_graph=True)

        def forward_backward(call):
            x = set_for(call)
            x.clear_grads()
            x.attention().backward(x.dout)

        t = time_on_device(forward, self.opt, self.flush)
        self.emit(s, backend, enum_name, "fwd", t, error_forward, reference_name)
        if why_no_backward is not None:
            for p in ("bwd", "fwd+bwd"):
                self.emit(s, backend, enum_name, p, reason=why_no_backward)
            return
        for x in sets:  # the forward whose backward the backward-alone rows repeat
            x.out = x.attention()
        t = time_on_device(backward, self.opt, self.flush)
        self.emit(s, backend, enum_name, "bwd", t, error_backward, reference_name)
        for x in sets:
            x.out = None  # frees the kept graph
        t = time_on_device(forward_backward, self.opt, self.flush)
        self.emit(s, backend, enum_name, "fwd+bwd", t, error_backward, reference_name)

    def print_table(self):
        """Columns as wide as their widest cell, text left-aligned, numbers right-aligned;
        a row's note (why a backend was refused) follows its last cell and widens nothing."""
        headers = ["backend", "pass", "B", "T", "NH", "hs", "ms", "min", "max", "reps", "TFLOP/s", "error", "check"]
        left_columns = 2
        widths = [len(h) for h in headers]
        for row in self.rows:
            if row is not None:
                for c, cell in enumerate(row[0]):
                    widths[c] = max(widths[c], len(cell))

        def line(cells, note=""):
            padded = [cell.ljust(widths[c]) if c < left_columns else cell.rjust(widths[c])
                      for c, cell in enumerate(cells)]
            return ("  ".join(padded) + "  " + note).rstrip()

        print(line(headers))
        print("-" * (sum(widths) + 2 * (len(widths) - 1)))
        for row in self.rows:
            print("" if row is None else line(*row))
        sys.stdout.flush()


def short(reason, limit=100):
    reason = " ".join(reason.split())
    return reason if len(reason) <= limit else reason[:limit - 3] + "..."


# ---- command line ----------------------------------------------------------------------------

def int_list(text):
    try:
        values = [int(item) for item in text.split(",") if item]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of whole numbers")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"'{text}' must list positive whole numbers")
    return values


def parse(argv):
    p = argparse.ArgumentParser(
        prog="bench_sdpa.py",
        description="PyTorch scaled_dot_product_attention (flash, cuDNN), causal bf16, at bench_attention's shapes.")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions, at most (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls first (default 2)")
    p.add_argument("--seconds", type=float, default=2.0,
                   help="time budget per measurement: fewer repetitions (at least 3) for slow ones (default 2)")
    p.add_argument("--no-flush", dest="flush", action="store_false", help="do not evict the L2 between repetitions")
    p.add_argument("--T", type=int_list, default=[1024, 2048, 4096], help="sequence lengths (default 1024,2048,4096)")
    p.add_argument("--hs", type=int_list, default=[64, 128], help="head sizes: 64 (C=768, NH=12), 128 (C=1024, NH=8)")
    p.add_argument("--tokens", type=int, default=16384, help="B*T of every shape (default 16384; B = tokens / T)")
    p.add_argument("--json", metavar="FILE", default="", help="also write every row as a JSON line to FILE")
    opt = p.parse_args(argv)
    if not 1 <= opt.reps <= 100000:
        p.error(f"--reps: {opt.reps} is not in [1, 100000]")
    if not 1 <= opt.warmup <= 1000:
        p.error(f"--warmup: {opt.warmup} is not in [1, 1000]")
    if not 0 <= opt.seconds <= 3600:
        p.error(f"--seconds: {opt.seconds} is not in [0, 3600]")
    for hs in opt.hs:
        if hs not in HEADS_FOR_HEAD_SIZE:
            p.error(f"--hs: {hs}: head sizes are 64 or 128")
    if not 1 <= opt.tokens <= 1 << 24:
        p.error(f"--tokens: {opt.tokens} is not in [1, {1 << 24}]")
    for T in opt.T:
        if opt.tokens % T:
            p.error(f"--T: {T} does not divide --tokens {opt.tokens}")
    return opt


def main(argv):
    global torch, F
    opt = parse(argv)
    try:
        import torch as torch_module
    except ImportError as e:
        print(f"bench_sdpa: PyTorch is not installed for {sys.executable} ({e})", file=sys.stderr)
        return 1
    torch = torch_module
    if not torch.cuda.is_available():
        print(f"bench_sdpa: no CUDA device: torch.cuda.is_available() is false "
              f"(torch {torch.__version__}, built with CUDA {torch.version.cuda or 'none'})", file=sys.stderr)
        return 1
    try:
        import torch.nn.attention  # noqa: F401  (sdpa_kernel, SDPBackend: PyTorch 2.3 and later)
    except ImportError:
        print(f"bench_sdpa: torch {torch.__version__} has no torch.nn.attention.sdpa_kernel (needs 2.3 or later)",
              file=sys.stderr)
        return 1
    import torch.nn.functional as functional
    F = functional
    json_file = None
    if opt.json:
        try:
            json_file = open(opt.json, "w")
        except OSError as e:
            print(f"bench_sdpa: --json: cannot write '{opt.json}': {e.strerror}", file=sys.stderr)
            return 2

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    print(f"bench_sdpa: PyTorch scaled_dot_product_attention, causal, bf16, {opt.tokens} tokens per shape")
    print(f"device      {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
          f"{props.total_memory / (1 << 30):.1f} GiB, L2 "
          + (f"{l2_bytes / MIB:.1f} MiB)" if l2_bytes else "size not reported)"))
    print(f"torch       {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn or 'none'}")
    print(f"timing      median of up to {opt.reps} repetitions (budget {opt.seconds:.1f} s each), {opt.warmup} "
          f"warm-up, L2 flush {'on' if opt.flush else 'off'}")
    print("layout      q, k, v contiguous (B, NH, T, hs), rearranged from qkv (B, T, 3C) once, outside timing")
    print("flops       fwd 4*B*T^2*NH*hs/2 (causal), bwd 2.5x, fwd+bwd 3.5x")
    print("bwd         out.backward(dout, retain_graph=True) alone, the forward run once before the timing")
    print("error       max|x - x_ref| / max|x_ref| (out for fwd, dq,dk,dv for bwd), reference math backend "
          "in float64\n")

    bench = Bench(opt, json_file, props.name, l2_bytes, torch.__version__)
    for hs in opt.hs:
        for T in opt.T:
            NH = HEADS_FOR_HEAD_SIZE[hs]
            bench.run_shape(Shape(opt.tokens // T, T, NH, hs))
            print(f"bench_sdpa: hs={hs} T={T} done", file=sys.stderr)
    bench.print_table()
    if json_file:
        json_file.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
