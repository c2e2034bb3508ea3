/// @file
/// The vocabulary shared by the model's pieces (model_embedding.h, model_block.h,
/// model_head.h): how big a block is on this rank, how its values are stored, and the
/// hooks through which a parallel layout joins in.
///
/// GPT-2 is run as pieces on activation buffers the caller owns:
///
/// ```
///   embedding  x0 = wte[tokens] + wpe[positions]       (a vocabulary range of wte, a position offset)
///   blocks     x  = x + attn(ln_1(x));  x = x + mlp(ln_2(x))    for layers [l0, l1)
///   head       logits = ln_f(x) . wte^T; loss = cross-entropy   (a vocabulary range of the logits)
/// ```
///
/// On one device (stage 01) each piece holds everything and every hook does nothing.
/// A parallel layout changes only sizes and hooks:
/// ```
///   tensor parallelism  a block holds heads/tp heads and 4C/tp hidden units (BlockDims);
///                       its hooks communicate around the column-parallel linears (c_attn,
///                       c_fc, the LM head: gather_input / reduce_input_grad) and after the
///                       row-parallel ones (attn.c_proj, mlp.c_proj: reduce_output /
///                       gather_output_grad); the head reduces the cross-entropy's row
///                       statistics across the vocabulary ranges (vocab_reduce);
///   sequence parallel.  the same hooks gather and scatter rows: elementwise work runs on
///                       local_rows, the linears on full_rows(local_rows);
///   pipeline            a rank runs a range of blocks on activations it received, one
///                       BlockActivations set per layer per micro-batch in flight;
///   context parallel.   attention_forward / attention_backward bring other ranks' keys
///                       and values (ops::attention_block_* and attention_merge).
/// ```
#pragma once
#include <cstddef>

#include "common/bf16.h"
#include "common/config.h"
#include "common/device.h"
#include "common/precision.h"
#include "kernels/ops.h"

namespace gpt {

/// A block's sizes as this rank holds it. The residual stream (C wide) is never split;
/// the attention is `heads` heads of head_size, the MLP `hidden` units.
struct BlockDims {
  int C = 0;          ///< width of the residual stream (n_embd), the same on every rank
  int heads = 0;      ///< attention heads this rank holds (n_head / tp under tensor parallelism)
  int head_size = 0;  ///< width of one head, n_embd / n_head (never split)
  int hidden = 0;     ///< MLP hidden units this rank holds (4C / tp under tensor parallelism)
  int attn_width() const { return heads * head_size; }  ///< columns of q (and of k, of v)

  /// The whole block: n_head heads, 4C hidden units.
  static BlockDims whole(const ModelConfig& m) {
    return {m.n_embd, m.n_head, m.n_embd / m.n_head, 4 * m.n_embd};
  }
  /// One of `parts` equal slices of the heads and of the hidden units (tensor
  /// parallelism); n_head and 4C must divide (the caller checks the config keys).
  static BlockDims slice(const ModelConfig& m, int parts) {
    BlockDims d = whole(m);
    d.heads /= parts;
    d.hidden /= parts;
    return d;
  }
};

/// Where the pieces run and how they store activations: in bf16 mode with float storage
/// (the emulation the tests check bf16 storage against) every activation is rounded to
/// bf16 after the op that writes it.
struct PieceContext {
  Device device = Device::CPU;            ///< where the ops run and the buffers live
  Precision precision = Precision::FP32;  ///< the run's precision mode

  /// Rounds x[0..n) to bf16 values in place when A is float and the mode is BF16 (float
  /// buffers emulating bf16 storage); does nothing otherwise.
  template <class A>
  void round(A* x, size_t n) const {
    if constexpr (std::is_same_v<A, float>)
      if (precision == Precision::BF16) ops::round_to_bf16(device, x, n);
    (void)x, (void)n;
  }
};

/// Where a hook is called from. The embedding under tensor parallelism is a
/// row-parallel product (each rank's vocabulary rows give a partial sum), so it uses
/// reduce_output and gather_output_grad.
enum class Site { Embedding, Attention, Mlp, Head };

/// The hooks of a parallel layout. Every default does nothing (returns its input), which
/// is the single-device model. Buffers passed in are the piece's own: `full` and `local`
/// are scratch of full_rows(rows) and rows rows of C values a hook may fill.
template <class A>
class ModelHooks {
 public:
  using G = GradOf<A>;  ///< the type of parameter gradients, of lse and of the loss's row statistics
  virtual ~ModelHooks() = default;

  /// Rows the linears and the attention see when elementwise work runs on `rows` rows
  /// (sequence parallelism: rows * tp; otherwise rows).
  virtual int full_rows(int rows) const { return rows; }

  /// Before a column-parallel linear (c_attn, c_fc, the LM head): the linear's input
  /// from this rank's rows x. Tensor parallelism: x itself (identity); with sequence
  /// parallelism: all-gathered into `full`.
  virtual const A* gather_input(Site, const A* x, A* /*full*/, int /*rows*/, int /*C*/) { return x; }
  /// Its backward: the gradient of the linear's input (full rows, a partial sum on each
  /// rank) -> the gradient of x. Tensor parallelism: all-reduce in place; with sequence
  /// parallelism: reduce-scatter into `local`.
  virtual A* reduce_input_grad(Site, A* d_full, A* /*local*/, int /*rows*/, int /*C*/) { return d_full; }
  /// After a row-parallel linear (attn.c_proj, mlp.c_proj): partial sums over this rank's
  /// heads or hidden units -> the output rows this rank keeps. Tensor parallelism:
  /// all-reduce in place; with sequence parallelism: reduce-scatter into `local`.
  virtual A* reduce_output(Site, A* partial, A* /*local*/, int /*rows*/, int /*C*/) { return partial; }
  /// Its backward: the gradient of this rank's output rows -> the gradient of the
  /// partial product. Tensor parallelism: identity; with sequence parallelism: all-gather.
  virtual const A* gather_output_grad(Site, const A* d_local, A* /*full*/, int /*rows*/, int /*C*/) {
    return d_local;
  }

  /// Causal attention of this rank's queries (qkv: B x T rows of [q | k | v], `heads`
  /// heads of width/heads) to the keys and values it may see: by default its own, which
  /// is the whole sequence on one rank. Context parallelism brings the other ranks'.
  virtual void attention_forward(const PieceContext& ctx, A* out, G* lse, const A* qkv, int B, int T,
                                 int width, int heads) {
    ops::attention_forward(ctx.device, out, lse, qkv, B, T, width, heads);
  }
  /// Its backward: ACCUMULATES the gradients of q, k and v into dqkv (B x T rows of 3 * width),
  /// from dout and the forward's out and lse. Context parallelism overrides it as well.
  virtual void attention_backward(const PieceContext& ctx, A* dqkv, const A* dout, const A* qkv,
                                  const A* out, const G* lse, int B, int T, int width, int heads) {
    ops::attention_backward(ctx.device, dqkv, dout, qkv, out, lse, B, T, width, heads);
  }

  /// Whether the head's vocabulary is split across ranks. Then the head computes, per row
  /// over its columns, the max, the sum of exponentials relative to it and the target's
  /// logit (0 where the target is another rank's), and vocab_reduce must turn them into
  /// the whole vocabulary's: M = max over ranks, S = sum_r s_r e^{m_r - M}, target summed.
  virtual bool vocab_parallel() const { return false; }
  /// Turns the per-row statistics of `rows` rows (full rows) into the whole vocabulary's,
  /// in place, as above; the head calls it only when vocab_parallel(). Does nothing here.
  virtual void vocab_reduce(G* /*row_max*/, G* /*row_sumexp*/, G* /*target_logit*/, int /*rows*/) {}
};

}  // namespace gpt
