/// @file
/// CPU reference implementations of the ops in kernels/ops.h: plain loops, OpenMP
/// across rows, templated on float and double (explicitly instantiated in the .cpp
/// files). The matmuls run on the blocked GEMM of gemm.h.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/bf16.h"
#include "kernels/adamw_args.h"

namespace gpt::cpu {

/// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; out is (B,T_,C).
template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C);
/// dwte[tokens[b,t],:] += dout[b,t,:] and dwpe[t,:] += sum over b of dout[b,t,:];
/// deterministic (serial over positions, parallel over channels).
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C);

/// The embedding of a vocabulary range and a position offset (see embedding.cpp).
template <class T>
void embedding_range_forward(T* out, const int32_t* tokens, const T* wte_rows, int v0, int v1,
                             const T* wpe, int pos0, int B, int T_, int C);
/// Its backward: wte_rows (rows [v0, v1)) receive their tokens' gradients and, when dwpe
/// is non-null, positions pos0 .. pos0+T_-1 the sums over the batch; accumulates.
template <class T>
void embedding_range_backward(T* dwte_rows, T* dwpe, const T* dout, const int32_t* tokens, int v0,
                              int v1, int pos0, int B, int T_, int C);

/// Layer normalisation of N rows of C (eps 1e-5): out = (x - mean) * rstd * w + b;
/// writes each row's mean and rstd (N each) for the backward.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N, int C);
/// Its backward from the saved mean and rstd: dinp, dw and db accumulate. Either half
/// may be null and is skipped: dinp, or dw with db (the weight gradients run apart).
template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C);

/// out[N,OC] = inp[N,C] . w[OC,C]^T + bias[OC] (bias may be null), on the blocked GEMM.
template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC);
/// The same, then gelu_out = gelu(out) when gelu_out is non-null (the GPU fuses the two).
template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC, T* gelu_out);
/// dinp = dout . w (written), dw += dout^T . inp, dbias += column sums of dout
/// (accumulated); any of the three may be null and is then skipped. Deterministic.
template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC);
/// The same two with bf16 inputs and fp32 outputs (bf16_ops.h rounds what it stores):
/// the operands are widened as the GEMM packs them, so the results are, bit for bit, the
/// fp32 ops' on widened copies.
void matmul_forward(float* out, const bf16* inp, const bf16* w, const float* bias, int N, int C, int OC);
/// As above: dinp (fp32) = and dw, dbias (fp32) += from bf16 dout, inp and w.
void matmul_backward(float* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp, const bf16* w,
                     int N, int C, int OC);

/// Causal multi-head attention, the readable reference: materialises the softmax
/// probabilities in att (B,NH,T_,T_; zero above the diagonal) and writes out (B,T_,C)
/// from qkv (B,T_,3C). The ops use flash attention instead (flash_attention.h); this is
/// the tests' ground truth.
template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH);
/// Its backward from the saved probabilities att: accumulates into dqkv (B,T_,3C).
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                        int NH);

/// out = gelu(inp), tanh form, over n elements (computed as x sigmoid(2u)).
template <class T>
void gelu_forward(T* out, const T* inp, size_t n);
/// dinp = gelu'(inp) * dout over n elements (written, as matmul_backward's dinp).
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);

/// out = a + b over n elements.
template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n);
/// da += dout and db += dout over n elements.
template <class T>
void residual_backward(T* da, T* db, const T* dout, size_t n);

/// x *= s over n elements, in place.
template <class T>
void scale(T* x, size_t n, T s);

/// Sets `bytes` bytes at p to zero, each thread a contiguous share (one thread's memset
/// writes about 9 GB/s on a server core, well below what the memory takes: a GPT-2 124M
/// gradient buffer, 498 MB, in 53 ms on one thread and 29 ms on two). Zero bits are
/// zero bits whichever thread writes them.
void zero_bytes(void* p, size_t bytes);

/// Fused softmax and cross-entropy over the first V of Vp logit columns of N rows:
/// losses[i] = -log p[i, targets[i]]; when dlogits is non-null it is overwritten with
/// dloss * (p - onehot(target)), 0 in the padding columns.
template <class T>
void softmax_crossentropy(T* losses, T* dlogits, const T* logits, const int32_t* targets, T dloss,
                          int N, int V, int Vp);

/// Cross-entropy over a vocabulary range, in two halves around a reduction across the
/// ranks that hold the other ranges (see crossentropy.cpp).
template <class T>
void crossentropy_stats(T* row_max, T* row_sumexp, T* target_logit, const T* logits,
                        const int32_t* targets, int v0, int V, int N, int Vl);
/// The second half: from the reduced row statistics, the N losses and, when dlogits is
/// non-null, dloss * (p - onehot) on this rank's Vl columns (overwritten; 0 in padding).
template <class T>
void crossentropy_from_stats(T* losses, T* dlogits, const T* logits, const T* row_max,
                             const T* row_sumexp, const T* target_logit, const int32_t* targets,
                             T dloss, int v0, int V, int N, int Vl);

/// A row's loss from its combined statistics: log S - (z_target - M) = -log p_target.
template <class T>
inline T crossentropy_loss(T row_max, T row_sumexp, T target_logit) {
  return std::log(row_sumexp) - (target_logit - row_max);
}
/// One row of each of the two above, over its `real` columns below V (of Vl), the target
/// relative to the row's first column: what the N-row ops run on each row, and what the
/// bf16 ops run on a row widened into a buffer that stays in cache.
template <class T>
void crossentropy_stats_row(T& row_max, T& row_sumexp, T& target_logit, const T* z, int target, int real);
/// dlogits of one row: dloss * (exp(z - max) / sum - onehot(target)), 0 from `real` on.
template <class T>
void crossentropy_gradient_row(T* d, const T* z, T max, T sum, int target, T dloss, int real, int Vl);

/// Sum of g[i]^2 over n elements in double, in fixed chunks added in order: the same
/// bits whatever the thread count.
template <class T>
double sum_of_squares(const T* g, size_t n);

/// One AdamW step (or plain SGD when a.sgd) on n parameters, in place on params, m, v
/// (see ops::adamw_update). A non-null copy receives the updated weights, rounded to
/// bf16 values when copy_bf16 is set and T is float.
template <class T>
void adamw_update(T* params, const T* grads, T* m, T* v, size_t n, const ops::AdamWArgs& a, T* copy,
                  bool copy_bf16);

/// Rounds each of n floats to the nearest bf16 value (ties to even), in place.
void round_to_bf16(float* x, size_t n);

}  // namespace gpt::cpu
