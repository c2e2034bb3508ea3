/// @file
/// The CUDA side of kernels/ops.h: one host function per op, forward and backward,
/// for the two storage types of training: A = float (fp32 mode) and A = gpt::bf16
/// (bf16 mode: weights' compute copy, activations and activation gradients in bf16).
/// Parameter gradients, layernorm statistics, losses and the optimizer state are
/// always fp32; every kernel computes in fp32 and rounds to bf16 (nearest even) only
/// when it stores (the tensor-core attention kernels also round P and dS to bf16 as the
/// operands of their next product: kernels/cuda/attention/attention.h).
///
/// Conventions, as kernels/ops.h: forward ops overwrite their outputs; backward ops
/// ACCUMULATE (+=) into parameter gradients and input gradients, except the input
/// gradients of matmul_backward and gelu_backward, which they write. All pointers are
/// device memory. Every call is queued on the default stream (asynchronous to the
/// host); functions that return a value to the host (sum_of_squares) synchronise.
/// Reductions are deterministic: a fixed split and a fixed order, no float atomics,
/// so a run gives the same bits every time.
///
/// This header needs no CUDA headers: host code (kernels/ops.h) includes it in builds
/// with GPT_HAVE_CUDA. Shapes that a kernel cannot take throw std::invalid_argument;
/// failed CUDA calls throw std::runtime_error.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/bf16.h"
#include "kernels/adamw_args.h"
#include "kernels/attention_view.h"

namespace gpt::cuda {

/// ---- embedding ------------------------------------------------------------------
/// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
template <class A>
void embedding_forward(A* out, const int32_t* tokens, const A* wte, const A* wpe, int B, int T, int C);
/// dwte[v,:] += sum of dout rows whose token is v, added in position order (the tokens
/// are sorted stably first, so no two threads add into one row);
/// dwpe[t,:] += sum_b dout[b,t,:], b in order.
template <class A>
void embedding_backward(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int B, int T,
                        int C);
/// A vocabulary range [v0, v1) of wte (wte_rows holds those rows; empty is allowed) and
/// positions from pos0: out[b,t,:] = (v0 <= tok < v1 ? wte[tok,:] : 0) + (wpe ? wpe[pos0+t,:] : 0).
template <class A>
void embedding_range_forward(A* out, const int32_t* tokens, const A* wte_rows, int v0, int v1, const A* wpe,
                             int pos0, int B, int T, int C);
/// Its backward, in the same orders as embedding_backward: the range's rows receive their
/// tokens' gradients; dwpe (may be null) rows pos0 .. pos0+T-1 the sums over b.
template <class A>
void embedding_range_backward(float* dwte_rows, float* dwpe, const A* dout, const int32_t* tokens, int v0, int v1,
                              int pos0, int B, int T, int C);

/// ---- layernorm ------------------------------------------------------------------
/// out = (inp - mean) * rstd * w + b for N rows of C (overwritten); mean and rstd (N,
/// fp32) are kept for the backward.
template <class A>
void layernorm_forward(A* out, float* mean, float* rstd, const A* inp, const A* w, const A* b, int N,
                       int C);
/// dinp += ..., dw += ..., db += ... (dw and db summed over rows in a fixed order).
template <class A>
void layernorm_backward(A* dinp, float* dw, float* db, const A* dout, const A* inp, const A* w,
                        const float* mean, const float* rstd, int N, int C);

/// ---- matmul (kernels/cuda/matmul.cu, on the GEMM of kernels/cuda/gemm/) -----------
/// out[N,OC] = inp[N,C] . w[OC,C]^T + bias[OC] (bias may be null). With gelu_out
/// non-null, gelu_out = gelu(out) is written by the same kernel's epilogue.
template <class A>
void matmul_forward(A* out, const A* inp, const A* w, const A* bias, int N, int C, int OC,
                    A* gelu_out = nullptr);
/// dinp = dout . w;  dw += dout^T . inp;  dbias += column sums of dout (may be null).
template <class A>
void matmul_backward(A* dinp, float* dw, float* dbias, const A* dout, const A* inp, const A* w,
                     int N, int C, int OC);
/// dbias[o] += sum_n dout[n,o], rows summed in a fixed order.
template <class A>
void bias_backward(float* dbias, const A* dout, int N, int OC);

/// ---- attention (kernels/cuda/attention/, flash) -----------------------------------
/// lse is (B, NH, T) fp32: the row logsumexp the backward recomputes probabilities from.
inline size_t attention_stats_floats(int B, int T, int NH) { return size_t(B) * NH * T; }
/// out (B, T, C) = causal attention of qkv (B, T, 3C), OVERWRITTEN, and lse its row
/// logsumexps. Head sizes 64 and 128 run the flash versions of attention/attention.h
/// (fp32: v2; bf16: v5 on Hopper when built for sm_90a, else v4); other head sizes run
/// the naive v1, which writes the same logsumexps.
template <class A>
void attention_forward(A* out, float* lse, const A* qkv, int B, int T, int C, int NH);
/// dqkv += the gradients of q, k and v, from dout and the forward's out and lse (fp32:
/// v3; bf16: v4; other head sizes recompute v1's probabilities in scratch).
template <class A>
void attention_backward(A* dqkv, const A* dout, const A* qkv, const A* out, const float* lse, int B,
                        int T, int C, int NH);

/// ---- elementwise ------------------------------------------------------------------
/// out = gelu(inp) (the tanh approximation) over n elements.
template <class A>
void gelu_forward(A* out, const A* inp, size_t n);
template <class A>
void gelu_backward(A* dinp, const A* inp, const A* dout, size_t n);  ///< dinp = gelu'(inp) dout
/// out = a + b over n elements.
template <class A>
void residual_forward(A* out, const A* a, const A* b, size_t n);
template <class A>
void residual_backward(A* da, A* db, const A* dout, size_t n);  ///< da += dout; db += dout
template <class A>
void scale(A* x, size_t n, float s);  ///< x *= s

/// ---- loss -------------------------------------------------------------------------
/// losses[i] = -log softmax(logits[i, :V])[targets[i]]; dlogits (if non-null) =
/// dloss * (p - onehot), zero in the padding columns V..Vp-1.
template <class A>
void softmax_crossentropy(float* losses, A* dlogits, const A* logits, const int32_t* targets,
                          float dloss, int N, int V, int Vp);
/// The cross-entropy of a vocabulary range of the logits (N rows of Vl columns, global
/// columns [v0, v0+Vl), real below V; kernels/cpu/crossentropy.cpp has the equations):
/// each row's max, sum of exponentials and target logit over its real columns ...
template <class A>
void crossentropy_stats(float* row_max, float* row_sumexp, float* target_logit, const A* logits,
                        const int32_t* targets, int v0, int V, int N, int Vl);
/// ... and, from the statistics reduced across the ranks, the losses and (dlogits
/// non-null, OVERWRITTEN, may be the logits) dloss * (p - onehot) on the range, 0 in padding.
template <class A>
void crossentropy_from_stats(float* losses, A* dlogits, const A* logits, const float* row_max,
                             const float* row_sumexp, const float* target_logit, const int32_t* targets, float dloss,
                             int v0, int V, int N, int Vl);

/// ---- one block of a larger attention (context parallelism; attention/block_attention.cu)
/// A view (kernels/attention_view.h: queries at positions q_pos0 + t against keys and
/// values at k_pos0 + u, causal by position, strided rows); lse is (B, NH, Tq).
/// kernels/cpu/flash_attention.h has the equations; fp32 only (stages 10 and 11, the
/// context-parallel ones, keep fp32 buffers).
using BlockView = AttentionView<float>;
/// out and lse OVERWRITTEN; a row that sees no key: out 0, lse -inf.
void attention_block_forward(const BlockView& v, float* out, float* lse);
/// From the merged out and lse of the whole attention: dq, dk, dv ACCUMULATE (+=).
void attention_block_backward(const BlockView& v, float* dq, float* dk, float* dv, const float* dout,
                              const float* out, const float* lse);
/// Folds (out_b, lse_b) into (out, lse), in place, for `rows` rows of hs values.
void attention_merge(float* out, float* lse, size_t out_stride, const float* out_b, const float* lse_b,
                     size_t b_stride, size_t rows, int hs);

/// ---- optimizer ----------------------------------------------------------------------
/// sum of g^2, accumulated in double in a fixed order; synchronises and returns it.
double sum_of_squares(const float* g, size_t n);
/// AdamW on fp32 master weights (kernels/ops.h has the equations). When copy is
/// non-null it receives the updated weight: a float copy is rounded to bf16 values when
/// round_copy_to_bf16 is set; a bf16 copy is always rounded.
template <class A>
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const ops::AdamWArgs& a, A* copy, bool round_copy_to_bf16);
/// x = bf16_round(x), in place.
void round_to_bf16(float* x, size_t n);
/// dst[i] = bf16_round(src[i]) and back: fp32 <-> bf16 conversions for set_params and tests.
void convert(bf16* dst, const float* src, size_t n);
void convert(float* dst, const bf16* src, size_t n);  ///< dst[i] = the fp32 value of src[i] (exact)

/// ---- GEMM choice ----------------------------------------------------------------------
/// Which GEMM the matmul ops run: "hand" (the fastest version of kernels/cuda/gemm/ for
/// this device), "cublas" (cuBLASLt, the baseline), or "v1".."v5" (one rung of the ladder).
/// Throws std::invalid_argument naming the value if it is none of these.
void set_gemm(const char* name);
const char* gemm_in_use(bool bf16);  ///< the version the matmuls run now, e.g. "v5"

/// ---- memory the kernels keep ----------------------------------------------------------
/// Frees what the ops keep between calls (their scratch buffers, cuBLASLt's handles and
/// workspaces; kernels/cuda/release.cu); the next call allocates again. For a program
/// that must return every allocation before it ends (a test under a leak check).
void release_kernel_memory();

}  // namespace gpt::cuda
