#!/usr/bin/env python3
"""An independent reading of llm.c's model file, for the tests of build/bin/llmc_model.

It knows the file as llm.c documents it (a 256-int32 header, then 16 arrays, each one
kind of tensor for every layer at once, matrices as (out, in)) and GPT-2 as nanoGPT
writes it (x @ W.T + b, tanh GELU, pre-LN, tied head), and nothing of this project's
layout but the tensor names of its checkpoint manifests.

  llmc_reference.py write OUT --version {1,3,5} --seed S --layers L --embd C --heads NH
                          --vocab V --max-seq T [--padding-noise] [--transpose-attproj]
      a model file with random weights (version 5: bf16, rounded to nearest even);
      --padding-noise fills wte's padding rows (llm.c leaves them zero) with noise,
      --transpose-attproj stores every attention projection transposed (a control).
  llmc_reference.py shards DIR --vocab V --seq T --seed S
      DIR/train.bin (4 windows) and DIR/val.bin (exactly T + 1 tokens: one window, so
      every validation batch is that window) in llm.c's shard format.
  llmc_reference.py loss MODEL VAL_SHARD
      the float64 loss of the model on the shard's one window, printed with 17 digits.
  llmc_reference.py check MODEL CHECKPOINT
      every param tensor of the checkpoint (by name, from its manifest) equals the
      file's values bit for bit, and wte's padding rows are zero; exit 1 otherwise.
"""
import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "checkpoint"))
import checkpoint_tensors  # noqa: E402

try:
    import numpy as np
    if importlib.util.find_spec("torch") is None:
        raise ImportError("No module named 'torch'")
except ImportError as missing:
    print(f"llmc_reference.py: skipped: {missing} (run with /usr/bin/python3, which sees python3-torch)")
    sys.exit(77)


def torch_modules():
    """torch and torch.nn.functional, imported only by the commands that run the model:
    the import takes about a second and a half of CPU, and the tests call the others often."""
    import torch
    import torch.nn.functional as F
    return torch, F

MAGIC, SHARD_MAGIC = 20240326, 20240520
# The 16 arrays in file order: name, shape as a function of the header.
ARRAYS = [
    ("wte", lambda h: (h["Vp"], h["C"])), ("wpe", lambda h: (h["maxT"], h["C"])),
    ("ln1w", lambda h: (h["L"], h["C"])), ("ln1b", lambda h: (h["L"], h["C"])),
    ("qkvw", lambda h: (h["L"], 3 * h["C"], h["C"])), ("qkvb", lambda h: (h["L"], 3 * h["C"])),
    ("attprojw", lambda h: (h["L"], h["C"], h["C"])), ("attprojb", lambda h: (h["L"], h["C"])),
    ("ln2w", lambda h: (h["L"], h["C"])), ("ln2b", lambda h: (h["L"], h["C"])),
    ("fcw", lambda h: (h["L"], 4 * h["C"], h["C"])), ("fcb", lambda h: (h["L"], 4 * h["C"])),
    ("fcprojw", lambda h: (h["L"], h["C"], 4 * h["C"])), ("fcprojb", lambda h: (h["L"], h["C"])),
    ("lnfw", lambda h: (h["C"],)), ("lnfb", lambda h: (h["C"],)),
]
# The checkpoint's tensor name of each array (per layer where the array has an L axis).
NAMES = {"wte": "wte", "wpe": "wpe", "ln1w": "ln_1.weight", "ln1b": "ln_1.bias",
         "qkvw": "attn.c_attn.weight", "qkvb": "attn.c_attn.bias", "attprojw": "attn.c_proj.weight",
         "attprojb": "attn.c_proj.bias", "ln2w": "ln_2.weight", "ln2b": "ln_2.bias",
         "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias", "fcprojw": "mlp.c_proj.weight",
         "fcprojb": "mlp.c_proj.bias", "lnfw": "ln_f.weight", "lnfb": "ln_f.bias"}
PER_LAYER = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
             "fcprojw", "fcprojb"}


def to_bf16_bits(x):
    """float32 array -> bf16 bit patterns, rounded to nearest, ties to even."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write(args):
    rng = np.random.default_rng(args.seed)
    C, L, V, T = args.embd, args.layers, args.vocab, args.max_seq
    Vp = V if args.version == 1 else (V + 127) // 128 * 128
    h = {"C": C, "L": L, "Vp": Vp, "maxT": T}
    arrays = {}
    for name, shape in ARRAYS:
        s = shape(h)
        if name.endswith("w") and name.startswith(("ln1", "ln2", "lnf")):
            a = 1 + 0.1 * rng.standard_normal(s)          # layernorm gains near 1
        elif name in ("wte", "wpe"):
            a = 0.5 * rng.standard_normal(s)
        elif name.endswith("b"):
            a = 0.1 * rng.standard_normal(s)
        else:
            a = rng.standard_normal(s) / math.sqrt(s[-1])  # matrices: unit gain on (out, in)
        arrays[name] = a.astype(np.float32)
    arrays["wte"][V:] = 0 if not args.padding_noise else rng.standard_normal((Vp - V, C)).astype(np.float32)
    if args.transpose_attproj:
        arrays["attprojw"] = np.ascontiguousarray(arrays["attprojw"].transpose(0, 2, 1))
    header = np.zeros(256, dtype="<i4")
    header[:8] = [MAGIC, args.version, T, V, L, args.heads, C, Vp]
    if args.version == 1:
        header[7] = 0
    with open(args.out, "wb") as f:
        f.write(header.tobytes())
        for name, _ in ARRAYS:
            a = arrays[name]
            f.write((to_bf16_bits(a) if args.version == 5 else a.astype("<f4")).tobytes())


def read(path):
    """header dict and {array name: float64 array} of a model file."""
    raw = Path(path).read_bytes()
    hdr = np.frombuffer(raw[:1024], dtype="<i4")
    assert hdr[0] == MAGIC, f"{path}: bad magic"
    version = int(hdr[1])
    h = {"version": version, "maxT": int(hdr[2]), "V": int(hdr[3]), "L": int(hdr[4]), "NH": int(hdr[5]),
         "C": int(hdr[6]), "Vp": int(hdr[3]) if version == 1 else int(hdr[7])}
    width = 2 if version == 5 else 4
    at, arrays = 1024, {}
    for name, shape in ARRAYS:
        s = shape(h)
        n = math.prod(s)
        chunk = raw[at:at + n * width]
        if version == 5:
            bits = np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16
            a = bits.view(np.float32)
        else:
            a = np.frombuffer(chunk, dtype="<f4")
        arrays[name] = a.astype(np.float64).reshape(s)
        at += n * width
    assert at == len(raw), f"{path}: {len(raw)} bytes, the header needs {at}"
    return h, arrays


def shards(args):
    rng = np.random.default_rng(args.seed)
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.bin", 4 * args.seq + 1), ("val.bin", args.seq + 1)):
        tokens = rng.integers(0, args.vocab, size=n).astype("<u2")
        header = np.zeros(256, dtype="<i4")
        header[:3] = [SHARD_MAGIC, 1, n]
        (out / name).write_bytes(header.tobytes() + tokens.tobytes())


def logits_of(h, a, inp, dtype=None):
    """Logits (T, V) of GPT-2 with the file's arrays `a` on one sequence of T tokens, in
    `dtype` (torch.float64 when None)."""
    torch, F = torch_modules()
    dtype = torch.float64 if dtype is None else dtype
    t = {k: torch.from_numpy(v).to(dtype) for k, v in a.items()}
    C, NH, V = h["C"], h["NH"], h["V"]
    T = len(inp)
    ln = lambda x, w, b: F.layer_norm(x, (C,), w, b, eps=1e-5)
    x = t["wte"][inp] + t["wpe"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(h["L"]):
        qkv = ln(x, t["ln1w"][l], t["ln1b"][l]) @ t["qkvw"][l].T + t["qkvb"][l]
        q, k, v = (z.reshape(T, NH, C // NH).transpose(0, 1) for z in qkv.split(C, dim=1))
        att = (q @ k.transpose(1, 2)) / math.sqrt(C // NH)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ t["attprojw"][l].T + t["attprojb"][l]
        f = F.gelu(ln(x, t["ln2w"][l], t["ln2b"][l]) @ t["fcw"][l].T + t["fcb"][l], approximate="tanh")
        x = x + f @ t["fcprojw"][l].T + t["fcprojb"][l]
    return ln(x, t["lnfw"], t["lnfb"]) @ t["wte"][:V].T  # the head is wte, tied


def loss(args):
    torch, F = torch_modules()
    h, a = read(args.model)
    raw = Path(args.val).read_bytes()
    tokens = torch.from_numpy(np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64))
    T = len(tokens) - 1
    print(repr(float(F.cross_entropy(logits_of(h, a, tokens[:T]), tokens[1:]))))


def check(args):
    h, a = read(args.model)
    ckpt = Path(args.checkpoint)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    dtype = np.dtype(checkpoint_tensors.numpy_dtype(str(ckpt), "param"))
    flat = np.fromfile(ckpt / "param.bin", dtype=dtype)
    want = {}
    for name in NAMES:
        if name in PER_LAYER:
            for l in range(h["L"]):
                want[f"h.{l}.{NAMES[name]}"] = a[name][l]
        else:
            want[NAMES[name]] = a[name]
    bad, seen = [], 0
    for row in manifest["tensors"]:
        if row["kind"] != "param":
            continue
        name, shape = row["name"].split("/", 1)[1], tuple(row["shape"])
        first = row["offset"] // dtype.itemsize
        got = flat[first:first + math.prod(shape)].reshape(shape).astype(np.float64)
        w = want.pop(name, None)
        if w is None:
            bad.append(f"{name}: not in the file")
            continue
        if name == "wte":  # the real rows as the file has them, the padding rows zero
            ok = np.array_equal(got[:h["V"]], w[:h["V"]]) and not got[h["V"]:].any()
        else:
            ok = got.shape == w.shape and np.array_equal(got, w)
        seen += 1
        if not ok:
            bad.append(f"{name}: differs")
    bad += [f"{name}: missing from the checkpoint" for name in want]
    if bad:
        print(f"FAIL: {len(bad)} of {seen} tensors: " + "; ".join(bad[:6]))
        sys.exit(1)
    print(f"all {seen} tensors equal the file's, bit for bit; wte's padding rows are zero")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    for k in ("--version", "--seed", "--layers", "--embd", "--heads", "--vocab", "--max-seq"):
        w.add_argument(k, type=int, required=True)
    w.add_argument("--padding-noise", action="store_true")
    w.add_argument("--transpose-attproj", action="store_true")
    s = sub.add_parser("shards")
    s.add_argument("dir")
    for k in ("--vocab", "--seq", "--seed"):
        s.add_argument(k, type=int, required=True)
    lo = sub.add_parser("loss")
    lo.add_argument("model")
    lo.add_argument("val")
    c = sub.add_parser("check")
    c.add_argument("model")
    c.add_argument("checkpoint")
    args = ap.parse_args()
    {"write": write, "shards": shards, "loss": loss, "check": check}[args.cmd](args)


if __name__ == "__main__":
    main()
