// One block of a larger causal attention on the GPU (context parallelism: a rank's
// queries against the keys and values of one chunk that came round the ring), computing
// what kernels/cpu/flash_attention.cpp computes for a FlashView:
//
//   s_tu = q_t . k_u / sqrt(hs)   for the keys u this query sees: k_pos0 + u <= q_pos0 + t
//   forward:   L_t = log sum_u exp(s_tu),   O_t = sum_u exp(s_tu - L_t) v_u
//              (a row that sees no key of the block: O_t = 0, L_t = -inf)
//   backward, from the MERGED output O and logsumexp L of the whole attention:
//              P_tu = exp(s_tu - L_t),  dP_tu = dO_t . v_u,  D_t = dO_t . O_t
//              dq_t += sum_u P_tu (dP_tu - D_t) k_u / sqrt(hs)
//              dk_u += sum_t P_tu (dP_tu - D_t) q_t / sqrt(hs)
//              dv_u += sum_t P_tu dO_t
//   merge:     L = log(e^{L_a} + e^{L_b}),  O = e^{L_a - L} O_a + e^{L_b - L} O_b
//
// The design is the plainest correct one, not a fast one: one warp per row, the head's
// hs values spread over its lanes (hs <= 128: up to 4 per lane), the keys (or queries)
// of the block walked in order with an online softmax. dq is owned by the warp of its
// query row and dk, dv by the warp of their key row, which walks the queries that see
// it: no two warps write one element, no atomics, so the bits repeat run to run. The
// cost is the naive attention's (every score computed twice in backward), fine for the
// tests and small contexts; the flash kernels of this folder are the fast path of a
// whole attention.
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda {
namespace {

constexpr int kMaxPerLane = kGpuBlockMaxHeadSize / 32;  // values of a head's row per lane
constexpr int kWarpsPerBlock = 4;

// Element i of head h of row t of batch b in a view's matrix with `stride` per row.
__device__ __forceinline__ size_t at(int b, int t, int rows, size_t stride, int h, int hs) {
  return (size_t(b) * rows + t) * stride + size_t(h) * hs;
}

// This lane's part of a row of hs values: elements lane, lane + 32, ...
__device__ __forceinline__ void load_row(float (&x)[kMaxPerLane], const float* row, int hs, int lane) {
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int i = lane + 32 * k;
    x[k] = i < hs ? row[i] : 0.0f;
  }
}

__device__ __forceinline__ float dot(const float (&a)[kMaxPerLane], const float* row, int hs, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int i = lane + 32 * k;
    if (i < hs) s += a[k] * row[i];
  }
  return warp_sum(s);
}

// Warp w of the block takes row blockIdx.x * kWarpsPerBlock + w of (b = blockIdx.z, h = blockIdx.y).
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    block_forward_kernel(BlockView v, float* __restrict__ out, float* __restrict__ lse, float scale) {
  const int lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
  if (t >= v.Tq) return;
  float q[kMaxPerLane], acc[kMaxPerLane] = {};
  load_row(q, v.q + at(b, t, v.Tq, v.q_stride, h, v.hs), v.hs, lane);
  float m = -CUDART_INF_F, l = 0.0f;
  const int last = min(v.Tk - 1, v.q_pos0 + t - v.k_pos0);  // the last key this query sees
  for (int u = 0; u <= last; ++u) {
    const float s = dot(q, v.k + at(b, u, v.Tk, v.kv_stride, h, v.hs), v.hs, lane) * scale;
    const float m_new = fmaxf(m, s);
    const float rescale = expf(m - m_new);  // 0 for the first key (m = -inf)
    const float p = expf(s - m_new);
    const float* vu = v.v + at(b, u, v.Tk, v.kv_stride, h, v.hs);
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int i = lane + 32 * k;
      acc[k] = acc[k] * rescale + (i < v.hs ? p * vu[i] : 0.0f);
    }
    l = l * rescale + p;
    m = m_new;
  }
  float* o = out + at(b, t, v.Tq, v.out_stride, h, v.hs);
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int i = lane + 32 * k;
    if (i < v.hs) o[i] = l > 0.0f ? acc[k] / l : 0.0f;
  }
  if (lane == 0) lse[(size_t(b) * v.NH + h) * v.Tq + t] = l > 0.0f ? m + logf(l) : -CUDART_INF_F;
}

// dq of query row t: its warp walks the keys it sees.
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    block_backward_dq_kernel(BlockView v, float* __restrict__ dq, const float* __restrict__ dout,
                             const float* __restrict__ out, const float* __restrict__ lse, float scale) {
  const int lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
  if (t >= v.Tq) return;
  const size_t o_at = at(b, t, v.Tq, v.out_stride, h, v.hs);
  float q[kMaxPerLane], d_o[kMaxPerLane], acc[kMaxPerLane] = {};
  load_row(q, v.q + at(b, t, v.Tq, v.q_stride, h, v.hs), v.hs, lane);
  load_row(d_o, dout + o_at, v.hs, lane);
  const float D = dot(d_o, out + o_at, v.hs, lane);
  const float L = lse[(size_t(b) * v.NH + h) * v.Tq + t];
  const int last = min(v.Tk - 1, v.q_pos0 + t - v.k_pos0);
  for (int u = 0; u <= last; ++u) {
    const float* ku = v.k + at(b, u, v.Tk, v.kv_stride, h, v.hs);
    const float p = expf(dot(q, ku, v.hs, lane) * scale - L);
    const float dp = dot(d_o, v.v + at(b, u, v.Tk, v.kv_stride, h, v.hs), v.hs, lane);
    const float ds = p * (dp - D) * scale;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int i = lane + 32 * k;
      if (i < v.hs) acc[k] += ds * ku[i];
    }
  }
  float* row = dq + at(b, t, v.Tq, v.q_stride, h, v.hs);
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int i = lane + 32 * k;
    if (i < v.hs) row[i] += acc[k];
  }
}

// dk and dv of key row u: its warp walks the queries that see it.
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    block_backward_dkv_kernel(BlockView v, float* __restrict__ dk, float* __restrict__ dv,
                              const float* __restrict__ dout, const float* __restrict__ out,
                              const float* __restrict__ lse, float scale) {
  const int lane = threadIdx.x % 32;
  const int u = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
  if (u >= v.Tk) return;
  float k_row[kMaxPerLane], v_row[kMaxPerLane], acc_k[kMaxPerLane] = {}, acc_v[kMaxPerLane] = {};
  const size_t kv_at = at(b, u, v.Tk, v.kv_stride, h, v.hs);
  load_row(k_row, v.k + kv_at, v.hs, lane);
  load_row(v_row, v.v + kv_at, v.hs, lane);
  const int first = max(0, v.k_pos0 + u - v.q_pos0);  // the first query that sees this key
  for (int t = first; t < v.Tq; ++t) {
    const size_t o_at = at(b, t, v.Tq, v.out_stride, h, v.hs);
    const float* qt = v.q + at(b, t, v.Tq, v.q_stride, h, v.hs);
    const float* dout_t = dout + o_at;
    const float L = lse[(size_t(b) * v.NH + h) * v.Tq + t];
    const float p = expf(dot(k_row, qt, v.hs, lane) * scale - L);
    const float dp = dot(v_row, dout_t, v.hs, lane);
    float d_o[kMaxPerLane];
    load_row(d_o, dout_t, v.hs, lane);
    const float D = dot(d_o, out + o_at, v.hs, lane);
    const float ds = p * (dp - D) * scale;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int i = lane + 32 * k;
      if (i < v.hs) {
        acc_k[k] += ds * qt[i];
        acc_v[k] += p * d_o[k];
      }
    }
  }
  float* dk_row = dk + kv_at;
  float* dv_row = dv + kv_at;
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int i = lane + 32 * k;
    if (i < v.hs) {
      dk_row[i] += acc_k[k];
      dv_row[i] += acc_v[k];
    }
  }
}

// Row r's warp merges (out_b, lse_b) into (out, lse).
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    merge_kernel(float* __restrict__ out, float* __restrict__ lse, size_t out_stride, const float* __restrict__ out_b,
                 const float* __restrict__ lse_b, size_t b_stride, size_t n, int hs) {
  const int lane = threadIdx.x % 32;
  const size_t r = size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (r >= n) return;
  const float la = lse[r], lb = lse_b[r];
  if (lb == -CUDART_INF_F) return;  // B saw no keys: nothing to add
  const float mx = fmaxf(la, lb);
  const float ea = expf(la - mx), eb = expf(lb - mx);  // e^{-inf} = 0 when A saw none
  const float sum = ea + eb;
  float* o = out + r * out_stride;
  const float* ob = out_b + r * b_stride;
  for (int i = lane; i < hs; i += 32) o[i] = (ea * o[i] + eb * ob[i]) / sum;
  __syncwarp();
  if (lane == 0) lse[r] = mx + logf(sum);
}

void check_view(const char* fn, const BlockView& v) {
  if (v.B < 1 || v.Tq < 1 || v.Tk < 1 || v.NH < 1 || v.hs < 1 || v.hs > 32 * kMaxPerLane)
    throw std::invalid_argument(std::string(fn) + ": B=" + std::to_string(v.B) + " Tq=" + std::to_string(v.Tq) +
                                " Tk=" + std::to_string(v.Tk) + " NH=" + std::to_string(v.NH) + " hs=" +
                                std::to_string(v.hs) + " (needs every size >= 1 and hs <= " +
                                std::to_string(32 * kMaxPerLane) + ")");
  if (v.NH > 65535 || v.B > 65535) throw std::invalid_argument(std::string(fn) + ": too many heads or sequences");
  require_pointer(v.q, fn, "q");
  require_pointer(v.k, fn, "k");
  require_pointer(v.v, fn, "v");
}

dim3 grid_for(int rows, const BlockView& v) {
  return dim3(unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock), unsigned(v.NH), unsigned(v.B));
}

}  // namespace

void attention_block_forward(const BlockView& v, float* out, float* lse) {
  check_view("attention_block_forward", v);
  require_pointer(out, "attention_block_forward", "out");
  require_pointer(lse, "attention_block_forward", "lse");
  block_forward_kernel<<<grid_for(v.Tq, v), 32 * kWarpsPerBlock>>>(v, out, lse, 1.0f / sqrtf(float(v.hs)));
  GPT_CUDA_CHECK_LAUNCH();
}

void attention_block_backward(const BlockView& v, float* dq, float* dk, float* dv, const float* dout,
                              const float* out, const float* lse) {
  constexpr const char* fn = "attention_block_backward";
  check_view(fn, v);
  require_pointer(dq, fn, "dq");
  require_pointer(dk, fn, "dk");
  require_pointer(dv, fn, "dv");
  require_pointer(dout, fn, "dout");
  require_pointer(out, fn, "out");
  require_pointer(lse, fn, "lse");
  const float scale = 1.0f / sqrtf(float(v.hs));
  block_backward_dq_kernel<<<grid_for(v.Tq, v), 32 * kWarpsPerBlock>>>(v, dq, dout, out, lse, scale);
  GPT_CUDA_CHECK_LAUNCH();
  block_backward_dkv_kernel<<<grid_for(v.Tk, v), 32 * kWarpsPerBlock>>>(v, dk, dv, dout, out, lse, scale);
  GPT_CUDA_CHECK_LAUNCH();
}

void attention_merge(float* out, float* lse, size_t out_stride, const float* out_b, const float* lse_b,
                     size_t b_stride, size_t rows, int hs) {
  constexpr const char* fn = "attention_merge";
  if (rows == 0) return;
  if (hs < 1) throw std::invalid_argument(std::string(fn) + ": hs = " + std::to_string(hs));
  require_pointer(out, fn, "out");
  require_pointer(lse, fn, "lse");
  require_pointer(out_b, fn, "out_b");
  require_pointer(lse_b, fn, "lse_b");
  merge_kernel<<<unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock), 32 * kWarpsPerBlock>>>(
      out, lse, out_stride, out_b, lse_b, b_stride, rows, hs);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda
