/// @file
/// CPU reference implementations of the ops in kernels/ops.h: plain loops, OpenMP
/// across rows, templated on float and double (explicitly instantiated in the .cpp
/// files). The matmuls run on the blocked GEMM of gemm.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/adamw_args.h"

namespace gpt::cpu {

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C);
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C);

/// The embedding of a vocabulary range and a position offset (see embedding.cpp).
template <class T>
void embedding_range_forward(T* out, const int32_t* tokens, const T* wte_rows, int v0, int v1,
                             const T* wpe, int pos0, int B, int T_, int C);
template <class T>
void embedding_range_backward(T* dwte_rows, T* dwpe, const T* dout, const int32_t* tokens, int v0,
                              int v1, int pos0, int B, int T_, int C);

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N, int C);
template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C);

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC);
template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC);

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH);
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                        int NH);

template <class T>
void gelu_forward(T* out, const T* inp, size_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n);
template <class T>
void residual_backward(T* da, T* db, const T* dout, size_t n);

template <class T>
void scale(T* x, size_t n, T s);

template <class T>
void softmax_crossentropy(T* losses, T* dlogits, const T* logits, const int32_t* targets, T dloss,
                          int N, int V, int Vp);

/// Cross-entropy over a vocabulary range, in two halves around a reduction across the
/// ranks that hold the other ranges (see crossentropy.cpp).
template <class T>
void crossentropy_stats(T* row_max, T* row_sumexp, T* target_logit, const T* logits,
                        const int32_t* targets, int v0, int V, int N, int Vl);
template <class T>
void crossentropy_from_stats(T* losses, T* dlogits, const T* logits, const T* row_max,
                             const T* row_sumexp, const T* target_logit, const int32_t* targets,
                             T dloss, int v0, int V, int N, int Vl);

template <class T>
double sum_of_squares(const T* g, size_t n);

template <class T>
void adamw_update(T* params, const T* grads, T* m, T* v, size_t n, const ops::AdamWArgs& a, T* copy,
                  bool copy_bf16);

void round_to_bf16(float* x, size_t n);

}  // namespace gpt::cpu
