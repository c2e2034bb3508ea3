// Flash attention on the CPU: the tiled algorithm of the GPU kernels (issue #4,
// kernels/cuda/attention/), written as plain loops so that the algorithm itself is
// tested where no GPU exists. Same layout as the reference attention in
// kernels/cpu/attention.cpp: qkv (B,T,3C) holds q, k, v, head h in columns
// [h*hs, (h+1)*hs) of each; out is (B,T,C). Instead of the (B,NH,T,T) probabilities
// the forward pass keeps one number per row, the logsumexp (B,NH,T).
//
// The lesson (derivations, memory arithmetic, GPU mapping) is docs/flash_attention.md;
// the equations are in flash_attention.cpp.
#pragma once
#include <cstdint>

namespace gpt::cpu {

// What a pass touched, for the tests (and the lesson's "causal halves the work").
// A tile is one (query tile, key tile) pair of one (b, head); a score is one q.k dot
// product. Integers summed over threads, so the counts are exact whatever the schedule.
struct FlashCounts {
  int64_t tiles_visited = 0;  // tiles that were computed (at or below the diagonal)
  int64_t tiles_skipped = 0;  // tiles entirely above the diagonal, never touched
  int64_t scores = 0;         // q.k products computed (masked ones inside a visited tile are not)
};

// Forward. out (B,T,C) is overwritten; lse (B,NH,T) receives, per row t of each head,
// L_t = log sum_{u<=t} exp(q_t.k_u / sqrt(hs)). Br query rows and Bc key columns per
// tile: any positive sizes, T need not be a multiple of either (a size below 1 throws
// std::invalid_argument).
template <class T>
FlashCounts flash_attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int NH,
                                    int Br, int Bc);

// Backward from the forward's out and lse (no probabilities stored: they are
// recomputed). ACCUMULATES (+=) dq, dk, dv into dqkv (B,T,3C), like every backward op
// of kernels/ops.h. Deterministic: every element of dqkv is summed by one thread in a
// fixed order. The counts are those of the dK/dV pass; the dQ pass visits the same tiles.
template <class T>
FlashCounts flash_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out,
                                     const T* lse, int B, int T_, int C, int NH, int Br, int Bc);

}  // namespace gpt::cpu
