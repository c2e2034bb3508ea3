// Layer normalisation over the C channels of each row (Ba, Kiros & Hinton 2016):
//   mean = sum(x)/C,  rstd = 1/sqrt(sum((x-mean)^2)/C + 1e-5),  xhat = (x-mean)*rstd
//   out  = xhat * w + b
// Backward, with g = dout * w:
//   dx += rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw += dout*xhat,  db += dout
// (every gradient accumulates, kernels/ops.h: dx is the residual stream's gradient)
// The row sums run in fixed lanes (lanes.h): vectorised, in an order set by C alone.
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

constexpr double kLayerNormEps = 1e-5;

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N,
                       int C) {
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(N) * C))
  for (int i = 0; i < N; ++i) {
    const T* x = inp + size_t(i) * C;
    const T m = lane_sum<T>(C, [=](int c) { return x[c]; }) / T(C);
    const T var = lane_sum<T>(C, [=](int c) { return (x[c] - m) * (x[c] - m); }) / T(C);
    const T s = T(1) / std::sqrt(var + T(kLayerNormEps));
    T* o = out + size_t(i) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C) {
  // Either half may be left out (null): a zero-bubble schedule runs the input gradient
  // and the weight gradients apart. Rows are independent for dinp.
  if (!dinp && !dw && !db) throw std::invalid_argument("layernorm_backward: nothing to compute");
  if (!dw != !db) throw std::invalid_argument("layernorm_backward: dw and db go together");
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(N) * C))
  for (int i = 0; i < (dinp ? N : 0); ++i) {
    const T* x = inp + size_t(i) * C;
    const T* d = dout + size_t(i) * C;
    T* dx = dinp + size_t(i) * C;
    const T m = mean[i], s = rstd[i];
    const T mean_g = lane_sum<T>(C, [=](int c) { return d[c] * w[c]; }) / T(C);
    const T mean_gx = lane_sum<T>(C, [=](int c) { return d[c] * w[c] * (x[c] - m) * s; }) / T(C);
    for (int c = 0; c < C; ++c) dx[c] += s * (d[c] * w[c] - mean_g - (x[c] - m) * s * mean_gx);
  }
  // dw and db sum over rows: threads split the channels and each sums its rows in
  // order, so the result is the same whatever the thread count.
  constexpr int kBlock = 64;
  if (!dw) return;
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(N) * C))
  for (int c0 = 0; c0 < C; c0 += kBlock) {
    const int c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int i = 0; i < N; ++i) {
      const T* x = inp + size_t(i) * C;
      const T* d = dout + size_t(i) * C;
      for (int c = c0; c < c1; ++c) {
        dw[c] += d[c] * (x[c] - mean[i]) * rstd[i];
        db[c] += d[c];
      }
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int, int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int, int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*, const double*, const double*, int, int);

}  // namespace gpt::cpu
