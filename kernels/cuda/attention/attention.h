/// @file
/// Causal multi-head attention on the GPU: the host API of the kernel ladder.
///
/// ```
///   v1 naive           materialised scores (B,NH,T,T), softmax, weighted sum; backward
///                      through the stored probabilities.            v1_naive.cu
///   v2 flash forward   query tiles against key/value tiles in shared memory, online
///                      softmax, logsumexp saved; O(T) memory.        v2_flash_forward.cu
///   v3 flash backward  probabilities recomputed from the logsumexp, dK/dV per key
///                      tile, dQ per query tile, no atomics.          v3_flash_backward.cu
///   v4 tensor cores    v2 and v3 with every tile product on mma.sync (bf16 in, fp32
///                      accumulate), P kept in registers, cp.async double buffering;
///                      bf16 only.                                     v4_mma_sync.cu
///   v5 Hopper forward  WGMMA + TMA (sm_90a).                          v5_wgmma_forward.cu
/// ```
///
/// Every version computes what gpt::cpu::attention_forward / attention_backward compute
/// (kernels/cpu/attention.cpp), on the same layout:
/// ```
///   qkv  (B, T, 3C)  q | k | v per position, head h in columns [h*hs, (h+1)*hs) of each
///   out  (B, T, C)   head h in columns [h*hs, (h+1)*hs)
///   hs = C / NH, scale = 1/sqrt(hs), causal: query t sees keys 0..t.
/// ```
/// T is the element type of qkv, out and their gradients: float or __nv_bfloat16. All
/// arithmetic is fp32; bf16 values are rounded (to nearest even) only when stored, except
/// that the tensor-core versions (v4, v5) round P and dS to bf16 as operands (below).
/// Scratch and statistics buffers are always fp32.
///
/// Conventions (kernels/ops.h): forward overwrites `out`; backward ACCUMULATES into dqkv
/// (dqkv += gradient), so callers zero it first (the model's d_qkv is one layer's scratch,
/// zeroed before each layer's attention backward). All pointers are device
/// memory; every call is asynchronous on `stream`. Bad shapes throw
/// std::invalid_argument; CUDA errors throw std::runtime_error.
///
/// Shapes: any T >= 1 (no multiple-of-tile requirement), any B and NH with B*NH <= 65535.
/// v1 takes any head size up to 1024; v2 and later take hs = 64 or 128.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace gpt::cuda {

/// Sizes, in floats, of the buffers the versions need besides their inputs and outputs.
inline size_t attention_scores_floats(int B, int T, int NH) {  // v1: (B, NH, T, T)
  return size_t(B) * NH * T * T;
}
/// The per-row statistics of the flash versions, (B, NH, T): v2's logsumexp, v3's D.
inline size_t attention_rows_floats(int B, int T, int NH) {  // v2 logsumexp, v3 D: (B, NH, T)
  return size_t(B) * NH * T;
}

// ---- v1: naive --------------------------------------------------------------------

/// out = softmax(q k^T * scale, causal) v.  att (B,NH,T,T) receives the probabilities
/// (zeros above the diagonal) and is what attention_backward_v1 needs; lse, when not
/// null, (B,NH,T) the rows' logsumexps m + log(sum exp(S - m)), as the flash versions write.
template <class T>
void attention_forward_v1(T* out, float* att, const T* qkv, int B, int T_, int C, int NH, float* lse = nullptr,
                          cudaStream_t stream = nullptr);

/// dqkv += gradients of out w.r.t. q, k and v, given dout and the probabilities `att` of
/// the forward. dscores (B,NH,T,T) is scratch (it holds dP, then dS).
template <class T>
void attention_backward_v1(T* dqkv, float* dscores, const T* dout, const T* qkv,
                           const float* att, int B, int T_, int C, int NH,
                           cudaStream_t stream = nullptr);

// ---- v2: flash forward --------------------------------------------------------------

/// out as in v1; lse (B,NH,T) receives each row's logsumexp, log sum_u exp(s_tu), the
/// only statistic the backward needs to recompute the probabilities.
template <class T>
void attention_forward_v2(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH,
                          cudaStream_t stream = nullptr);

// ---- v3: flash backward -------------------------------------------------------------

/// dqkv += gradients, from dout, the inputs qkv, the forward's out and lse (from v2).
/// dsum (B,NH,T) is scratch: D_t = dout_t . out_t per row.
template <class T>
void attention_backward_v3(T* dqkv, float* dsum, const T* dout, const T* qkv, const T* out,
                           const float* lse, int B, int T_, int C, int NH,
                           cudaStream_t stream = nullptr);

// ---- v4: tensor cores (mma.sync) ------------------------------------------------------

/// As v2 and v3, with tensor cores; T = __nv_bfloat16 only (only that instantiation
/// exists: the fp32 mode keeps v2/v3). The results differ from v2/v3 by the rounding of
/// the probabilities P (and, in the backward, dS) to bf16 before they multiply V, dout,
/// q or k: at most 2^-8 relative per term (v4_mma_sync.cu derives the bound). Tensors
/// must be 16-byte aligned. lse from v2 and v4 are interchangeable.
template <class T>
void attention_forward_v4(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH,
                          cudaStream_t stream = nullptr);
/// v3's backward on tensor cores: dqkv +=, dsum (B,NH,T) scratch; lse from v2, v4 or v5.
template <class T>
void attention_backward_v4(T* dqkv, float* dsum, const T* dout, const T* qkv, const T* out,
                           const float* lse, int B, int T_, int C, int NH,
                           cudaStream_t stream = nullptr);

/// ---- v5: Hopper forward (WGMMA + TMA, sm_90a) ------------------------------------------
/// As v2/v4 forward: out and lse. T = __nv_bfloat16 only; head size 64 or 128; qkv
/// 16-byte aligned (TMA reads it). Throws std::invalid_argument on a GPU that is not
/// Hopper (compute capability 9.x).
template <class T>
void attention_forward_v5(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH,
                          cudaStream_t stream = nullptr);

}  // namespace gpt::cuda
