#!/usr/bin/env python3
"""The PyTorch oracle for our GPT-2: an independent implementation to check ours against.

oracle_dump (oracle_dump.cpp) ran our C++ model on a fixed problem in three
precisions and wrote its results, the initial weights, the tokens and a meta.json
into a directory. This script builds the same GPT-2 from scratch in PyTorch, runs
the same problem, and judges ours:

  G    torch float64                     the ground truth
  B32  torch float32                     the fp32 baseline
  Bbf  torch float32 + bf16 rounding     the bf16 baseline: rounds exactly where the
       (RoundBF16 below)                 C++ model calls store()

  ours f64  vs G:  relative error <= 1e-9            (the same math in double)
  ours f32  vs G:  err <= 4 * err(B32 vs G) + 8 * 2^-23
  ours bf16 vs G:  err <= 4 * err(Bbf vs G) + 8 * 2^-8

err(B32 vs G) and err(Bbf vs G) are each the largest error of four draws of the
baseline: the model as is and three relabellings of its hidden units
(symmetry_permutation), which compute the same function with every rounding error
drawn anew. One draw is too noisy a yardstick for the Adam updates (README.md).

README.md next to this file derives these bounds. The quantities: the logits and
loss of micro-batch 0, the gradient of every parameter tensor, and, after 5 AdamW
steps with gradient accumulation 2, the loss and gradient norm of each step and
the update (final - initial) and AdamW's two moments (m, v) of every parameter
tensor. Errors are relative:
||ours - G|| / ||G||, per tensor.

Usage: /usr/bin/python3 torch_gpt2.py --dir OUT_DIR   (exit 0 pass, 1 fail, 77 skip)
"""
import argparse
import json
import math
import sys
from pathlib import Path

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as missing:  # CTest reports exit 77 as "skipped"
    print(f"torch_gpt2.py: skipped: {missing} (install python3-torch and python3-numpy, "
          f"and run with /usr/bin/python3)")
    sys.exit(77)


# --- tolerances (derived in README.md) ------------------------------------------
F64_BOUND = 1e-9           # ours f64 vs G
EPS32 = 2.0 ** -23         # fp32 machine epsilon
EPS_BF16_UNIT = 2.0 ** -8  # bf16 unit round-off (8 significant bits)
FACTOR = 4.0               # ours may be up to 4x worse than the torch baseline
DRAWS = 4                  # baseline draws: the model + 3 relabellings of it
PERM_SEED = 2024           # the relabellings are random but fixed
F32_FLOOR = 8 * EPS32
BF16_FLOOR = 8 * EPS_BF16_UNIT


# --- bf16 emulation ----------------------------------------------------------------
class RoundBF16(torch.autograd.Function):
    """Identity in value space except that the value is rounded to the nearest bf16
    (ties to even) on the way forward, and the gradient is rounded on the way back.

    The C++ model in bf16 mode rounds every stored activation, and in backward every
    stored activation gradient (oracle_dump runs GPT2<float>, whose fp32 buffers are
    rounded in place: the bits of bf16 storage, tests/model/test_bf16_storage.cpp).
    Wrapping the same tensors here in RoundBF16 rounds the same values: forward, the
    output of the op; backward, the gradient with respect to that output, which in
    the C++ backward is exactly the buffer it rounds (d_logits, d of ln_f's output,
    d of each residual stream, d of fch_gelu, fch, ln_2, atty, qkv, ln_1). Where a
    tensor has two consumers (the residual stream), autograd sums both gradients
    before this backward runs, as the C++ accumulates both into d_resid before its
    store()."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(torch.bfloat16).to(grad.dtype)


def no_rounding(x):
    return x


# --- the model -----------------------------------------------------------------------
def causal_attention(qkv, n_head):
    """Causal multi-head self-attention, written out. qkv is (B, T, 3C): q, k, v,
    head h in columns [h*hs, (h+1)*hs) of each, as kernels/ops.h lays it out."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, v = qkv.split(C, dim=-1)
    # (B, T, C) -> (B, NH, T, hs)
    q, k, v = (t.reshape(B, T, n_head, hs).transpose(1, 2) for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # u > t is masked
    scores = scores.masked_fill(future, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return (probs @ v).transpose(1, 2).reshape(B, T, C)


def gpt2_forward(P, meta, inputs, targets, r):
    """GPT-2 as common/gpt2.cpp computes it. P maps parameter names to tensors; r is
    RoundBF16.apply in bf16 mode, the identity otherwise, and is applied at every
    point where the C++ model calls store(). Returns (logits (B,T,Vp), mean loss)."""
    m = meta["model"]
    C, V, L = m["n_embd"], m["vocab_size"], m["n_layer"]
    T = inputs.shape[1]

    def ln(x, name):
        return F.layer_norm(x, (C,), P[name + ".weight"], P[name + ".bias"], eps=1e-5)

    def linear(x, name):  # weights are (out, in), as nn.Linear stores them
        return F.linear(x, P[name + ".weight"], P[name + ".bias"])

    x = r(P["wte"][inputs] + P["wpe"][:T])
    for l in range(L):
        h = f"h.{l}."
        a = r(ln(x, h + "ln_1"))
        a = r(linear(a, h + "attn.c_attn"))
        a = r(causal_attention(a, m["n_head"]))
        a = r(linear(a, h + "attn.c_proj"))
        x = r(x + a)
        f = r(ln(x, h + "ln_2"))
        f = r(linear(f, h + "mlp.c_fc"))
        f = r(F.gelu(f, approximate="tanh"))
        f = r(linear(f, h + "mlp.c_proj"))
        x = r(x + f)
    x = r(ln(x, "ln_f"))
    logits = r(x @ P["wte"].t())  # tied embedding as the head, no bias
    # Cross-entropy over the real vocabulary only: the padding columns V..Vp-1 take
    # no part (and so get a zero gradient).
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    return logits, loss


def learning_rate(train, step):
    """Warmup, then cosine down to lr * min_lr_ratio (common/optimizer.h)."""
    # The dump records its schedule; this reference knows the cosine only, and a dump of
    # another would otherwise be compared with a cosine's rates.
    if train.get("lr_schedule", "cosine") != "cosine":
        raise SystemExit(f"torch_gpt2: lr_schedule {train['lr_schedule']!r}: this reference computes cosine only")
    lr, warmup, steps = train["lr"], train["warmup_steps"], train["steps"]
    if step < warmup:
        return lr * (step + 1) / warmup
    decay_steps = max(1, steps - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    r = train["min_lr_ratio"]
    return lr * (r + (1.0 - r) * 0.5 * (1.0 + math.cos(math.pi * progress)))


# --- one run -------------------------------------------------------------------------
def split_params(flat, meta, dtype):
    """Flat float64 buffer -> {name: leaf tensor of `dtype`}, by the C++ layout."""
    out = {}
    for t in meta["params"]:
        n = math.prod(t["shape"])
        values = flat[t["offset"]: t["offset"] + n].reshape(t["shape"])
        out[t["name"]] = torch.tensor(values, dtype=dtype, requires_grad=True)
    return out


def flatten(tensors, meta):
    """{name: tensor} -> one float64 numpy buffer in the C++ layout's order."""
    flat = np.zeros(meta["total_params"])
    for t in meta["params"]:
        v = tensors[t["name"]].detach().to(torch.float64).numpy().ravel()
        flat[t["offset"]: t["offset"] + v.size] = v
    return flat


def bf16_copy(master):
    """The bf16 compute copy of the fp32 master weights: new leaves whose .grad
    collects the fp32 parameter gradients (which the C++ keeps fp32 too)."""
    return {n: RoundBF16.apply(p.detach()).requires_grad_() for n, p in master.items()}


def symmetry_permutation(meta, rng):
    """An index array `perm` over the flat parameter buffer such that the weights
    flat[perm] describe the very same network with its hidden units relabelled:
    the residual channels by one permutation pi (every tensor that reads or writes
    the residual stream), the MLP's 4C hidden units by another, the attention heads
    by a third, and the dimensions inside each head (q and k of a head share one
    permutation, since only their dot product matters; v and c_proj's input columns
    share another). Layernorm, attention and the tied head are all invariant under
    such relabelling, so the permuted model computes the same logits, loss and
    (permuted) gradients, in exact arithmetic. In floating point every dot product
    and every sum over channels runs in a different order: a new, equally valid
    draw of the rounding errors."""
    m = meta["model"]
    C, NH = m["n_embd"], m["n_head"]
    hs = C // NH
    pi = rng.permutation(C)
    head = rng.permutation(NH)
    off = {t["name"]: t["offset"] for t in meta["params"]}
    shape = {t["name"]: t["shape"] for t in meta["params"]}
    perm = np.arange(meta["total_params"])

    def put(name, rows, cols=None):
        """new[i, j] = old[rows[i], cols[j]] for tensor `name` (1-D: new[i] = old[rows[i]])."""
        o = off[name]
        if cols is None:
            perm[o:o + len(rows)] = o + rows
        else:
            n_cols = shape[name][1]
            perm[o:o + len(rows) * n_cols] = (o + rows[:, None] * n_cols + cols[None, :]).ravel()

    put("wte", np.arange(m["padded_vocab"]), pi)
    put("wpe", np.arange(m["block_size"]), pi)
    for l in range(m["n_layer"]):
        h = f"h.{l}."
        qk = np.concatenate([head[i] * hs + rng.permutation(hs) for i in range(NH)])
        v = np.concatenate([head[i] * hs + rng.permutation(hs) for i in range(NH)])
        qkv = np.concatenate([qk, C + qk, 2 * C + v])
        hidden = rng.permutation(4 * C)
        for ln in ("ln_1", "ln_2"):
            put(h + ln + ".weight", pi)
            put(h + ln + ".bias", pi)
        put(h + "attn.c_attn.weight", qkv, pi)
        put(h + "attn.c_attn.bias", qkv)
        put(h + "attn.c_proj.weight", pi, v)
        put(h + "attn.c_proj.bias", pi)
        put(h + "mlp.c_fc.weight", hidden, pi)
        put(h + "mlp.c_fc.bias", hidden)
        put(h + "mlp.c_proj.weight", pi, hidden)
        put(h + "mlp.c_proj.bias", pi)
    put("ln_f.weight", pi)
    put("ln_f.bias", pi)
    return perm


def run(meta, tokens, init_flat, dtype, bf16, perm=None):
    """Experiments (a) and (b) of oracle_dump.cpp, in PyTorch; with `perm`, on the
    relabelled network of symmetry_permutation, results mapped back."""
    if perm is not None:
        res = run(meta, tokens, init_flat[perm], dtype, bf16)
        for key in ("grads", "final_params", "adam_m", "adam_v"):
            back = np.empty_like(res[key])
            back[perm] = res[key]
            res[key] = back
        return res
    tr = meta["train"]
    r = RoundBF16.apply if bf16 else no_rounding
    batch = lambda k: (torch.from_numpy(tokens[k, :, :-1]).long(),
                       torch.from_numpy(tokens[k, :, 1:]).long())
    res = {}

    # (a) forward + backward on micro-batch 0.
    master = split_params(init_flat, meta, dtype)
    weights = bf16_copy(master) if bf16 else master
    logits, loss = gpt2_forward(weights, meta, *batch(0), r)
    loss.backward()
    res["logits"] = logits.detach().to(torch.float64).numpy().ravel()
    res["loss"] = np.array([loss.item()])
    res["grads"] = flatten({n: w.grad for n, w in weights.items()}, meta)

    # (b) 5 AdamW steps from the same initial weights. Weight decay on the 2-D tensors
    # (the matrices and both embeddings), none on biases and layernorms: the usual GPT-2
    # rule, decided here from the shapes and not from the C++ layout's own `decay` flags,
    # so that a flag set wrong there shows as a difference.
    master = split_params(init_flat, meta, dtype)
    groups = [
        {"params": [p for p in master.values() if p.dim() == 2], "weight_decay": tr["weight_decay"]},
        {"params": [p for p in master.values() if p.dim() != 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=tr["lr"], betas=(tr["beta1"], tr["beta2"]), eps=tr["eps"])
    accum = tr["grad_accum"]
    step_losses, grad_norms, lrs = [], [], []
    for s in range(tr["steps"]):
        opt.zero_grad(set_to_none=True)
        weights = bf16_copy(master) if bf16 else master
        loss_sum = 0.0
        for k in range(accum):
            _, loss = gpt2_forward(weights, meta, *batch(accum * s + k), r)
            (loss * (1.0 / accum)).backward()  # gradient of the mean over micro-batches
            loss_sum += loss.item()
        if bf16:  # fp32 gradients of the bf16 copy update the fp32 master weights
            for n, p in master.items():
                p.grad = weights[n].grad
        # Global-norm clipping. clip_grad_norm_ measures the norm; it would scale by
        # max_norm / (norm + 1e-6), while ours scales by clip / norm exactly
        # (clip_scale in common/optimizer.cpp). With max_norm = inf it leaves the
        # gradients as they are and we apply our convention, so that the float64 runs
        # agree to round-off rather than to 1e-6.
        norm = float(torch.nn.utils.clip_grad_norm_(list(master.values()), float("inf")))
        scale = tr["grad_clip"] / norm if tr["grad_clip"] > 0 and norm > tr["grad_clip"] else 1.0
        if scale != 1.0:
            for p in master.values():
                p.grad.mul_(scale)
        lr = learning_rate(tr, s)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()  # AdamW counts its steps from 1, as ours does
        step_losses.append(loss_sum / accum)
        grad_norms.append(norm)
        lrs.append(lr)
    res["step_losses"] = np.array(step_losses)
    res["grad_norms"] = np.array(grad_norms)
    res["final_params"] = flatten(master, meta)
    res["adam_m"] = flatten({n: opt.state[p]["exp_avg"] for n, p in master.items()}, meta)
    res["adam_v"] = flatten({n: opt.state[p]["exp_avg_sq"] for n, p in master.items()}, meta)
    res["lrs"] = np.array(lrs)
    return res


# --- comparison ----------------------------------------------------------------------
def rel_err(a, b):
    """||a - b|| / ||b||; the absolute error where b is exactly zero."""
    nb = np.linalg.norm(b)
    d = np.linalg.norm(np.asarray(a, dtype=np.float64) - b)
    return d / nb if nb > 0 else d


def quantities(res, init64, meta):
    """(name, values) pairs to compare: every tensor separately. Parameters after the
    steps are compared by their update (final - initial float64 weights): every run
    starts from the same weights (up to their fp32 rounding, which counts as error),
    and comparing whole weights would dilute the error of the update in them (an LN
    weight of 1 moved by 0.03). AdamW's moments after the steps too: the update
    m / sqrt(v) hides a clipped gradient off by a constant factor, the moments show it."""
    q = [("logits", res["logits"]), ("loss", res["loss"])]
    for t in meta["params"]:
        o, n = t["offset"], math.prod(t["shape"])
        q.append((f"grad {t['name']}", res["grads"][o:o + n]))
    q.append(("step losses", res["step_losses"]))
    q.append(("grad norms", res["grad_norms"]))
    for t in meta["params"]:
        o, n = t["offset"], math.prod(t["shape"])
        q.append((f"update {t['name']}", res["final_params"][o:o + n] - init64[o:o + n]))
    for kind in ("adam_m", "adam_v"):
        for t in meta["params"]:
            o, n = t["offset"], math.prod(t["shape"])
            q.append((f"{kind} {t['name']}", res[kind][o:o + n]))
    return q


class Table:
    def __init__(self):
        self.failures = 0

    def header(self, title):
        print(f"\n{title}")
        print(f"  {'quantity':34s} {'ours':>10s} {'torch':>10s} {'bound':>10s}  result")

    def row(self, name, ours, base, bound):
        ok = bool(ours <= bound)  # NaN fails
        self.failures += not ok
        base_s = f"{base:10.2e}" if base is not None else f"{'-':>10s}"
        print(f"  {name:34s} {ours:10.2e} {base_s} {bound:10.2e}  {'PASS' if ok else 'FAIL'}")


def load(d, name, shape=None):
    return np.fromfile(d / name, dtype="<f8") if shape is None else \
        np.fromfile(d / name, dtype="<f8").reshape(shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, type=Path, help="oracle_dump's output directory")
    args = ap.parse_args()
    d = args.dir
    meta = json.loads((d / "meta.json").read_text())
    m = meta["model"]
    tokens = np.fromfile(d / meta["tokens"]["file"], dtype="<i4").reshape(meta["tokens"]["shape"])
    init64, init32 = load(d, "init_f64.bin"), load(d, "init_f32.bin")
    ours = {mode: {k: load(d, f"{mode}_{k}.bin") for k in
                   ("logits", "loss", "grads", "step_losses", "grad_norms", "final_params", "adam_m", "adam_v")}
            for mode in meta["modes"]}
    print(f"oracle: {m['n_layer']} layers, {m['n_embd']} wide, {m['n_head']} heads, "
          f"T={meta['seq_len']}, B={meta['batch']}, V={m['vocab_size']} (padded {m['padded_vocab']}), "
          f"{meta['total_params']} parameters; torch {torch.__version__}")

    G = run(meta, tokens, init64, torch.float64, bf16=False)
    rng = np.random.default_rng(PERM_SEED)
    perms = [None] + [symmetry_permutation(meta, rng) for _ in range(DRAWS - 1)]
    B32 = [run(meta, tokens, init32, torch.float32, False, p) for p in perms]
    Bbf = [run(meta, tokens, init32, torch.float32, True, p) for p in perms]
    print("G loss %.6f, step losses %s, grad norms %s (clip %g)" % (
        G["loss"][0], " ".join(f"{x:.6f}" for x in G["step_losses"]),
        " ".join(f"{x:.4f}" for x in G["grad_norms"]), meta["train"]["grad_clip"]))

    table = Table()

    # Not vacuous: the steps moved the weights, the schedule is the same one, and a
    # relabelled network really is the same network (else the baseline draws would
    # carry a large error and make every bound loose).
    table.header("setup")
    moved = np.linalg.norm(G["final_params"] - init64) / np.linalg.norm(init64)
    print(f"  weights moved by {moved:.2e} of their norm in 5 steps (G)")
    table.row("lr schedule (C++ vs formula)", rel_err(meta["lrs"], G["lrs"]), None, 1e-12)
    G_relabelled = run(meta, tokens, init64, torch.float64, False, perms[1])
    table.row("relabelled G vs G (max)", max(rel_err(G_relabelled[k], G[k]) for k in
              ("logits", "loss", "grads", "step_losses", "final_params")), None, F64_BOUND)
    # bf16 mode must update fp32 master weights, not the bf16 copy: an update smaller
    # than half a bf16 step would otherwise be lost. Five large steps barely show that
    # in the errors (they grow 2-5x, inside the bounds), so look at the weights
    # themselves: fp32 masters after 5 updates are almost never exactly bf16 values.
    master = ours["bf16"]["final_params"]
    nonzero = master[master != 0]
    bf16_exact = np.mean(nonzero.astype(np.float32).view(np.uint32) & 0xFFFF == 0)
    table.row("bf16 master weights on bf16 grid", bf16_exact, None, 0.01)
    if m["padded_vocab"] > m["vocab_size"]:
        # The padding must take no part: logits of the zero rows are 0, and no
        # gradient or update reaches those rows of wte. Exact zeros, in every mode.
        V, Vp, C = m["vocab_size"], m["padded_vocab"], m["n_embd"]
        for mode, res in ours.items():
            pad_logits = np.abs(res["logits"].reshape(-1, Vp)[:, V:]).max()
            pad_grad = np.abs(res["grads"][V * C: Vp * C]).max()
            pad_final = np.abs(res["final_params"][V * C: Vp * C]).max()
            table.row(f"{mode} padding max |logit,grad,w|", max(pad_logits, pad_grad, pad_final),
                      None, 0.0)

    qG = quantities(G, init64, meta)
    checks = [
        ("f64", None, "ours f64 vs G (torch float64): relative error <= 1e-9"),
        ("f32", B32, f"ours f32 vs G; torch = largest error of {DRAWS} float32 torch draws; "
                     "bound = 4 x torch + 8 eps32"),
        ("bf16", Bbf, f"ours bf16 vs G; torch = largest error of {DRAWS} bf16-rounding torch "
                      "draws; bound = 4 x torch + 8 x 2^-8"),
    ]
    q_by_mode = {}  # each mode's quantities, ours and the draws', for the controls below too
    for mode, draws, title in checks:
        table.header(title)
        q_ours = quantities(ours[mode], init64, meta)
        q_draws = [quantities(b, init64, meta) for b in draws] if draws else None
        q_by_mode[mode] = (q_ours, q_draws)
        for i, (name, g) in enumerate(qG):
            e_ours = rel_err(q_ours[i][1], g)
            if draws is None:
                table.row(name, e_ours, None, F64_BOUND)
            else:
                e_base = max(rel_err(q[i][1], g) for q in q_draws)
                floor = F32_FLOOR if mode == "f32" else BF16_FLOOR
                table.row(name, e_ours, e_base, FACTOR * e_base + floor)

    # Negative controls: ours with an error planted, scored against the same bound as
    # the row it changes, must be rejected; a control the bound accepts is a failure (the
    # bound could not see that error). f64: every logit 1e-8 off (ten times the bound,
    # far below any mutation in the README's table); f32: one small tensor's gradient
    # 1e-3 off (a per-tensor scale error that AdamW's update would hide), and its first
    # moment after the steps 1e-3 off (a clipped gradient off by a constant, which the
    # update hides too); bf16: the same gradient 10 % off (a few times the bf16 floor),
    # and the first moment 2x (the clip's scale left out at a norm of 2, as at step 1).
    # The bf16 moments can see no less: five bf16 steps move the weights apart, and the
    # moments of torch's own bf16 draws lie 3-10 % from G's, so their bounds are 15-45 %.
    print("\nnegative controls (each must be rejected by its bound)")
    small = min(meta["params"], key=lambda t: math.prod(t["shape"]))
    grad_row = next(i for i, (name, _) in enumerate(qG) if name == f"grad {small['name']}")
    m_row = next(i for i, (name, _) in enumerate(qG) if name == f"adam_m {small['name']}")
    logits_row = next(i for i, (name, _) in enumerate(qG) if name == "logits")
    for mode, row, scale in (("f64", logits_row, 1e-8), ("f32", grad_row, 1e-3), ("f32", m_row, 1e-3),
                             ("bf16", grad_row, 0.1), ("bf16", m_row, 1.0)):
        name, g = qG[row]
        q_ours, q_draws = q_by_mode[mode]
        planted = q_ours[row][1] * (1 + scale)
        if q_draws is None:
            bound = F64_BOUND
        else:
            e_base = max(rel_err(q[row][1], g) for q in q_draws)
            bound = FACTOR * e_base + (F32_FLOOR if mode == "f32" else BF16_FLOOR)
        err = rel_err(planted, g)
        rejected = not bool(err <= bound)
        table.failures += not rejected
        print(f"  {mode} {name} x (1 + {scale:g}): {err:10.2e} against bound {bound:10.2e}  "
              f"{'rejected' if rejected else 'ACCEPTED (FAIL)'}")

    # Information, not a check: the bf16 emulation rounds at the same points as ours,
    # so the two land on (nearly) the same bf16 values: their distance is a small
    # fraction of their error (0 where every rounding coincides). A store() missing
    # or misplaced in the forward would put it near 1 (its error is independent of
    # ours then); a missing rounding only lowers our error, which no bound can flag.
    frac = [rel_err(ours["bf16"][k], Bbf[0][k]) / rel_err(Bbf[0][k], G[k]) for k in ("logits", "grads")]
    print(f"\nours bf16 vs torch bf16, as a fraction of torch bf16's error vs G: "
          f"logits {frac[0]:.3f}, gradients {frac[1]:.3f} (0 = identical rounding; ~1 = unrelated)")

    print(f"\n{table.failures} failure(s)" if table.failures else "\nall checks passed")
    return 1 if table.failures else 0


if __name__ == "__main__":
    sys.exit(main())
