// Softmax + cross-entropy over the real vocabulary [0, V) of each row; the padding
// columns [V, Vp) take no part (probability 0, gradient 0).
//   p = softmax(logits[0:V]) computed as exp(z - max) / sum,  loss = -log p[target]
//   dlogits = dloss * (p - onehot(target))
// Writing the gradient in the pass that makes p means the N x V probabilities are never
// stored. Two forms give the same numbers: softmax_crossentropy, fused (the loss and the
// gradient at once), and crossentropy_stats then crossentropy_from_stats, below, which
// the model's head runs (the statistics in the forward, the gradient in the backward,
// and in between, with the vocabulary split over ranks, their reduction).
// The sums of exps run in fixed lanes (lanes.h): vectorised, in an order set by V alone.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

template <class T>
void softmax_crossentropy(T* losses, T* dlogits, const T* logits, const int32_t* targets, T dloss,
                          int N, int V, int Vp) {
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(N) * Vp))
  for (int i = 0; i < N; ++i) {
    const T* z = logits + size_t(i) * Vp;
    T max = z[0];
#pragma omp simd reduction(max : max)
    for (int j = 1; j < V; ++j) max = z[j] > max ? z[j] : max;
    const T sum = lane_sum<T>(V, [=](int j) { return exp_t(z[j] - max); });
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

// The same loss when the logits' columns are split over ranks (a vocabulary-parallel
// head): a rank holds columns [v0, v0 + Vl) of the padded vocabulary; those >= V are
// padding and take no part. First each rank computes, per row, over its real columns
//   m_r = max z,   s_r = sum exp(z - m_r),   z_t = z[target] if the target is its own, else 0
// (a rank holding only padding: m_r = -inf, s_r = 0). The ranks then combine them
// (the caller's reduction):  M = max_r m_r,  S = sum_r s_r exp(m_r - M),  z_t = sum_r z_t,r.
// From the combined statistics, loss = log S - (z_t - M) and, on each rank's columns,
//   dlogits = dloss * (exp(z - M) / S - onehot(target)),  0 in the padding.
// On one rank holding every column these are the fused op's numbers exactly.
template <class T>
void crossentropy_stats_row(T& row_max, T& row_sumexp, T& target_logit, const T* z, int target, int real) {
  T max = -INFINITY;
#pragma omp simd reduction(max : max)
  for (int j = 0; j < real; ++j) max = z[j] > max ? z[j] : max;
  row_max = max;
  row_sumexp = lane_sum<T>(real, [=](int j) { return exp_t(z[j] - max); });
  target_logit = target >= 0 && target < real ? z[target] : T(0);
}

template <class T>
void crossentropy_gradient_row(T* d, const T* z, T max, T sum, int target, T dloss, int real, int Vl) {
  const T scale = dloss / sum;
#pragma omp simd
  for (int j = 0; j < real; ++j) d[j] = scale * exp_t(z[j] - max);
  if (target >= 0 && target < real) d[target] -= dloss;
  for (int j = real; j < Vl; ++j) d[j] = 0;
}

template <class T>
void crossentropy_stats(T* row_max, T* row_sumexp, T* target_logit, const T* logits,
                        const int32_t* targets, int v0, int V, int N, int Vl) {
  const int real = std::max(0, std::min(Vl, V - v0));  // this rank's columns below V
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(N) * Vl))
  for (int i = 0; i < N; ++i)
    crossentropy_stats_row(row_max[i], row_sumexp[i], target_logit[i], logits + size_t(i) * Vl, targets[i] - v0,
                           real);
}

template <class T>
void crossentropy_from_stats(T* losses, T* dlogits, const T* logits, const T* row_max,
                             const T* row_sumexp, const T* target_logit, const int32_t* targets,
                             T dloss, int v0, int V, int N, int Vl) {
  const int real = std::max(0, std::min(Vl, V - v0));
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(N) * Vl))
  for (int i = 0; i < N; ++i) {
    losses[i] = crossentropy_loss(row_max[i], row_sumexp[i], target_logit[i]);
    if (dlogits)
      crossentropy_gradient_row(dlogits + size_t(i) * Vl, logits + size_t(i) * Vl, row_max[i], row_sumexp[i],
                                targets[i] - v0, dloss, real, Vl);
  }
}

template void crossentropy_stats_row<float>(float&, float&, float&, const float*, int, int);
template void crossentropy_gradient_row<float>(float*, const float*, float, float, int, float, int, int);
template void crossentropy_stats<float>(float*, float*, float*, const float*, const int32_t*, int, int, int, int);
template void crossentropy_stats<double>(double*, double*, double*, const double*, const int32_t*, int, int, int, int);
template void crossentropy_from_stats<float>(float*, float*, const float*, const float*, const float*, const float*, const int32_t*, float, int, int, int, int);
template void crossentropy_from_stats<double>(double*, double*, const double*, const double*, const double*, const double*, const int32_t*, double, int, int, int, int);
template void softmax_crossentropy<float>(float*, float*, const float*, const int32_t*, float, int, int, int);
template void softmax_crossentropy<double>(double*, double*, const double*, const int32_t*, double, int, int, int);

}  // namespace gpt::cpu
