/// @file
/// Flash attention on the CPU: the tiled algorithm of the GPU kernels
/// (kernels/cuda/attention/), written as plain loops so that the algorithm itself is
/// tested where no GPU exists. Same layout as the reference attention in
/// kernels/cpu/attention.cpp: qkv (B,T,3C) holds q, k, v, head h in columns
/// [h*hs, (h+1)*hs) of each; out is (B,T,C). Instead of the (B,NH,T,T) probabilities
/// the forward pass keeps one number per row, the logsumexp (B,NH,T).
///
/// The lesson (derivations, memory arithmetic, GPU mapping) is docs/flash_attention.md;
/// the equations are in flash_attention.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/attention_view.h"

namespace gpt::cpu {

/// What a pass touched, for the tests (and the lesson's "causal halves the work").
/// A tile is one (query tile, key tile) pair of one (b, head); a score is one q.k dot
/// product. Integers summed over threads, so the counts are exact whatever the schedule.
struct FlashCounts {
  int64_t tiles_visited = 0;  ///< tiles that were computed (at or below the diagonal)
  int64_t tiles_skipped = 0;  ///< tiles entirely above the diagonal, never touched
  int64_t scores = 0;         ///< q.k products computed (masked ones inside a visited tile are not)
};

/// One attention problem in its general form (kernels/attention_view.h): the CPU's name
/// for it.
template <class T>
using FlashView = AttentionView<T>;

/// Forward of a view. out (rows of out_stride) is overwritten; lse (B,NH,Tq) receives
/// per query row L_t = log sum_{visible u} exp(q_t.k_u / sqrt(hs)). A row that sees no
/// key of this block gets out = 0 and L = -inf (it contributes nothing to a merge).
template <class T>
FlashCounts flash_attention_forward(const FlashView<T>& a, T* out, T* lse, int Br, int Bc);

/// Backward of a view, from the output and logsumexp of the WHOLE attention the block is
/// part of (the merged ones; for a single block, its own): P_tu = exp(s_tu - L_t) is then
/// the block's share of the full softmax and D_t = dO_t . O_t the full row's, so summing
/// the blocks' dq and each block's dk, dv gives the full attention's gradients.
/// ACCUMULATES (+=) into dq (q_stride rows), dk and dv (kv_stride rows).
template <class T>
FlashCounts flash_attention_backward(const FlashView<T>& a, T* dq, T* dk, T* dv, const T* dout,
                                     const T* out, const T* lse, int Br, int Bc);

/// Merges a second partial attention (out_b, lse_b) of the same queries over other keys
/// into (out, lse), in place, for n rows of hs values (row i of out at i*out_stride,
/// of out_b at i*b_stride; lse and lse_b hold one value per row):
/// ```
///     L = log(e^{L_a} + e^{L_b}),   O = e^{L_a - L} O_a + e^{L_b - L} O_b
/// ```
/// computed around max(L_a, L_b) so nothing overflows; a side with L = -inf (no keys)
/// contributes nothing.
template <class T>
void flash_attention_merge(T* out, T* lse, size_t out_stride, const T* out_b, const T* lse_b,
                           size_t b_stride, size_t n, int hs);

/// Self-attention over a fused qkv (B,T,3C) buffer: the view q = qkv, k = qkv + C,
/// v = qkv + 2C with stride 3C, out (B,T,C). Br query rows and Bc key columns per tile:
/// any positive sizes, T need not be a multiple of either (a size below 1 throws
/// std::invalid_argument).
template <class T>
FlashCounts flash_attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int NH,
                                    int Br, int Bc);

/// Backward of the fused form: ACCUMULATES (+=) dq, dk, dv into dqkv (B,T,3C), like every
/// backward op of kernels/ops.h. Deterministic: every element of dqkv is summed by one
/// thread in a fixed order. One pass, key tiles outside: dK, dV and dQ are accumulated
/// together, so the counts are those of that pass.
template <class T>
FlashCounts flash_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out,
                                     const T* lse, int B, int T_, int C, int NH, int Br, int Bc);

}  // namespace gpt::cpu
