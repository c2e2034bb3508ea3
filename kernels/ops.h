// Every op of GPT-2 training, forward and backward: one signature per op.
//
// Shapes use llm.c's names: B batch, T sequence, C channels, NH heads, OC output
// channels, N = B*T rows, V real vocabulary, Vp padded vocabulary. Tensors are
// row-major and contiguous. Linear weights are stored (OC, C), as PyTorch does:
// out = inp . w^T + bias.
//
// Conventions that every implementation follows:
//  - forward ops overwrite their outputs;
//  - backward ops ACCUMULATE (+=) into parameter gradients and into input gradients,
//    so a tensor used twice (the residual stream, tied embeddings) just receives two
//    contributions; callers zero gradients once per optimizer step;
//  - templated on the element type: float (training) and double (ground truth).
//
// Each op dispatches on the device and records a trace span (when tracing is on). Only the CPU kernels (kernels/cpu/) exist so far;
// the CUDA kernels come with the stage-01-on-GPU issue and keep these signatures.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/device.h"
#include "common/trace.h"
#include "kernels/cpu/cpu_ops.h"

namespace gpt::ops {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
template <class T>
void embedding_forward(Device d, T* out, const int32_t* tokens, const T* wte, const T* wpe,
                       int B, int T_, int C) {
  require_cpu(d, "embedding_forward");
  Span span("embedding_forward", "op");
  cpu::embedding_forward(out, tokens, wte, wpe, B, T_, C);
}
// dwte[tokens[b,t],:] += dout[b,t,:];  dwpe[t,:] += sum_b dout[b,t,:]
template <class T>
void embedding_backward(Device d, T* dwte, T* dwpe, const T* dout, const int32_t* tokens,
                        int B, int T_, int C) {
  require_cpu(d, "embedding_backward");
  Span span("embedding_backward", "op");
  cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T_, C);
}

// out = (x - mean) * rstd * w + b, per row of C; saves mean and rstd for backward.
template <class T>
void layernorm_forward(Device d, T* out, T* mean, T* rstd, const T* inp, const T* w,
                       const T* b, int N, int C) {
  require_cpu(d, "layernorm_forward");
  Span span("layernorm_forward", "op");
  cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
template <class T>
void layernorm_backward(Device d, T* dinp, T* dw, T* db, const T* dout, const T* inp,
                        const T* w, const T* mean, const T* rstd, int N, int C) {
  require_cpu(d, "layernorm_backward");
  Span span("layernorm_backward", "op");
  cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

// out[N,OC] = inp[N,C] . w[OC,C]^T + bias[OC]  (bias may be null)
template <class T>
void matmul_forward(Device d, T* out, const T* inp, const T* w, const T* bias, int N, int C,
                    int OC) {
  require_cpu(d, "matmul_forward");
  Span span("matmul_forward", "op");
  cpu::matmul_forward(out, inp, w, bias, N, C, OC);
}
// dinp += dout . w;  dw += dout^T . inp;  dbias += column sums of dout (dbias may be null)
template <class T>
void matmul_backward(Device d, T* dinp, T* dw, T* dbias, const T* dout, const T* inp,
                     const T* w, int N, int C, int OC) {
  require_cpu(d, "matmul_backward");
  Span span("matmul_backward", "op");
  cpu::matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
}

// Causal multi-head attention. qkv is (B,T,3C): q, then k, then v, head h in
// columns [h*hs, (h+1)*hs) of each. out is (B,T,C); att (B,NH,T,T) keeps the
// softmax probabilities for backward.
template <class T>
void attention_forward(Device d, T* out, T* att, const T* qkv, int B, int T_, int C, int NH) {
  require_cpu(d, "attention_forward");
  Span span("attention_forward", "op");
  cpu::attention_forward(out, att, qkv, B, T_, C, NH);
}
template <class T>
void attention_backward(Device d, T* dqkv, const T* dout, const T* qkv, const T* att, int B,
                        int T_, int C, int NH) {
  require_cpu(d, "attention_backward");
  Span span("attention_backward", "op");
  cpu::attention_backward(dqkv, dout, qkv, att, B, T_, C, NH);
}

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class T>
void gelu_forward(Device d, T* out, const T* inp, size_t n) {
  require_cpu(d, "gelu_forward");
  Span span("gelu_forward", "op");
  cpu::gelu_forward(out, inp, n);
}
template <class T>
void gelu_backward(Device d, T* dinp, const T* inp, const T* dout, size_t n) {
  require_cpu(d, "gelu_backward");
  Span span("gelu_backward", "op");
  cpu::gelu_backward(dinp, inp, dout, n);
}

// out = a + b. Its backward is "add dout to both inputs' gradients": residual_backward.
template <class T>
void residual_forward(Device d, T* out, const T* a, const T* b, size_t n) {
  require_cpu(d, "residual_forward");
  Span span("residual_forward", "op");
  cpu::residual_forward(out, a, b, n);
}
template <class T>
void residual_backward(Device d, T* da, T* db, const T* dout, size_t n) {
  require_cpu(d, "residual_backward");
  Span span("residual_backward", "op");
  cpu::residual_backward(da, db, dout, n);
}

// Fused softmax + cross-entropy over the first V of Vp logit columns (the padding
// columns are ignored: probability 0, gradient 0). losses[i] = -log p[i, targets[i]].
// When dlogits is non-null it is overwritten with dloss * (p - onehot(target)), so
// the probabilities never need to be stored.
template <class T>
void softmax_crossentropy(Device d, T* losses, T* dlogits, const T* logits,
                          const int32_t* targets, T dloss, int N, int V, int Vp) {
  require_cpu(d, "softmax_crossentropy");
  Span span("softmax_crossentropy", "op");
  cpu::softmax_crossentropy(losses, dlogits, logits, targets, dloss, N, V, Vp);
}

// Sum of squares of g (accumulated in double); the global norm is the root of the
// sum over every gradient tensor (and, later, over every rank).
template <class T>
double sum_of_squares(Device d, const T* g, size_t n) {
  require_cpu(d, "sum_of_squares");
  Span span("sum_of_squares", "op");
  return cpu::sum_of_squares(g, n);
}

// AdamW on fp32 master weights (Loshchilov & Hutter, decoupled weight decay):
//   g = grad * grad_scale          (grad_scale applies global-norm clipping)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd p )
// When `copy` is non-null the updated weight is also written there (the bf16
// compute copy: rounded to bf16 when copy_bf16 is set).
template <class T>
void adamw_update(Device d, T* params, const T* grads, T* m, T* v, size_t n, const AdamWArgs& a,
                  T* copy = nullptr, bool copy_bf16 = false) {
  require_cpu(d, "adamw_update");
  Span span("adamw_update", "op");
  cpu::adamw_update(params, grads, m, v, n, a, copy, copy_bf16);
}

// Rounds every element to the nearest bf16 value (ties to even), in place: the bf16
// storage of the bf16 mode, emulated in fp32 buffers.
inline void round_to_bf16(Device d, float* x, size_t n) {
  require_cpu(d, "round_to_bf16");
  Span span("round_to_bf16", "op");
  cpu::round_to_bf16(x, n);
}
inline void round_to_bf16(Device, double*, size_t) {}  // the ground truth is never rounded

}  // namespace gpt::ops
