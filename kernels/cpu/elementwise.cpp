// Element-wise ops: GELU (tanh form, Hendrycks & Gimpel 2016), the residual add, scaling
// and zeroing.
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)):
//   gelu(x)  = x s,                      s = sigmoid(2u)
//   gelu'(x) = s + 2 x s (1 - s) u'(x),  u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// The sigmoid form needs one exp, which vectorises (fast_exp.h), where tanh does not,
// and it has no cancellation for large negative u.
#include <omp.h>

#include <cmath>
#include <cstddef>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

template <class T>
inline T gelu_sigmoid(T x) {  // sigmoid(2u(x))
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  return T(1) / (T(1) + exp_t(T(-2) * u));
}
}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
  for (size_t i = 0; i < n; ++i) out[i] = inp[i] * gelu_sigmoid(inp[i]);
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T s = gelu_sigmoid(x);
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
    dinp[i] = dout[i] * (s + T(2) * x * s * (T(1) - s) * du);
  }
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void residual_backward(T* da, T* db, const T* dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
  for (size_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

template <class T>
void scale(T* x, size_t n, T s) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

void zero_bytes(void* p, size_t bytes) {
  char* const bytes_at = static_cast<char*>(p);
#pragma omp parallel if (parallel : worth_threads(double(bytes) / sizeof(float)))
  {
    // Thread t's share [t bytes / T, (t+1) bytes / T), its inner ends rounded down to
    // 64 bytes so that no cache line is written by two threads.
    const size_t threads = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
    const size_t begin = t == 0 ? 0 : bytes / threads * t / 64 * 64;
    const size_t end = t + 1 == threads ? bytes : bytes / threads * (t + 1) / 64 * 64;
    if (end > begin) std::memset(bytes_at + begin, 0, end - begin);
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
template void scale<float>(float*, size_t, float);
template void scale<double>(double*, size_t, double);

}  // namespace gpt::cpu
