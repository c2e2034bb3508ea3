#!/usr/bin/env python3
"""Checks the per-rank memory that stages 02-05 allocate against each stage's formula, exactly.

  memory_formula.py --dp N --vocab V --block-size T RUN [RUN...]
  RUN = STAGE:PRECISION:N_LAYER:N_EMBD:BUCKET_MB:RUN_DIR   e.g. 04:fp32:4:64:0.1:/tmp/x/04_fp32
  STAGE 02, 03, 04, 05, or 05np: stage 05 with zero3_prefetch=false

Each RUN_DIR holds the metrics.jsonl of a short run at dp = N; rank 0 writes it, so
the "mem" of its last train line is rank 0's ledger, in bytes: the peak, per kind, of the
bytes its arrays really held (every DeviceArray reports to the tracker under the kind
of its MemScope, common/memory.h), not sizes a driver computed. The expected bytes come from
the model shape alone, as the stage READMEs derive them (P parameters, C = n_embd,
Vp = vocab padded to a multiple of 128, L layers):

  units     embeddings E = Vp*C + T*C, block B = 12 C^2 + 13 C, final F = 2 C,
            P = E + L*B + F                                    (common/gpt2_layout.cpp)
  shard     rank r owns [floor(r P / N), floor((r+1) P / N)); S = rank 0's size (shard.h)
  AdamW     fp32: m, v (8 bytes a parameter); bf16: fp32 master too (12 bytes)
  buckets   units in backward order (final, blocks L-1..0, embeddings) grouped until a
            bucket holds >= bucket_mb MiB of fp32 (make_buckets, grad_sync.cpp)

  stage            params               grads                        optimizer
  02 DDP           wP                   4P                           (8|12) P
  03 ZeRO-1        wP                   4P                           (8|12) S
  04 ZeRO-2        wP                   4S + 4 live buckets          (8|12) S
  05 ZeRO-3        w(S + gathered)       4S + 4 live buckets          (8|12) S

w, the bytes of a compute weight: 4 in fp32; in bf16 mode 2 for a stage that stores bf16
(BF16_STORAGE), 4 for one that keeps bf16-rounded values in fp32 buffers.

The fixed buffers, on top of the shards:
  bucket buffers (04, 05): the embeddings' bucket has a buffer of its own (the tied LM
            head writes wte's gradient first, the embedding last); the other buckets take
            turns in two buffers of the largest one's size, one filling while the other
            is reduce-scattered on the communication thread (zero2.h), so
            embedding bucket + 2 x the largest other bucket (1 x when there is one).
  gathered units (05): the embeddings stay gathered through each pass; the current
            unit is gathered beside them; and while a block computes, the next block's
            gather is already in flight into a buffer of its own (the prefetch), so the
            peak is  E + 2 B  (a block plus its prefetched successor; L >= 2; with one
            block, E + B + the final layernorm, prefetched while the block computes).
            The store allocates the prefetch buffer on the main thread when it starts
            the prefetch, before the current block computes, so the peak is reached in
            every forward whatever the prefetch thread's timing (were the thread to
            allocate it, a late start would leave the peak one block short), and exact
            equality is the right test. After a validation pass the next forward does
            not keep the final layernorm beside them (zero3.h), so E + 2 B holds there
            too; the runs validate after their first step to check it.
            Without the prefetch (05np) the next block is gathered only when its pass
            acquires it, after the current one is released: E + B. The same arithmetic,
            so a 05np run's losses and gradient norms equal the 05 run's, bit for bit.

A stage passes when every kind equals its expected bytes exactly. Every run is also
checked against the other stages' formulas, which must miss in some kind, and against
plausible wrong derivations of its own (negative controls: ZeRO-2 and -3 with one live
bucket buffer instead of two, ZeRO-3 gathering with the other prefetch mode), which the run's
shape must tell apart from the right formula and its numbers must miss. `buffers`
(communication scratch: the ring's piece buffer) and activations are printed; every multi-rank stage must hold some buffers.
Exits 1 with the table when any check fails.
"""
import argparse
import json
import math
import os
import sys

KINDS = ("params", "grads", "optimizer")
TOL = 0  # exact: the tracker counts bytes, nothing is estimated


def padded_vocab(v):
    return (v + 127) // 128 * 128


def units(vocab, block_size, n_layer, c):
    """Unit sizes in layout order: embeddings, blocks 0..L-1, final layernorm."""
    emb = padded_vocab(vocab) * c + block_size * c
    block = 12 * c * c + 13 * c
    return [emb] + [block] * n_layer + [2 * c]


def shard_size(total, ranks, rank):
    return (rank + 1) * total // ranks - rank * total // ranks


def make_buckets(sizes, bucket_mb):
    """make_buckets of grad_sync.cpp: bucket sizes, with which one holds the embeddings."""
    limit = max(1, int(bucket_mb * 1024 * 1024 / 4))
    order = [len(sizes) - 1] + list(range(len(sizes) - 2, 0, -1)) + [0]  # final, blocks L..1, embeddings
    buckets = []  # [elements, [units]]
    for u in order:
        if not buckets or buckets[-1][0] >= limit:
            buckets.append([0, []])
        buckets[-1][0] += sizes[u]
        buckets[-1][1].append(u)
    return buckets


def zero_terms(sizes, dp, bucket_mb):
    """The terms of the table above for units of `sizes` elements (layout order) on dp ranks."""
    P = sum(sizes)
    buckets = make_buckets(sizes, bucket_mb)
    emb_bucket = next(b for b in buckets if 0 in b[1])
    others = [b[0] for b in buckets if b is not emb_bucket]
    E, B = sizes[0], sizes[1]
    n_layer = len(sizes) - 2
    return {"P": P, "S": shard_size(P, dp, 0), "E": E, "B": B,
            "live buckets": emb_bucket[0] + min(2, len(others)) * max(others, default=0),
            "largest other bucket": max(others, default=0), "other buckets": len(others),
            "gathered": E + 2 * B if n_layer >= 2 else E + B + sizes[-1],
            "buckets": [b[0] for b in buckets], "embedding bucket": emb_bucket[0]}


def zero_memory(terms, zero, optimizer_bytes, weight_bytes):
    """Rank 0's bytes of params, grads and optimizer state at ZeRO stage `zero` (0: DDP)."""
    P, S = terms["P"], terms["S"]
    return {"params": weight_bytes * (S + terms["gathered"] if zero == 3 else P),
            "grads": 4 * (P if zero <= 1 else S + terms["live buckets"]),
            "optimizer": optimizer_bytes * (S if zero >= 1 else P)}


ZERO_OF_STAGE = {"02": 0, "03": 1, "04": 2, "05": 3, "05np": 3}
BF16_STORAGE = {"02", "03", "04", "05", "05np"}  # stages whose bf16 mode stores 2-byte weights (GPT2<bf16>)
WITHOUT_PREFETCH = {"05np"}  # gathered units E + B instead of E + 2 B


def gathered_terms(terms, stage):
    """The terms with the gathered units of `stage`'s prefetch mode."""
    return dict(terms, gathered=terms["E"] + terms["B"]) if stage in WITHOUT_PREFETCH else terms


def optimizer_bytes(precision):
    """AdamW's bytes a parameter: m and v, and in bf16 the fp32 master too."""
    return 12 if precision == "bf16" else 8


def weight_bytes(stage, precision):
    """Bytes of one compute weight of `stage` in `precision`."""
    return 2 if precision == "bf16" and stage in BF16_STORAGE else 4


def expected(stage, precision, dp, vocab, block_size, n_layer, c, bucket_mb):
    terms = zero_terms(units(vocab, block_size, n_layer, c), dp, bucket_mb)
    table = {s: zero_memory(gathered_terms(terms, s), zero, optimizer_bytes(precision), weight_bytes(s, precision))
             for s, zero in ZERO_OF_STAGE.items()}
    return table, terms


def reported(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    train = [r for r in lines if r.get("kind") == "train"]
    if not train:
        sys.exit(f"memory_formula: {path} has no train line")
    return train[-1]["mem"]


def train_metrics(run_dir, key):
    """`key` of every train line of a run, in step order."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r[key] for r in map(json.loads, filter(str.strip, f)) if r.get("kind") == "train"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--block-size", type=int, required=True)
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()

    failed = False
    rows = []
    shown = set()
    for spec in args.runs:
        stage, precision, n_layer, c, bucket_mb, run_dir = spec.split(":", 5)
        table, terms = expected(stage, precision, args.dp, args.vocab, args.block_size, int(n_layer),
                                int(c), float(bucket_mb))
        mem = reported(run_dir)
        if (precision, n_layer, c, bucket_mb) not in shown:
            shown.add((precision, n_layer, c, bucket_mb))
            print(f"{precision}: L={n_layer} C={c} V={args.vocab} T={args.block_size} bucket_mb={bucket_mb} "
                  f"dp={args.dp}, in elements: P={terms['P']} S={terms['S']} E={terms['E']} B={terms['B']} "
                  f"buckets={terms['buckets']} (embeddings' {terms['embedding bucket']}) "
                  f"live buckets={terms['live buckets']} gathered={terms['gathered']}")
        for kind in KINDS:
            exp, got = table[stage][kind], mem[kind]
            rel = abs(got - exp) / exp
            ok = rel <= TOL
            failed |= not ok
            rows.append((stage, precision, kind, exp, got, rel, "PASS" if ok else "FAIL"))
        # The other stages' formulas must not fit this run's numbers.
        for other, exp_other in table.items():
            if other == stage or exp_other == table[stage]:
                continue
            if all(abs(mem[k] - exp_other[k]) <= TOL * exp_other[k] for k in KINDS):
                failed = True
                rows.append((stage, precision, f"fits {other}'s formula", 0, 0, 0.0, "FAIL"))
        # Negative controls: plausible wrong derivations of this stage's formula, which the
        # run's shape must tell apart from the right one (else the check above could not
        # catch that mistake) and the run's numbers must not fit: one live bucket buffer
        # instead of two (ZeRO-2, -3: no double buffering), a ZeRO-3 gather with no
        # prefetch (the embeddings and one block gathered at a time instead of two), and in
        # bf16 the other weight storage (2 bytes where the stage keeps fp32 buffers, 4 where
        # it stores bf16).
        zero = ZERO_OF_STAGE[stage]
        w = weight_bytes(stage, precision)
        wrong = []
        if zero >= 2 and terms["other buckets"] >= 2:
            one_buffer = dict(terms, **{"live buckets": terms["live buckets"] - terms["largest other bucket"]})
            wrong.append(("one live bucket buffer", zero_memory(one_buffer, zero, optimizer_bytes(precision), w)))
        if zero == 3:  # the other prefetch mode's gathered units
            other = "05" if stage in WITHOUT_PREFETCH else "05np"
            label = "a gather with prefetch" if stage in WITHOUT_PREFETCH else "a gather without prefetch"
            wrong.append((label, zero_memory(gathered_terms(terms, other), zero, optimizer_bytes(precision), w)))
        if precision == "bf16":
            wrong.append((f"{6 - w}-byte weights", zero_memory(gathered_terms(terms, stage), zero,
                                                                optimizer_bytes(precision), 6 - w)))
        for label, formula in wrong:
            if formula == table[stage]:
                failed = True
                rows.append((stage, precision, f"shape cannot tell {label}", 0, 0, 0.0, "FAIL"))
            elif all(abs(mem[k] - formula[k]) <= TOL * formula[k] for k in KINDS):
                failed = True
                rows.append((stage, precision, f"fits {label}", 0, 0, 0.0, "FAIL"))
            else:
                rows.append((stage, precision, f"rejects {label}", 0, 0, 0.0, "ok"))
        rows.append((stage, precision, "activations (info)", 0, mem.get("activations", 0), 0.0, ""))
        buffers = mem.get("buffers", 0)
        if buffers <= 0:
            failed = True
            rows.append((stage, precision, "buffers: none counted", 0, 0, 0.0, "FAIL"))
        rows.append((stage, precision, "buffers (info)", 0, buffers, 0.0, ""))

    # Without the prefetch the arithmetic is the same: every loss and gradient norm of a
    # 05np run equals its 05 twin's (same precision and shape), bit for bit.
    runs = {tuple(spec.split(":", 5)[:5]): spec.split(":", 5)[5] for spec in args.runs}
    for (stage, precision, n_layer, c, bucket_mb), run_dir in runs.items():
        twin = runs.get(("05", precision, n_layer, c, bucket_mb)) if stage in WITHOUT_PREFETCH else None
        if twin is None:
            continue
        mine = {k: train_metrics(run_dir, k) for k in ("loss", "grad_norm")}
        theirs = {k: train_metrics(twin, k) for k in ("loss", "grad_norm")}
        same = mine == theirs and len(mine["loss"]) == 2  # both steps, not two empty lists
        # The metrics hold each double exactly (JSON written with round-trip precision), so
        # == compares every bit. Control: the twin's last loss one ulp off must count as
        # different (the compare has no tolerance).
        nudged = dict(theirs, loss=theirs["loss"][:-1] + [math.nextafter(theirs["loss"][-1], math.inf)])
        seen = mine != nudged
        failed |= not (same and seen)
        rows.append((stage, precision, "losses, norms as 05's" if same else "losses, norms differ from 05's",
                     0, 0, 0.0, "ok" if same else "FAIL"))
        rows.append((stage, precision, "rejects 05's loss +1 ulp" if seen else "accepts 05's loss +1 ulp",
                     0, 0, 0.0, "ok" if seen else "FAIL"))

    print(f"\n{'stage':5s} {'prec':5s} {'kind':22s} {'expected B':>12s} {'reported B':>12s} {'rel err':>9s}")
    for stage, precision, kind, exp, got, rel, verdict in rows:
        e = f"{exp:12d}" if verdict else f"{'':12s}"
        r = f"{rel:9.2e}" if verdict else f"{'':9s}"
        print(f"{stage:5s} {precision:5s} {kind:22s} {e} {got:12d} {r} {verdict}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
