// The optimizer step on the GPU: AdamW on fp32 master weights, and the sum of squares
// behind the global gradient norm. They compute what kernels/cpu/adamw.cpp computes
// (kernels/ops.h has the equations):
//   g = grad * grad_scale
//   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   p -= lr ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd p )
//
// Both are memory-bound: AdamW reads 16 bytes per parameter (p, g, m, v), writes 12
// (p, m, v) plus the compute copy, and does some 20 flops. A thread owns 8 consecutive
// parameters and moves each array with 16-byte accesses (two float4 per fp32 array, one
// 8 x bf16 pack for a bf16 copy); unaligned calls and the last partial group go element
// by element. Hyper-parameters are rounded to fp32 on the host exactly as the CPU
// reference rounds them, and the bias corrections 1/(1 - b^t) are computed in double.
//
// sum_of_squares is a reduction, so it has to be made deterministic on purpose: a fixed
// number of blocks (a function of n only, never of the device), each thread summing a
// fixed grid-stride subset of the elements in double, a fixed-shape tree inside the block,
// and the per-block partials summed on the host in block order:
//
//   g:  [ pack 0 | pack 1 | ... ]   thread t of the grid takes packs t, t + S, t + 2S, ...
//        -> per-thread double -> warp butterfly -> block partial[b] -> host: sum_b in order
//
// The same n and the same pointer alignment give the same bits on every run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;  // parameters per AdamW thread: one bf16 pack, two float4

// ---- AdamW --------------------------------------------------------------------------

// The hyper-parameters as the kernel uses them: fp32, rounded as the CPU rounds them.
struct AdamWConstants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float lr, eps, weight_decay, grad_scale;
  float inv_bias_correction1, inv_bias_correction2;  // 1 / (1 - b^t), from double
  bool sgd;                                           // plain SGD (AdamWArgs::sgd)
};

AdamWConstants adamw_constants(const ops::AdamWArgs& a) {
  AdamWConstants h;
  h.beta1 = float(a.beta1);
  h.beta2 = float(a.beta2);
  h.one_minus_beta1 = 1.0f - h.beta1;  // in fp32, as the CPU's T(1) - b1
  h.one_minus_beta2 = 1.0f - h.beta2;
  h.lr = float(a.lr);
  h.eps = float(a.eps);
  h.weight_decay = float(a.weight_decay);
  h.grad_scale = float(a.grad_scale);
  h.inv_bias_correction1 = float(1.0 / (1.0 - std::pow(a.beta1, a.step)));
  h.inv_bias_correction2 = float(1.0 / (1.0 - std::pow(a.beta2, a.step)));
  h.sgd = a.sgd;
  return h;
}

// Thread i updates parameters [8 i, 8 i + 8). Copy is float or __nv_bfloat16; copy may be
// null (no compute copy). A float copy is rounded to bf16 values when round_copy is set;
// a bf16 copy is rounded by its store.
template <class Copy>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ m,
                 float* __restrict__ v, Copy* __restrict__ copy, size_t n, AdamWConstants h,
                 bool round_copy, bool vec) {
  constexpr int K = kPerThread;
  const size_t i0 = first_element<K>();
  if (i0 >= n) return;
  float p[K], g[K], mk[K], vk[K];
  load_floats(p, params, i0, n, vec);
  load_floats(g, grads, i0, n, vec);
  load_floats(mk, m, i0, n, vec);
  load_floats(vk, v, i0, n, vec);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float gs = g[k] * h.grad_scale;
    if (h.sgd) {  // plain SGD: the moments stay as they are
      p[k] -= h.lr * gs;
      continue;
    }
    mk[k] = h.beta1 * mk[k] + h.one_minus_beta1 * gs;
    vk[k] = h.beta2 * vk[k] + h.one_minus_beta2 * gs * gs;
    const float m_hat = mk[k] * h.inv_bias_correction1;
    const float v_hat = vk[k] * h.inv_bias_correction2;
    p[k] -= h.lr * (m_hat / (sqrtf(v_hat) + h.eps) + h.weight_decay * p[k]);
  }
  store_floats(params, p, i0, n, vec);
  store_floats(m, mk, i0, n, vec);
  store_floats(v, vk, i0, n, vec);
  if (copy) {
    if (round_copy) {
#pragma unroll
      for (int k = 0; k < K; ++k) p[k] = to_float(from_float<__nv_bfloat16>(p[k]));
    }
    store_floats(copy, p, i0, n, vec);
  }
}

// ---- sum of squares -----------------------------------------------------------------

constexpr int kMaxSumBlocks = 1024;  // at most one partial per block: 8 KiB to the host
constexpr int kSumWarps = kThreads / 32;

__device__ __forceinline__ double warp_sum_double(double x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// partials[blockIdx.x] = sum of g[i]^2 over this block's fixed share of the elements.
// With vec, whole float4 packs first (pack p goes to grid thread p mod S), then the
// 0..3 tail elements; without, every element by the same grid-stride rule.
__global__ void __launch_bounds__(kThreads)
    sum_of_squares_kernel(double* partials, const float* __restrict__ g, size_t n, bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t n_packs = vec ? n / 4 : 0;
  double s = 0.0;
  for (size_t p = tid; p < n_packs; p += stride) {
    const float4 x = reinterpret_cast<const float4*>(g)[p];
    s += double(x.x) * x.x;
    s += double(x.y) * x.y;
    s += double(x.z) * x.z;
    s += double(x.w) * x.w;
  }
  for (size_t i = n_packs * 4 + tid; i < n; i += stride) s += double(g[i]) * g[i];

  // Block: a butterfly in each warp, then warp 0 adds the warps' sums in warp order.
  __shared__ double warp_sums[kSumWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  s = warp_sum_double(s);
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0) {
    double t = lane < kSumWarps ? warp_sums[lane] : 0.0;
    t = warp_sum_double(t);
    if (lane == 0) partials[blockIdx.x] = t;
  }
}

// ---- host side ----------------------------------------------------------------------

ScratchBuffer partials_scratch;  // kernels/cuda/scratch.h

}  // namespace

double sum_of_squares(const float* g, size_t n) {
  if (n == 0) return 0.0;
  require_pointer(g, "sum_of_squares", "g");
  // At least ~8 float4 per thread before another block is added; the count depends on
  // n only, so the split (and the result) is the same on every device.
  const size_t per_block = size_t(kThreads) * 4 * 8;
  const int blocks = int(std::min<size_t>((n + per_block - 1) / per_block, kMaxSumBlocks));
  double* partials = partials_scratch.as<double>(kMaxSumBlocks);
  sum_of_squares_kernel<<<blocks, kThreads>>>(partials, g, n, aligned16(g));
  GPT_CUDA_CHECK_LAUNCH();
  std::vector<double> host(size_t(blocks), 0.0);
  // cudaMemcpy waits for the kernel (same stream) before it copies.
  GPT_CUDA_CHECK(cudaMemcpy(host.data(), partials, host.size() * sizeof(double), cudaMemcpyDeviceToHost));
  double total = 0.0;
  for (double s : host) total += s;  // block order: fixed
  return total;
}

template <class A>
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const ops::AdamWArgs& a, A* copy, bool round_copy_to_bf16) {
  if (a.step < 1)
    throw std::invalid_argument("adamw_update: step = " + std::to_string(a.step) +
                                " (steps are counted from 1)");
  if (n == 0) return;
  require_pointer(params, "adamw_update", "params");
  require_pointer(grads, "adamw_update", "grads");
  require_pointer(m, "adamw_update", "m");
  require_pointer(v, "adamw_update", "v");
  const bool vec = aligned16(params) && aligned16(grads) && aligned16(m) && aligned16(v) &&
                   (copy == nullptr || aligned16(copy));
  const size_t blocks = (n + size_t(kPerThread) * kThreads - 1) / (size_t(kPerThread) * kThreads);
  if (blocks > size_t(INT_MAX))
    throw std::invalid_argument("adamw_update: n = " + std::to_string(n) + " is too large");
  adamw_kernel<<<unsigned(blocks), kThreads>>>(params, grads, m, v, device_ptr(copy), n,
                                               adamw_constants(a), round_copy_to_bf16, vec);
  GPT_CUDA_CHECK_LAUNCH();
}

template void adamw_update<float>(float*, const float*, float*, float*, size_t, const ops::AdamWArgs&,
                                  float*, bool);
template void adamw_update<gpt::bf16>(float*, const float*, float*, float*, size_t,
                                      const ops::AdamWArgs&, gpt::bf16*, bool);

}  // namespace gpt::cuda
