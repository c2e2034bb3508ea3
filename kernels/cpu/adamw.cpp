// AdamW update, gradient norm and bf16 rounding. AdamW (Loshchilov & Hutter), per element,
// t the step counted from 1 (docs/model.md derives the choices):
//   g = grad * clip
//   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
//   m_hat = m * fl(1 / (1 - b1^t)),   v_hat = v * fl(1 / (1 - b2^t))   (corrections in double)
//   p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p)                   (decay decoupled from g)
// The gradient norm is ||g||_2 over every tensor: fixed chunks, each summed in the fixed
// lanes of lanes.h, their sums added in order (the same bits on any thread count).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

template <class T>
double sum_of_squares(const T* g, size_t n) {
  // Fixed-size chunks, their sums added in order: the same result whatever the thread
  // count (a plain OpenMP reduction adds the threads' partial sums in any order).
  constexpr size_t kChunk = 1 << 14;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks, 0.0);
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(n)))
  for (size_t c = 0; c < chunks; ++c) {
    const size_t end = std::min(n, (c + 1) * kChunk);
    // In fixed lanes (lanes.h): vectorised, in an order set by the chunk's length alone,
    // so a tensor gets the same sum wherever its buffer lies.
    const T* chunk = g + c * kChunk;
    part[c] = lane_sum<double>(int(end - c * kChunk), [=](int i) { return double(chunk[i]) * double(chunk[i]); });
  }
  double total = 0;
  for (double s : part) total += s;
  return total;
}

template <class T>
void adamw_update(T* params, const T* grads, T* m, T* v, size_t n, const ops::AdamWArgs& a, T* copy,
                  bool copy_bf16) {
  const double bc1 = 1.0 - std::pow(double(a.beta1), a.step);
  const double bc2 = 1.0 - std::pow(double(a.beta2), a.step);
  const T b1 = T(a.beta1), b2 = T(a.beta2), lr = T(a.lr), eps = T(a.eps), wd = T(a.weight_decay);
  const T scale = T(a.grad_scale), inv_bc1 = T(1.0 / bc1), inv_bc2 = T(1.0 / bc2);
  if (a.sgd) {  // plain SGD: the moments stay as they are
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
    for (size_t i = 0; i < n; ++i) {
      params[i] -= lr * (grads[i] * scale);
      if (copy) copy[i] = params[i];
    }
  } else {
    // One element's update; the loops below differ only in writing the copy, so that
    // neither holds a branch and both vectorise (with the sqrt's errno off, see
    // kernels/CMakeLists.txt): every element's arithmetic is the same either way.
    auto update = [=](size_t i) {
      const T g = grads[i] * scale;
      m[i] = b1 * m[i] + (T(1) - b1) * g;
      v[i] = b2 * v[i] + (T(1) - b2) * g * g;
      const T m_hat = m[i] * inv_bc1, v_hat = v[i] * inv_bc2;
      params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * params[i]);
    };
    if (copy) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
      for (size_t i = 0; i < n; ++i) {
        update(i);
        copy[i] = params[i];
      }
    } else {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
      for (size_t i = 0; i < n; ++i) update(i);
    }
  }
  if (copy && copy_bf16) {
    if constexpr (sizeof(T) == sizeof(float)) round_to_bf16(reinterpret_cast<float*>(copy), n);
  }
}

void round_to_bf16(float* x, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
  for (size_t i = 0; i < n; ++i) x[i] = bf16_round(x[i]);
}

template double sum_of_squares<float>(const float*, size_t);
template double sum_of_squares<double>(const double*, size_t);
template void adamw_update<float>(float*, const float*, float*, float*, size_t, const ops::AdamWArgs&, float*, bool);
template void adamw_update<double>(double*, const double*, double*, double*, size_t, const ops::AdamWArgs&, double*, bool);

}  // namespace gpt::cpu
