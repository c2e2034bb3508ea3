// Fused softmax + cross-entropy over the real vocabulary [0, V) of each row; the
// padding columns [V, Vp) take no part (probability 0, gradient 0).
//   p = softmax(logits[0:V]) computed as exp(z - max) / sum,  loss = -log p[target]
//   dlogits = dloss * (p - onehot(target))
// Writing the gradient in the same pass means the N x V probabilities are never stored.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/fast_exp.h"

namespace gpt::cpu {

template <class T>
void softmax_crossentropy(T* losses, T* dlogits, const T* logits, const int32_t* targets, T dloss,
                          int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* z = logits + size_t(i) * Vp;
    T max = z[0];
#pragma omp simd reduction(max : max)
    for (int j = 1; j < V; ++j) max = z[j] > max ? z[j] : max;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; ++j) sum += exp_t(z[j] - max);
    const T log_sum = std::log(sum);
    const int target = targets[i];
    losses[i] = log_sum - (z[target] - max);
    if (!dlogits) continue;
    T* d = dlogits + size_t(i) * Vp;
    // p_j = exp(z_j - max) / sum: dividing keeps p as accurate as the exp itself
    // (exp(z_j - max - log_sum) would add log_sum's rounding, amplified by |z_j - max|).
    const T scale = dloss / sum;
#pragma omp simd
    for (int j = 0; j < V; ++j) d[j] = scale * exp_t(z[j] - max);
    d[target] -= dloss;
    for (int j = V; j < Vp; ++j) d[j] = 0;
  }
}

template void softmax_crossentropy<float>(float*, float*, const float*, const int32_t*, float, int, int, int);
template void softmax_crossentropy<double>(double*, double*, const double*, const int32_t*, double, int, int, int);

}  // namespace gpt::cpu
