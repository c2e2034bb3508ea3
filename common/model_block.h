/// @file
/// A transformer block (pre-LN GPT-2), forward and backward, as one piece:
///
/// ```
///   resid2 = x + c_proj( attention( c_attn( ln_1(x) ) ) )
///   resid3 = resid2 + mlp.c_proj( gelu( mlp.c_fc( ln_2(resid2) ) ) )
/// ```
///
/// The block reads its weights through BlockWeights (pointers a layout hands out: the
/// whole tensors on one device, this rank's slices under tensor parallelism), keeps what
/// its backward needs in a BlockActivations the caller owns (one per layer per
/// micro-batch in flight), and borrows a BlockScratch shared by every block of a rank.
/// Row counts: `rows` rows of the residual stream (layernorms, residuals) and
/// full = hooks.full_rows(rows) rows for the linears and the attention (B x T with
/// T the sequence length the attention sees); they differ only under sequence
/// parallelism.
#pragma once
#include <cstddef>

#include "common/device_array.h"
#include "common/model_pieces.h"

namespace gpt {

/// A block's weights (nullptr for a bias this rank does not add: a row-parallel bias
/// lives on one tensor-parallel rank). Shapes with W = dims.attn_width(), F = dims.hidden:
/// ```
///   ln1_w, ln1_b, ln2_w, ln2_b [C];  qkv_w [3W, C] (rows: this rank's q, then k, then v);
///   qkv_b [3W];  attproj_w [C, W];  attproj_b [C];  fc_w [F, C];  fc_b [F];
///   fcproj_w [C, F];  fcproj_b [C]
/// ```
template <class T>
struct BlockTensors {
  T *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attproj_w, *attproj_b;
  T *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};
template <class A>
using BlockWeights = BlockTensors<const A>;
/// The same pointers, read-only (a buffer of weights the caller also writes).
template <class T>
BlockTensors<const T> as_const(const BlockTensors<T>& t) {
  return {t.ln1_w, t.ln1_b, t.qkv_w, t.qkv_b, t.attproj_w, t.attproj_b,
          t.ln2_w, t.ln2_b, t.fc_w,  t.fc_b,  t.fcproj_w,  t.fcproj_b};
}
template <class A>
using BlockGrads = BlockTensors<GradOf<A>>;

/// What one block keeps from its forward for its backward, for one micro-batch.
template <class A>
struct BlockActivations {
  using G = GradOf<A>;
  BlockActivations() = default;
  BlockActivations(Device d, const BlockDims& dims, int B, int T, int rows);

  DeviceArray<A> ln1;            ///< ln_1(x) (rows; its all-gathered copy is not kept: backward gathers again)
  DeviceArray<G> ln1_mean, ln1_rstd;
  DeviceArray<A> qkv;            ///< (full, 3W)
  DeviceArray<A> atty;           ///< attention output (full, W)
  DeviceArray<G> att_lse;        ///< attention row logsumexps (B, heads, T)
  DeviceArray<A> resid2;         ///< (rows, C)
  DeviceArray<A> ln2;
  DeviceArray<G> ln2_mean, ln2_rstd;
  DeviceArray<A> fch, fch_gelu;  ///< (full, F): c_fc's output and its GELU
  DeviceArray<A> resid3;         ///< the block's output (rows, C)

  size_t bytes() const;
};

/// Buffers every block of a rank reuses: the row-parallel products before reduction and
/// the backward's gradients of activations.
template <class A>
struct BlockScratch {
  BlockScratch() = default;
  BlockScratch(Device d, const BlockDims& dims, int full, int rows);
  DeviceArray<A> partial;   ///< a row-parallel linear's output before reduce_output (full, C)
  DeviceArray<A> local;     ///< a hook's reduced rows (rows, C; only if full != rows)
  DeviceArray<A> gathered;  ///< a layernorm's output all-gathered (full, C; only if full != rows)
  DeviceArray<A> d_full;    ///< gradient of a linear's input or output (full, C)
  DeviceArray<A> d_att;     ///< gradient of the attention output (full, W)
  DeviceArray<A> d_qkv;     ///< (full, 3W)
  DeviceArray<A> d_hidden, d_hidden2;  ///< (full, F)
  size_t bytes() const;
};

/// Forward of one block on x (rows x C, kept alive until the backward): fills `act`.
template <class A>
void block_forward(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w, const A* x,
                   BlockActivations<A>& act, BlockScratch<A>& scratch, ModelHooks<A>& hooks, int B, int T,
                   int rows);

/// Backward: d_resid holds the gradient of the block's output (rows x C) and receives
/// the gradient of its input x, in place; weight gradients are ACCUMULATED into g.
template <class A>
void block_backward(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w,
                    const BlockGrads<A>& g, const A* x, const BlockActivations<A>& act, A* d_resid,
                    BlockScratch<A>& scratch, ModelHooks<A>& hooks, int B, int T, int rows);

}  // namespace gpt
