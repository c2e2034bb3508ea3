/// @file
/// A block's and the head's backward in two halves, for zero-bubble pipeline schedules
/// (Qi et al. 2023).
///
/// Each linear y = x W^T + b has two gradients in backward,
///
///     dx = dy W            (the input gradient: what the stage before waits for)
///     dW += dy^T x,  db += sum of dy over rows       (the weight gradients: nobody waits)
///
/// and a layernorm likewise dx, and d gamma, d beta. block_backward computes all of them
/// in one pass. Split, the input half (B) runs the chain of dx's through the block and
/// keeps each linear's and layernorm's dy (BlockGradInputs); the weight half (W) runs
/// later from those dy's and the forward's activations. A schedule can then put the W's
/// where the pipeline would otherwise idle. Every weight gradient is computed by the same
/// call on the same values as in block_backward, so accumulating the W's in micro-batch
/// order gives block_backward's bits.
#pragma once
#include <cstddef>

#include "common/device_array.h"
#include "common/model_block.h"
#include "common/model_head.h"

namespace gpt {

/// The gradients of the block's intermediate outputs that its weight gradients need, for
/// one micro-batch between its B and its W (full = hooks.full_rows(rows) rows).
template <class A>
struct BlockGradInputs {
  BlockGradInputs() = default;
  /// Allocates the six arrays on d for a block of `dims`, with the row counts below.
  BlockGradInputs(Device d, const BlockDims& dims, int full, int rows);
  DeviceArray<A> d_mlp_out;  ///< gradient of mlp.c_proj's output (full, C)
  DeviceArray<A> d_fc;       ///< gradient of mlp.c_fc's output (after GELU's backward) (full, F)
  DeviceArray<A> d_ln2;      ///< gradient of ln_2's output (rows, C)
  DeviceArray<A> d_att_out;  ///< gradient of attn.c_proj's output (full, C)
  DeviceArray<A> d_qkv;      ///< gradient of attn.c_attn's output (full, 3W)
  DeviceArray<A> d_ln1;      ///< gradient of ln_1's output (rows, C)
  size_t bytes() const;  ///< memory held by the six arrays, in bytes
};

/// The input half: d_resid holds the gradient of the block's output and receives the
/// gradient of its input x (as block_backward); `keep` receives the dy's of the weight half.
/// It reads none of act's cheap buffers (ln1, ln2, fch_gelu: only the weight gradients
/// need them), so under selective recompute they are rebuilt for the weight half alone.
template <class A>
void block_backward_input(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w, const A* x,
                          const BlockActivations<A>& act, A* d_resid, BlockGradInputs<A>& keep,
                          BlockScratch<A>& scratch, ModelHooks<A>& hooks, int B, int T, int rows);

/// The weight half: ACCUMULATES the block's weight gradients into g from `keep` and the
/// forward's activations.
template <class A>
void block_backward_weight(const PieceContext& ctx, const BlockDims& dims, const BlockGrads<A>& g,
                           const BlockWeights<A>& w, const A* x, const BlockActivations<A>& act,
                           const BlockGradInputs<A>& keep, BlockScratch<A>& scratch, ModelHooks<A>& hooks, int B,
                           int T, int rows);

/// The head's input half: from act.d_logits (head_loss_gradient), writes the gradient of
/// x into d_x and keeps the gradient of ln_f's output in keep_d_lnf (rows x C).
template <class A>
void head_backward_input(const PieceContext& ctx, const A* x, const A* lnf_w, const A* wte_rows, VocabRange vocab,
                         HeadActivations<A>& act, A* d_x, DeviceArray<A>& keep_d_lnf,
                         BlockScratch<A>& scratch, ModelHooks<A>& hooks, int rows, int C);

/// The head's weight half: ACCUMULATES into the gradients of wte's rows and ln_f.
template <class A>
void head_backward_weight(const PieceContext& ctx, const A* x, const A* lnf_w, const A* wte_rows,
                          GradOf<A>* dlnf_w, GradOf<A>* dlnf_b, GradOf<A>* dwte_rows, VocabRange vocab,
                          const HeadActivations<A>& act, const DeviceArray<A>& keep_d_lnf, int rows, int C);

}  // namespace gpt
