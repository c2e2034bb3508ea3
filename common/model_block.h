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
  T* ln1_w;      ///< ln_1's scale [C]
  T* ln1_b;      ///< ln_1's shift [C]
  T* qkv_w;      ///< attention c_attn's weight [3W, C]: this rank's q rows, then k, then v
  T* qkv_b;      ///< attention c_attn's bias [3W]
  T* attproj_w;  ///< attention c_proj's weight [C, W]
  T* attproj_b;  ///< attention c_proj's bias [C] (may be nullptr)
  T* ln2_w;      ///< ln_2's scale [C]
  T* ln2_b;      ///< ln_2's shift [C]
  T* fc_w;       ///< mlp.c_fc's weight [F, C]
  T* fc_b;       ///< mlp.c_fc's bias [F]
  T* fcproj_w;   ///< mlp.c_proj's weight [C, F]
  T* fcproj_b;   ///< mlp.c_proj's bias [C] (may be nullptr)
};
/// A block's weights as the forward and backward read them: read-only pointers of the
/// storage type A.
template <class A>
using BlockWeights = BlockTensors<const A>;
/// The same pointers, read-only (a buffer of weights the caller also writes).
template <class T>
BlockTensors<const T> as_const(const BlockTensors<T>& t) {
  return {t.ln1_w, t.ln1_b, t.qkv_w, t.qkv_b, t.attproj_w, t.attproj_b,
          t.ln2_w, t.ln2_b, t.fc_w,  t.fc_b,  t.fcproj_w,  t.fcproj_b};
}
/// Where a block's weight gradients accumulate: the same tensors in GradOf<A> (fp32 for
/// bf16 storage).
template <class A>
using BlockGrads = BlockTensors<GradOf<A>>;

/// Which of BlockActivations' buffers a set allocates. Selective recompute splits them in
/// two: the three that are cheap to rebuild from the others (ln1 and ln2, layernorms of
/// the block's input and of resid2, and fch_gelu, the GELU of fch) and the rest.
enum class BlockBuffers {
  All,        ///< every buffer
  AllButCheap,  ///< all but ln1, ln2 and fch_gelu: what a micro-batch keeps under selective recompute
  Cheap,      ///< only ln1, ln2 and fch_gelu: the set one running block borrows
};

/// What one block keeps from its forward for its backward, for one micro-batch.
template <class A>
struct BlockActivations {
  using G = GradOf<A>;  ///< type of the layernorm and attention statistics: float for bf16 storage, else A
  BlockActivations() = default;  ///< empty: no buffers
  /// Allocates `which` buffers on device d for B sequences of T tokens, `rows` of them on
  /// this rank (B*T, or fewer under sequence parallelism); the full-row buffers get B*T rows.
  BlockActivations(Device d, const BlockDims& dims, int B, int T, int rows, BlockBuffers which = BlockBuffers::All);
  /// Exchanges the cheap buffers (ln1, ln2, fch_gelu) with other's, copying nothing: a
  /// set without them borrows a running block's and gives them back.
  void swap_cheap(BlockActivations& other) {
    ln1.swap(other.ln1), ln2.swap(other.ln2), fch_gelu.swap(other.fch_gelu);
  }

  DeviceArray<A> ln1;            ///< ln_1(x) (rows; its all-gathered copy is not kept: backward gathers again)
  DeviceArray<G> ln1_mean;       ///< ln_1's mean of each row of x (rows)
  DeviceArray<G> ln1_rstd;       ///< ln_1's reciprocal standard deviation of each row of x (rows)
  DeviceArray<A> qkv;            ///< (full, 3W)
  DeviceArray<A> atty;           ///< attention output (full, W)
  DeviceArray<G> att_lse;        ///< attention row logsumexps (B, heads, T)
  DeviceArray<A> resid2;         ///< (rows, C)
  DeviceArray<A> ln2;            ///< ln_2(resid2) (rows, C; like ln1, not kept gathered)
  DeviceArray<G> ln2_mean;       ///< ln_2's mean of each row of resid2 (rows)
  DeviceArray<G> ln2_rstd;       ///< ln_2's reciprocal standard deviation of each row of resid2 (rows)
  DeviceArray<A> fch;            ///< c_fc's output before the GELU (full, F)
  DeviceArray<A> fch_gelu;       ///< the GELU of fch (full, F): mlp.c_proj's input
  DeviceArray<A> resid3;         ///< the block's output (rows, C)

  size_t bytes() const;  ///< device bytes of all the buffers above
};

/// Buffers every block of a rank reuses: the row-parallel products before reduction and
/// the backward's gradients of activations.
template <class A>
struct BlockScratch {
  BlockScratch() = default;  ///< empty: no buffers
  /// Allocates the buffers on device d for `full` rows of the linears and `rows` rows of
  /// the residual stream; local and gathered only when they differ.
  BlockScratch(Device d, const BlockDims& dims, int full, int rows);
  DeviceArray<A> partial;   ///< a row-parallel linear's output before reduce_output (full, C)
  DeviceArray<A> local;     ///< a hook's reduced rows (rows, C; only if full != rows)
  DeviceArray<A> gathered;  ///< a layernorm's output all-gathered (full, C; only if full != rows)
  DeviceArray<A> d_full;    ///< gradient of a linear's input or output (full, C)
  DeviceArray<A> d_att;     ///< gradient of the attention output (full, W)
  DeviceArray<A> d_qkv;     ///< gradient of c_attn's output (full, 3W)
  DeviceArray<A> d_fch_gelu;  ///< gradient of the GELU's output, i.e. of mlp.c_proj's input (full, F)
  DeviceArray<A> d_fch;       ///< gradient of c_fc's output, through the GELU (full, F)
  size_t bytes() const;  ///< device bytes of all the buffers above
};

/// Where a hook writes full rows: `full` when the linears see more rows than the
/// residual stream holds (sequence parallelism gathers them into it), else `local`'s
/// own rows (`full` is then empty).
template <class A>
A* full_or(DeviceArray<A>& full, const DeviceArray<A>& local) {
  return full.empty() ? const_cast<A*>(local.data()) : full.data();
}

/// Forward of one block on x (rows x C, kept alive until the backward): fills `act`.
template <class A>
void block_forward(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w, const A* x,
                   BlockActivations<A>& act, BlockScratch<A>& scratch, ModelHooks<A>& hooks, int B, int T,
                   int rows);

/// Selective recompute: writes act's cheap buffers again (ln1 = ln_1(x), ln2 =
/// ln_2(resid2), fch_gelu = gelu(fch)) from x and act's kept buffers, as block_forward
/// wrote them. The layernorms are computed whole again, statistics included, with the
/// bits they had. The GELU gives the same bits where block_forward also computed it from
/// the stored fch: on the CPU in fp32 and fp64. Where storage rounds (bf16),
/// block_forward took it from fch before rounding, so the rebuilt fch_gelu, which only
/// mlp.c_proj's weight gradient reads, may differ by the rounding of its input.
template <class A>
void block_rebuild_cheap(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w, const A* x,
                         BlockActivations<A>& act, int B, int T, int rows);

/// Backward: d_resid holds the gradient of the block's output (rows x C) and receives
/// the gradient of its input x, in place; weight gradients are ACCUMULATED into g.
template <class A>
void block_backward(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w,
                    const BlockGrads<A>& g, const A* x, const BlockActivations<A>& act, A* d_resid,
                    BlockScratch<A>& scratch, ModelHooks<A>& hooks, int B, int T, int rows);

}  // namespace gpt
