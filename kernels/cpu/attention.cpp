// Causal multi-head self-attention (Vaswani et al. 2017), the readable reference:
// scores are materialised, one (b, head) at a time.
//   S[t,u] = q_t . k_u / sqrt(hs)          for u <= t   (causal: u > t is masked)
//   P[t,:] = softmax(S[t,:]);  y_t = sum_u P[t,u] v_u
// Backward, for each row t with dy_t:
//   dP[t,u] = dy_t . v_u;   dv_u += P[t,u] dy_t
//   dS[t,u] = P[t,u] (dP[t,u] - sum_u' P[t,u'] dP[t,u'])      (softmax Jacobian)
//   dq_t += sum_u dS[t,u] k_u / sqrt(hs);   dk_u += dS[t,u] q_t / sqrt(hs)
// Threads split the (b, head) pairs; a pair owns its columns of dqkv, so the sums
// need no atomics and are the same whatever the thread count.
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  const size_t row = size_t(3) * C;  // stride between positions in qkv
#pragma omp parallel for collapse(2) schedule(static) if (parallel : worth_threads_macs(double(B) * NH * T_ * T_ * hs))
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const T* base = qkv + size_t(b) * T_ * row + size_t(h) * hs;
      T* P = att + (size_t(b) * NH + h) * T_ * T_;
      for (int t = 0; t < T_; ++t) {
        const T* q = base + size_t(t) * row;
        T* p = P + size_t(t) * T_;
        T max = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          const T* k = base + size_t(u) * row + C;
          T s = 0;
          for (int i = 0; i < hs; ++i) s += q[i] * k[i];
          p[u] = s * scale;
          if (p[u] > max) max = p[u];
        }
        T sum = 0;
        for (int u = 0; u <= t; ++u) {
          p[u] = std::exp(p[u] - max);
          sum += p[u];
        }
        for (int u = 0; u <= t; ++u) p[u] /= sum;
        for (int u = t + 1; u < T_; ++u) p[u] = 0;
        T* y = out + (size_t(b) * T_ + t) * C + size_t(h) * hs;
        for (int i = 0; i < hs; ++i) y[i] = 0;
        for (int u = 0; u <= t; ++u) {
          const T* v = base + size_t(u) * row + 2 * C;
          for (int i = 0; i < hs; ++i) y[i] += p[u] * v[i];
        }
      }
    }
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                        int NH) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  const size_t row = size_t(3) * C;
#pragma omp parallel if (parallel : worth_threads_macs(double(B) * NH * T_ * T_ * hs))
  {
    std::vector<T> dP(T_);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h) {
        const T* base = qkv + size_t(b) * T_ * row + size_t(h) * hs;
        T* dbase = dqkv + size_t(b) * T_ * row + size_t(h) * hs;
        const T* P = att + (size_t(b) * NH + h) * T_ * T_;
        for (int t = 0; t < T_; ++t) {
          const T* p = P + size_t(t) * T_;
          const T* dy = dout + (size_t(b) * T_ + t) * C + size_t(h) * hs;
          T p_dot_dp = 0;
          for (int u = 0; u <= t; ++u) {
            const T* v = base + size_t(u) * row + 2 * C;
            T* dv = dbase + size_t(u) * row + 2 * C;
            T d = 0;
            for (int i = 0; i < hs; ++i) {
              d += dy[i] * v[i];
              dv[i] += p[u] * dy[i];
            }
            dP[u] = d;
            p_dot_dp += p[u] * d;
          }
          const T* q = base + size_t(t) * row;
          T* dq = dbase + size_t(t) * row;
          for (int u = 0; u <= t; ++u) {
            const T ds = p[u] * (dP[u] - p_dot_dp) * scale;
            const T* k = base + size_t(u) * row + C;
            T* dk = dbase + size_t(u) * row + C;
            for (int i = 0; i < hs; ++i) {
              dq[i] += ds * k[i];
              dk[i] += ds * q[i];
            }
          }
        }
      }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int, int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*, int, int, int, int);

}  // namespace gpt::cpu
