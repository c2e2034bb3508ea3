// Attention v1: the naive GPU version, the readable baseline of the ladder.
//
// It computes exactly what the CPU reference computes, one step per kernel, with the
// score matrix of every (batch, head) materialised in global memory:
//   S[t,u] = scale * q_t . k_u           for u <= t       (scores kernel)
//   P[t,:] = softmax(S[t, 0..t])         max-subtracted   (softmax kernel)
//   y_t    = sum_{u<=t} P[t,u] v_u                         (weighted-sum kernel)
// Backward, with dy = dout:
//   dP[t,u] = dy_t . v_u                                   (dp kernel)
//   dS[t,u] = P[t,u] (dP[t,u] - sum_u' P[t,u'] dP[t,u'])   (softmax Jacobian: ds kernel)
//   dq_t    = scale * sum_{u<=t} dS[t,u] k_u               (dq kernel)
//   dk_u    = scale * sum_{t>=u} dS[t,u] q_t               (dkdv kernel)
//   dv_u    =         sum_{t>=u} P[t,u] dy_t               (dkdv kernel)
// Every output element is owned by one thread that loops over its sum in a fixed order:
// no atomics, the same result on every run.
//
// The cost is the point of the lesson: B*NH*T*T fp32 scores are written and read
// several times (at T = 8192, 12 heads: 3 GiB per sequence), and the work is bound by
// that memory traffic, not by arithmetic. v2 removes the matrix.
#include <cmath>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/common.cuh"

namespace gpt::cuda {
namespace {

// A (T, T) matrix per (b, h) in att: row t of head bh starts at (bh*T + t)*T.
__device__ __forceinline__ size_t att_row(int bh, int t, int T) { return (size_t(bh) * T + t) * T; }

// ---- forward --------------------------------------------------------------------------

// Grid (ceil(T/256), T, B*NH): thread (x) is the key u, blockIdx.y the query t.
template <class T>
__global__ void scores_kernel(float* att, const T* qkv, int T_, int C, int NH, float scale) {
  const int hs = C / NH;
  const int bh = blockIdx.z, b = bh / NH, h = bh % NH;
  const int t = blockIdx.y;
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u > t) return;  // causal: keys after t are never read (the softmax zeroes them)
  const T* q = qkv + qkv_at(b, t, 0, h, T_, C, hs);
  const T* k = qkv + qkv_at(b, u, 1, h, T_, C, hs);
  float s = 0.0f;
  for (int d = 0; d < hs; ++d) s += to_float(q[d]) * to_float(k[d]);
  att[att_row(bh, t, T_) + u] = s * scale;
}

// One warp per row of scores (B*NH*T rows); lanes stride over the row's keys.
//   m = max_u S[t,u];  P[t,u] = exp(S[t,u] - m) / sum_u' exp(S[t,u'] - m)
// Subtracting the row max keeps every exponent <= 0, so exp never overflows. The row's
// logsumexp, m + log(sum), goes to lse[row] when lse is given: row = bh*T + t, lse's
// (B,NH,T) index.
__global__ void softmax_kernel(float* att, float* lse, long rows, int T_) {
  const long row = (long(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // a whole warp leaves together: rows are warp-uniform
  const int t = int(row % T_);  // query position: keys 0..t are visible
  float* p = att + size_t(row) * T_;
  float m = -INFINITY;
  for (int u = lane; u <= t; u += 32) m = fmaxf(m, p[u]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int u = lane; u <= t; u += 32) {
    const float e = expf(p[u] - m);
    p[u] = e;
    sum += e;
  }
  const float total = warp_sum(sum);
  if (lse != nullptr && lane == 0) lse[row] = m + logf(total);
  const float inv = 1.0f / total;
  for (int u = lane; u < T_; u += 32) p[u] = u <= t ? p[u] * inv : 0.0f;
}

// Grid (T, B*NH), hs threads: thread d of block (t, bh) owns y_t[d] = sum_u P[t,u] v_u[d].
// Neighbouring threads read neighbouring v columns: coalesced.
template <class T>
__global__ void weighted_sum_kernel(T* out, const float* att, const T* qkv, int T_, int C, int NH) {
  const int hs = C / NH;
  const int t = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int d = threadIdx.x;
  const float* p = att + att_row(bh, t, T_);
  float y = 0.0f;
  for (int u = 0; u <= t; ++u) y += p[u] * to_float(qkv[qkv_at(b, u, 2, h, T_, C, hs) + d]);
  out[out_at(b, t, h, T_, C, hs) + d] = from_float<T>(y);
}

// ---- backward -------------------------------------------------------------------------

// Grid (ceil(T/256), T, B*NH) as the scores: dP[t,u] = dy_t . v_u for u <= t.
template <class T>
__global__ void dp_kernel(float* dscores, const T* dout, const T* qkv, int T_, int C, int NH) {
  const int hs = C / NH;
  const int bh = blockIdx.z, b = bh / NH, h = bh % NH;
  const int t = blockIdx.y;
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u > t) return;
  const T* dy = dout + out_at(b, t, h, T_, C, hs);
  const T* v = qkv + qkv_at(b, u, 2, h, T_, C, hs);
  float dp = 0.0f;
  for (int d = 0; d < hs; ++d) dp += to_float(dy[d]) * to_float(v[d]);
  dscores[att_row(bh, t, T_) + u] = dp;
}

// One warp per row, in place: dS[t,u] = P[t,u] (dP[t,u] - D_t), D_t = sum_u P[t,u] dP[t,u].
// (D_t is the row's P-weighted mean of dP: the Jacobian of softmax is diag(P) - P P^T.)
__global__ void ds_kernel(float* dscores, const float* att, long rows, int T_) {
  const long row = (long(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = int(row % T_);
  const float* p = att + size_t(row) * T_;
  float* ds = dscores + size_t(row) * T_;
  float D = 0.0f;
  for (int u = lane; u <= t; u += 32) D += p[u] * ds[u];
  D = warp_sum(D);
  for (int u = lane; u <= t; u += 32) ds[u] = p[u] * (ds[u] - D);
}

// Grid (T, B*NH), hs threads: dq_t[d] += scale * sum_{u<=t} dS[t,u] k_u[d].
template <class T>
__global__ void dq_kernel(T* dqkv, const float* dscores, const T* qkv, int T_, int C, int NH,
                          float scale) {
  const int hs = C / NH;
  const int t = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int d = threadIdx.x;
  const float* ds = dscores + att_row(bh, t, T_);
  float dq = 0.0f;
  for (int u = 0; u <= t; ++u) dq += ds[u] * to_float(qkv[qkv_at(b, u, 1, h, T_, C, hs) + d]);
  add_to(&dqkv[qkv_at(b, t, 0, h, T_, C, hs) + d], dq * scale);
}

// Grid (T, B*NH), hs threads: block u walks down column u of P and dS (the queries
// t >= u that saw key u) and owns dk_u[d] and dv_u[d].
template <class T>
__global__ void dkdv_kernel(T* dqkv, const float* dscores, const float* att, const T* dout,
                            const T* qkv, int T_, int C, int NH, float scale) {
  const int hs = C / NH;
  const int u = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int d = threadIdx.x;
  float dk = 0.0f, dv = 0.0f;
  for (int t = u; t < T_; ++t) {
    const size_t tu = att_row(bh, t, T_) + u;  // every thread reads the same P, dS: broadcast
    dk += dscores[tu] * to_float(qkv[qkv_at(b, t, 0, h, T_, C, hs) + d]);
    dv += att[tu] * to_float(dout[out_at(b, t, h, T_, C, hs) + d]);
  }
  add_to(&dqkv[qkv_at(b, u, 1, h, T_, C, hs) + d], dk * scale);
  add_to(&dqkv[qkv_at(b, u, 2, h, T_, C, hs) + d], dv);
}

constexpr int kThreads = 256;

// The launch shapes above put T in gridDim.y for the (t, u) kernels.
void check_v1_grid(const char* fn, int T_) {
  if (T_ > 65535) throw std::invalid_argument(std::string(fn) + ": T must be at most 65535 for v1");
}

}  // namespace

template <class T>
void attention_forward_v1(T* out, float* att, const T* qkv, int B, int T_, int C, int NH, float* lse,
                          cudaStream_t stream) {
  const int hs = attention_head_size("attention_forward_v1", B, T_, C, NH, true);
  check_v1_grid("attention_forward_v1", T_);
  const float scale = 1.0f / std::sqrt(float(hs));
  const long rows = long(B) * NH * T_;
  scores_kernel<<<dim3(ceil_div(T_, kThreads), unsigned(T_), unsigned(B * NH)), kThreads, 0, stream>>>(
      att, qkv, T_, C, NH, scale);
  GPT_CUDA_CHECK_LAUNCH();
  softmax_kernel<<<ceil_div(rows * 32, kThreads), kThreads, 0, stream>>>(att, lse, rows, T_);
  GPT_CUDA_CHECK_LAUNCH();
  weighted_sum_kernel<<<dim3(unsigned(T_), unsigned(B * NH)), unsigned(hs), 0, stream>>>(
      out, att, qkv, T_, C, NH);
  GPT_CUDA_CHECK_LAUNCH();
}

template <class T>
void attention_backward_v1(T* dqkv, float* dscores, const T* dout, const T* qkv, const float* att,
                           int B, int T_, int C, int NH, cudaStream_t stream) {
  const int hs = attention_head_size("attention_backward_v1", B, T_, C, NH, true);
  check_v1_grid("attention_backward_v1", T_);
  const float scale = 1.0f / std::sqrt(float(hs));
  const long rows = long(B) * NH * T_;
  dp_kernel<<<dim3(ceil_div(T_, kThreads), unsigned(T_), unsigned(B * NH)), kThreads, 0, stream>>>(
      dscores, dout, qkv, T_, C, NH);
  GPT_CUDA_CHECK_LAUNCH();
  ds_kernel<<<ceil_div(rows * 32, kThreads), kThreads, 0, stream>>>(dscores, att, rows, T_);
  GPT_CUDA_CHECK_LAUNCH();
  dq_kernel<<<dim3(unsigned(T_), unsigned(B * NH)), unsigned(hs), 0, stream>>>(
      dqkv, dscores, qkv, T_, C, NH, scale);
  GPT_CUDA_CHECK_LAUNCH();
  dkdv_kernel<<<dim3(unsigned(T_), unsigned(B * NH)), unsigned(hs), 0, stream>>>(
      dqkv, dscores, att, dout, qkv, T_, C, NH, scale);
  GPT_CUDA_CHECK_LAUNCH();
}

template void attention_forward_v1<float>(float*, float*, const float*, int, int, int, int, float*, cudaStream_t);
template void attention_forward_v1<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, int, int,
                                                  int, int, float*, cudaStream_t);
template void attention_backward_v1<float>(float*, float*, const float*, const float*, const float*, int,
                                           int, int, int, cudaStream_t);
template void attention_backward_v1<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                                   const __nv_bfloat16*, const float*, int, int, int, int,
                                                   cudaStream_t);

}  // namespace gpt::cuda
