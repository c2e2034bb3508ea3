/// @file
/// bf16 storage on the CPU: the ops of cpu_ops.h for weights and activations stored as
/// bf16 (A = bf16) and gradients of parameters and statistics in fp32 (G = float), the
/// signatures of the GPU's bf16 kernels (kernels/cuda/cuda_ops.h).
///
/// A CPU has no bf16 arithmetic worth the name, so each op does what a tensor core does
/// with fp32 accumulation, in three steps:
/// ```
///   widen   every bf16 input to fp32          (exact: a bf16 is the top half of an fp32)
///   compute the fp32 kernel of cpu_ops.h      (the same loops, the same order)
///   narrow  every bf16 output to bf16         (round to nearest, ties to even)
/// ```
/// An output the op accumulates into (dinp += ...) is widened first and narrowed after.
/// So a bf16 op's result is, bit for bit, the fp32 op's result on the same values,
/// rounded once: what GPT2<float> with bf16 rounding after each op (the emulation the
/// tests compare bf16 storage against) computes. The fused GELU of matmul_forward is taken from the
/// fp32 product before it is rounded, as the GPU's GEMM epilogue does.
///
/// The widened copies live only for the call (they are not in the memory ledger, like
/// the GPU kernels' own scratch); what a run keeps between ops is bf16. The largest,
/// those of the logits and their gradient, are made a slice of rows at a time, at most
/// 64 MiB each. The matmuls make no copy of their operands at all: the GEMM widens them
/// as it packs them (gemm.h), so a weight (the LM head's wte: Vp x C) is never widened
/// whole.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/bf16.h"
#include "kernels/adamw_args.h"

namespace gpt::cpu {

/// The largest widened slice, in fp32 values (64 Mi / 4 by default); tests set it small to
/// run the sliced paths on small shapes, where the bits must not change.
void set_bf16_slice_floats(size_t floats);

/// dst[i] = src[i] rounded to bf16 (nearest, ties to even), over n elements.
void convert(bf16* dst, const float* src, size_t n);
/// dst[i] = the fp32 value of src[i] (exact), over n elements.
void convert(float* dst, const bf16* src, size_t n);

/// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:], the sum rounded once.
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int T_, int C);
/// dwte and dwpe (fp32) += the token and position gradients from dout.
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int T_, int C);
/// The embedding of the vocabulary rows [v0, v1) and the positions from pos0 (cpu_ops.h).
void embedding_range_forward(bf16* out, const int32_t* tokens, const bf16* wte_rows, int v0, int v1,
                             const bf16* wpe, int pos0, int B, int T_, int C);
/// Its backward into fp32 gradients; dwpe may be null.
void embedding_range_backward(float* dwte_rows, float* dwpe, const bf16* dout, const int32_t* tokens, int v0,
                              int v1, int pos0, int B, int T_, int C);

/// out = layernorm(inp) (rounded); mean and rstd in fp32.
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N,
                       int C);
/// dinp += (rounded once, after the sum); dw and db (fp32) +=. dinp, or dw with db, may be null.
void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w,
                        const float* mean, const float* rstd, int N, int C);

/// out = inp . w^T + bias, and gelu_out = gelu(out) when gelu_out is non-null, the GELU
/// of the fp32 product (as the GPU's fused epilogue computes it).
void matmul_forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int N, int C, int OC,
                    bf16* gelu_out);
/// dinp = dout . w (bf16); dw += dout^T . inp and dbias += its column sums (fp32); any may be null.
void matmul_backward(bf16* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp, const bf16* w, int N,
                     int C, int OC);

/// Flash attention with the tiles Br x Bc (flash_attention.h); lse in fp32.
void flash_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T_, int C, int NH, int Br, int Bc);
/// dqkv += the gradients of q, k and v, from the stored out and lse.
void flash_attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                              int B, int T_, int C, int NH, int Br, int Bc);

/// out = gelu(inp).
void gelu_forward(bf16* out, const bf16* inp, size_t n);
/// dinp = gelu'(inp) * dout.
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n);
/// out = a + b.
void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n);
/// da += dout; db += dout.
void residual_backward(bf16* da, bf16* db, const bf16* dout, size_t n);
/// x *= s, in place.
void scale(bf16* x, size_t n, float s);

/// losses (fp32) and, when dlogits is non-null, dlogits = dloss * (p - onehot), rounded.
void softmax_crossentropy(float* losses, bf16* dlogits, const bf16* logits, const int32_t* targets, float dloss,
                          int N, int V, int Vp);
/// The fp32 row statistics of a vocabulary range of the logits (cpu_ops.h).
void crossentropy_stats(float* row_max, float* row_sumexp, float* target_logit, const bf16* logits,
                        const int32_t* targets, int v0, int V, int N, int Vl);
/// From the reduced statistics: the losses and, when dlogits is non-null, the range's gradient.
void crossentropy_from_stats(float* losses, bf16* dlogits, const bf16* logits, const float* row_max,
                             const float* row_sumexp, const float* target_logit, const int32_t* targets,
                             float dloss, int v0, int V, int N, int Vl);

/// AdamW (or SGD) on fp32 master weights; copy, when non-null, receives the updated
/// weights rounded to bf16 (round_copy is implied: a bf16 copy is always rounded).
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const ops::AdamWArgs& a,
                  bf16* copy, bool round_copy);

}  // namespace gpt::cpu
