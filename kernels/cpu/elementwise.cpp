// Element-wise ops: GELU (tanh form, Hendrycks & Gimpel 2016) and the residual add.
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3*0.044715 x^2)
#include <cmath>
#include <cstddef>

#include "kernels/cpu/cpu_ops.h"

namespace gpt::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;
}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + std::tanh(u));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
    const T th = std::tanh(u);
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
    dinp[i] += dout[i] * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du);
  }
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void residual_backward(T* da, T* db, const T* dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);
template void residual_forward<float>(float*, const float*, const float*, size_t);
template void residual_forward<double>(double*, const double*, const double*, size_t);
template void residual_backward<float>(float*, float*, const float*, size_t);
template void residual_backward<double>(double*, double*, const double*, size_t);

}  // namespace gpt::cpu
