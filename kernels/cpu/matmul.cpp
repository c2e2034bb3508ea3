// Linear layer on the GEMM of gemm.h.  out = inp . w^T + bias
//   dinp = dout . w,   dw += dout^T . inp,   dbias += sum over rows of dout
// (an input's gradient is written, the parameters' are accumulated: kernels/ops.h)
// The inputs are stored as T or, for bf16 storage, as bf16 (S), widened where they are
// read: by the GEMM as it packs them, by the bias sum as it adds them.
#include <cstddef>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {
namespace {

template <class T, class S>
void linear_forward(T* out, const S* inp, const S* w, const T* bias, int N, int C, int OC) {
  gemm(false, true, N, OC, C, inp, C, w, C, out, OC, false);
  if (!bias) return;
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(N) * OC))
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) out[size_t(i) * OC + o] += bias[o];
}

template <class T, class S>
void linear_backward(T* dinp, T* dw, T* dbias, const S* dout, const S* inp, const S* w, int N, int C, int OC) {
  if (dinp) gemm(false, false, N, C, OC, dout, OC, w, C, dinp, C, false);
  if (dw) gemm(true, false, OC, C, N, dout, OC, inp, C, dw, C, true);
  if (!dbias) return;
  // Threads split the output channels; each sums its rows in order (deterministic).
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(N) * OC))
  for (int o0 = 0; o0 < OC; o0 += 64) {
    const int o1 = o0 + 64 < OC ? o0 + 64 : OC;
    for (int i = 0; i < N; ++i)
      for (int o = o0; o < o1; ++o) dbias[o] += widen(dout[size_t(i) * OC + o]);
  }
}

}  // namespace

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
  linear_forward(out, inp, w, bias, N, C, OC);
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC, T* gelu_out) {
  matmul_forward(out, inp, w, bias, N, C, OC);
  if (gelu_out) gelu_forward(gelu_out, out, size_t(N) * OC);
}

template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC) {
  linear_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
}

void matmul_forward(float* out, const bf16* inp, const bf16* w, const float* bias, int N, int C, int OC) {
  linear_forward(out, inp, w, bias, N, C, OC);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp, const bf16* w,
                     int N, int C, int OC) {
  linear_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int, float*);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int, double*);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int, int);

}  // namespace gpt::cpu
