#!/usr/bin/env python3
"""Stage 06's measured memory and communication against a derivation of its own, written
apart from the stage's formulas (tp_budget.cpp): the parameters as the list of GPT-2's
named tensors with the rows or columns a tp rank holds, and the collectives as the walk
of one micro-batch through the model's f and g operators.

  budget_formula.py CONFIG RUN [RUN...]
  RUN = NP:TP:ZERO:SP:MICRO:BUCKET_MB:PRECISION:N_LAYER:LOG   e.g. 4:2:2:1:2:0.02:bf16:2:/tmp/run4.log

CONFIG is the runs' JSON config (the model's shape, seq_len, batch_size); N_LAYER is the
run's n_layer (0: the config's).

Each LOG is the output of a one-step run of stage 06 on NP ranks (tp = TP, dp = NP/TP,
zero = ZERO, sequence_parallel = SP in {0, 1}, micro_batch_size = MICRO, precision =
PRECISION in {fp32, bf16}); rank 0
prints, after its first step, what the memory tracker allocated and what the counting
communicator counted. Those measured numbers (the left column) must equal the
derivation exactly: parameters, gradients and optimizer state in bytes, and every
collective's calls and bytes. Activations are left to tp_budget.cpp's own check.

The tensors of tp rank r (Megatron-LM's split; W = C/tp, Vp = V padded to 128):
  wte          rows [Vp r/tp, Vp (r+1)/tp) of Vp x C        wpe  Tb x C (whole)
  per block    ln_1, ln_2 weight and bias: C each (whole)
               attn.c_attn  weight 3W x C, bias 3W     (column-parallel: its heads' q, k, v)
               attn.c_proj  weight C x W,  bias C      (row-parallel; the bias is whole)
               mlp.c_fc     weight 4W x C, bias 4W     (column-parallel)
               mlp.c_proj   weight C x 4W, bias C      (row-parallel; the bias is whole)
  ln_f         weight and bias: C each
The ZeRO stage then applies to these units (embeddings, blocks, ln_f) as stages 02-05
apply it to the whole model: tests/zero/memory_formula.py's shards and buckets.

Bytes of a stored weight or activation: w = 4 in fp32, 2 in bf16 (the model stores bf16
weights and activations; gradients of weights, the master weights and the moments stay
fp32: AdamW's state is 12 bytes a parameter in bf16, 8 in fp32).

One micro-batch's collectives (N = B T rows; "NC" = w N C bytes):
  forward   embedding g; per block f, g (attention), f, g (MLP); ln_f's f before the head
  backward  the same operators in reverse, each in its backward form
  f is identity forward, all-reduce backward; g is all-reduce forward, identity backward
  (at tp = 1 both are the identity: there is nothing to sum).
  Under sequence parallelism f is all-gather forward, reduce-scatter backward; g is
  reduce-scatter forward, all-gather backward; backward gathers each block's two
  column-parallel inputs again; and the layernorm gradients (ln_1, ln_2 of each block,
  ln_f: partial sums over the rank's rows) are all-reduced, one call per block and one
  for ln_f, once per step (every micro-batch under zero >= 2, whose gradient shards are
  reduced per micro-batch).
  The cross-entropy (tp > 1): all-gather of the row maxima (N values a rank, tp N
  gathered), all-reduce of (sum of exponentials, target logit): 2N values. These and
  the layernorm gradients are fp32 (4 bytes) in both precisions.
Bytes are counted as the communicator counts them: an all-reduce its buffer, a
reduce-scatter its whole input, an all-gather its whole output.

Negative controls, each of which the measured numbers must reject: the row-parallel
biases split like their weights; sequence parallelism's f and g without the re-gathers;
the layernorm sums made once per step under zero 2; in bf16, 4-byte weights and 4-byte
activations on the wire (the layout of an fp32 buffer holding bf16 values).
"""
import json
import os
import re
import sys
from collections import namedtuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero"))
from memory_formula import padded_vocab, zero_memory, zero_terms  # noqa: E402

Shape = namedtuple("Shape", "vocab block_size n_layer n_embd seq_len batch")
MEM = re.compile(r"^\s+(params|grads|optimizer)\s+(\d+) \|")
COMM = re.compile(r"^\s+(all_reduce|reduce_scatter|all_gather)\s+(\d+) \|\s+\d+ calls\s+(\d+) \|")


def local_tensors(a, tp, rank, split_row_biases=False):
    """(name, elements) of tp rank `rank`'s tensors, grouped in units."""
    C, W, Vp = a.n_embd, a.n_embd // tp, padded_vocab(a.vocab)
    rows = Vp * (rank + 1) // tp - Vp * rank // tp
    row_bias = W if split_row_biases else C
    units = [[("wte", rows * C), ("wpe", a.block_size * C)]]
    for l in range(a.n_layer):
        units.append([(f"h.{l}.ln_1.weight", C), (f"h.{l}.ln_1.bias", C),
                      (f"h.{l}.attn.c_attn.weight", 3 * W * C), (f"h.{l}.attn.c_attn.bias", 3 * W),
                      (f"h.{l}.attn.c_proj.weight", C * W), (f"h.{l}.attn.c_proj.bias", row_bias),
                      (f"h.{l}.ln_2.weight", C), (f"h.{l}.ln_2.bias", C),
                      (f"h.{l}.mlp.c_fc.weight", 4 * W * C), (f"h.{l}.mlp.c_fc.bias", 4 * W),
                      (f"h.{l}.mlp.c_proj.weight", C * 4 * W), (f"h.{l}.mlp.c_proj.bias", row_bias)])
    units.append([("ln_f.weight", C), ("ln_f.bias", C)])
    return units


def memory(a, tp, dp, zero, bucket_mb, weight_bytes, split_row_biases=False):
    """Rank 0's bytes of params, grads and optimizer state (AdamW: m and v, and the fp32
    master weights when the weights are bf16)."""
    sizes = [sum(n for _, n in unit) for unit in local_tensors(a, tp, 0, split_row_biases)]
    return zero_memory(zero_terms(sizes, dp, bucket_mb), zero, 8 if weight_bytes == 4 else 12,
                       weight_bytes=weight_bytes)


def collectives(a, tp, dp, zero, sp, micro, act_bytes, regather=True, ln_sum_per_micro=True):
    """{op: [calls, bytes]} of one step through the tp communicator; act_bytes: the bytes
    of an activation."""
    out = {op: [0, 0] for op in ("all_reduce", "reduce_scatter", "all_gather")}

    def add(op, nbytes):
        out[op][0] += 1
        out[op][1] += nbytes

    N = micro * a.seq_len
    NC = act_bytes * N * a.n_embd
    f_fwd, f_bwd = ("all_gather", "reduce_scatter") if sp else (None, "all_reduce")
    g_fwd, g_bwd = ("reduce_scatter", "all_gather") if sp else ("all_reduce", None)
    if tp == 1 and not sp:  # a group of one sums nothing: no all-reduce is called
        f_bwd = g_fwd = None
    # The operators one micro-batch meets in forward order.
    ops = ["g"] + ["f", "g", "f", "g"] * a.n_layer + ["f"]
    micro_batches = a.batch // (micro * dp)
    for _ in range(micro_batches):
        for op in ops:  # forward
            kind = f_fwd if op == "f" else g_fwd
            if kind:
                add(kind, NC)
        for op in reversed(ops):  # backward
            kind = f_bwd if op == "f" else g_bwd
            if kind:
                add(kind, NC)
        if sp and regather:
            for _ in range(2 * a.n_layer):  # c_attn's and c_fc's inputs, gathered again
                add("all_gather", NC)
        if tp > 1:
            add("all_gather", 4 * N * tp)
            add("all_reduce", 4 * 2 * N)
    if sp:
        sums = micro_batches if zero >= 2 and ln_sum_per_micro else 1
        for _ in range(sums):
            for _ in range(a.n_layer):
                add("all_reduce", 4 * 4 * a.n_embd)  # ln_1 and ln_2, weight and bias
            add("all_reduce", 4 * 2 * a.n_embd)      # ln_f
    return {op: v for op, v in out.items() if v[0] > 0}


def measured(path):
    mem, comm = {}, {}
    with open(path) as f:
        for line in f:
            m = MEM.match(line)
            if m:
                mem[m.group(1)] = int(m.group(2))
            m = COMM.match(line)
            if m:
                comm[m.group(1)] = [int(m.group(2)), int(m.group(3))]
    if len(mem) != 3:
        sys.exit(f"budget_formula: {path} has no memory table")
    return mem, comm


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    shape = Shape(cfg["vocab_size"], cfg["block_size"], cfg["n_layer"], cfg["n_embd"], cfg["seq_len"],
              cfg["batch_size"])
    failed = False
    for spec in sys.argv[2:]:
        np_, tp, zero, sp, micro, bucket_mb, precision, n_layer, path = spec.split(":", 8)
        np_, tp, zero, sp, micro, bucket_mb = int(np_), int(tp), int(zero), sp == "1", int(micro), float(bucket_mb)
        a = shape._replace(n_layer=int(n_layer) or shape.n_layer)
        if precision not in ("fp32", "bf16"):
            sys.exit(f"budget_formula: {spec}: precision '{precision}' is neither fp32 nor bf16")
        w = 2 if precision == "bf16" else 4
        dp = np_ // tp
        mem, comm = measured(path)
        want_mem = memory(a, tp, dp, zero, bucket_mb, w)
        want_comm = collectives(a, tp, dp, zero, sp, micro, w)
        name = f"tp {tp} x dp {dp}, zero {zero}, sp {int(sp)}, micro-batch {micro}, {precision}, {a.n_layer} layers"
        ok = mem == want_mem and comm == want_comm
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: memory {mem} (derived {want_mem}); "
              f"collectives {comm} (derived {want_comm})")
        # Negative controls: plausible wrong derivations the measurements must reject.
        # (At tp 1 a split bias is the whole bias: there is nothing to tell apart.)
        controls = []
        if tp > 1:
            controls.append(("row-parallel biases split", memory(a, tp, dp, zero, bucket_mb, w, True), want_comm))
        if sp:
            controls.append(("no re-gathers in backward", want_mem,
                             collectives(a, tp, dp, zero, sp, micro, w, regather=False)))
        if sp and zero >= 2 and a.batch // (micro * dp) > 1:
            controls.append(("layernorm sums once per step", want_mem,
                             collectives(a, tp, dp, zero, sp, micro, w, ln_sum_per_micro=False)))
        if w == 2:
            controls.append(("4-byte weights", memory(a, tp, dp, zero, bucket_mb, 4), want_comm))
            controls.append(("4-byte activations on the wire", want_mem, collectives(a, tp, dp, zero, sp, micro, 4)))
        for label, m, c in controls:
            if mem == m and comm == c:
                failed = True
                print(f"FAIL {name}: the control '{label}' fits the measurements too")
            else:
                print(f"     {name}: the control '{label}' is rejected")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
