#!/usr/bin/env python3
"""GPT-2 training in PyTorch, the way a strong PyTorch user would write it: the
baseline stage 01's whole-step benchmark is compared with (scripts/bench_gpu_step.sh).

The same model and step as stage 01 with precision=bf16: GPT-2 (pre-LN, learned
positions, tanh GELU, tied embeddings, vocabulary padded to a multiple of 128), bf16
autocast with fp32 master weights, flash scaled-dot-product attention, fused AdamW
(betas 0.9/0.95, weight decay on 2-D weights), global-norm clipping at 1.0, and
torch.compile on the model. Tokens are random (the data loader is not what is being
timed; stage 01 reads real shards, which costs it, not PyTorch, a little).

  train_gpt2_torch.py --batch 32 --seq 1024 --steps 30 [--layers 12 --width 768 --heads 12]

Prints one line per step and, last, "tokens/s <median over the steps after warm-up>".
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers, width, heads, vocab, block):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied embeddings
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of the median")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304, help="padded vocabulary (50257 -> 50304)")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    for name in ("batch", "seq", "steps", "layers", "width", "heads", "vocab"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} {getattr(args, name)}: must be 1 or more")
    if not 0 <= args.warmup < args.steps:
        ap.error(f"--warmup {args.warmup}: from 0 to --steps - 1 ({args.steps - 1}): the median needs a step after it")
    if not torch.cuda.is_available():
        raise SystemExit("train_gpt2_torch.py: torch sees no CUDA GPU")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    model = GPT2(args.layers, args.width, args.heads, args.vocab, args.seq).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = model if args.no_compile else torch.compile(model)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"pytorch {torch.__version__} | {torch.cuda.get_device_name()} | {n_params / 1e6:.2f}M parameters | "
          f"batch {args.batch} x {args.seq} | compile {not args.no_compile}")
    rates = []
    for step in range(args.steps):
        idx = torch.randint(0, 50257, (args.batch, args.seq), device=dev)
        targets = torch.randint(0, 50257, (args.batch, args.seq), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1000
        tok_s = args.batch * args.seq / (ms / 1000)
        if step >= args.warmup:
            rates.append(tok_s)
        print(f"step {step + 1:4d} | loss {loss.item():.4f} | {ms:8.1f} ms | {tok_s:10.0f} tok/s")
    print(f"tokens/s {statistics.median(rates):.0f}")


if __name__ == "__main__":
    main()
