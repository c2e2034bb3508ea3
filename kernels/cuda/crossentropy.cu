// Fused softmax + cross-entropy on the GPU, computing what kernels/cpu/crossentropy.cpp
// computes. Row i holds Vp logits z, of which the first V are the real vocabulary and
// the rest padding that takes no part:
//   max = max_j z_j,   sum = sum_j exp(z_j - max)             (j < V)
//   losses[i] = log(sum) - (z_target - max)                   (= -log p_target)
//   dlogits[i, j] = dloss (exp(z_j - max) / sum - [j == target])   for j < V
//   dlogits[i, j] = 0                                              for V <= j < Vp
// dlogits, when non-null, is OVERWRITTEN (as the CPU reference does); it may be the
// logits buffer itself.
//
// One block per row. The row is read twice: once for its statistics, once to write the
// gradient (the second read mostly hits L2). The statistics take a single sweep with an
// "online" softmax: a thread keeps a running (max, sum) and, when a larger value
// arrives, rescales the sum it has so far instead of sweeping the row a second time:
//
//   (m, s) + pack z  ->  m' = max(m, max z),  s' = s exp(m - m') + sum_k exp(z_k - m')
//
// Two partial results merge the same way: (m1, s1) + (m2, s2) -> m = max(m1, m2),
// s = s1 exp(m1 - m) + s2 exp(m2 - m). Threads merge by a warp butterfly, then every
// thread merges the warps' results in warp order, so the reduction order is fixed and
// the bits repeat run to run. Loads are 16-byte packs (kernels/cuda/vector_io.cuh), and
// all arithmetic is fp32 with the accurate expf and logf: bf16 logits are converted on
// load, and the gradient is rounded to bf16 once, on store.
//
// Vocabulary ranges (tensor parallelism, kernels/cpu/crossentropy.cpp has the equations):
// crossentropy_stats writes a row's (max, sum) over the rank's real columns and its target
// logit when the target is the rank's, by the same sweep and merge; after the caller has
// combined the ranks' statistics, crossentropy_from_stats writes the loss and the
// gradient sweep on the rank's columns.
//
// Targets are device data, so the host cannot check them without a synchronising copy.
// The CPU reference does not check them either (the model's forward validates targets
// on the host before they are uploaded, common/gpt2.cpp), and there a target outside
// [0, V) would read out of bounds. Here no kernel reads outside the row: the fused kernel
// gives a row with such a target a NaN loss and NaN gradients in [0, V), and the range
// path (crossentropy_stats, then crossentropy_from_stats) a NaN loss, so the error shows
// up in that very step's loss instead of passing unnoticed.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// The running statistics of a set of logits: their max and sum_j exp(z_j - max).
// The empty set is (-inf, 0).
struct SoftmaxStats {
  float max;
  float sum;
};

__device__ __forceinline__ SoftmaxStats merge(SoftmaxStats a, SoftmaxStats b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -CUDART_INF_F) return {m, 0.0f};  // both empty: exp(-inf - -inf) would be NaN
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// This thread's (max, sum) over its packs of the row's first n columns (of Vp in the row).
// Columns at or past n are excluded from the max and contribute exp(-inf) = 0 to the sum.
template <class T>
__device__ __forceinline__ SoftmaxStats thread_stats(const T* z, int n, int Vp, bool vec) {
  constexpr int K = kPack<T>;
  constexpr int kStride = kThreads * K;
  SoftmaxStats mine = {-CUDART_INF_F, 0.0f};
  for (int c0 = threadIdx.x * K; c0 < n; c0 += kStride) {
    float x[K];
    load_floats(x, z, c0, Vp, vec);  // within the row: Vp columns exist
    float pack_max = -CUDART_INF_F;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (c0 + k >= n) x[k] = -CUDART_INF_F;
      pack_max = fmaxf(pack_max, x[k]);
    }
    const float m = fmaxf(mine.max, pack_max);  // finite: column c0 < n is in the pack
    float s = mine.sum * expf(mine.max - m);     // the first pack: 0 * exp(-inf) = 0
#pragma unroll
    for (int k = 0; k < K; ++k) s += expf(x[k] - m);
    mine = {m, s};
  }
  return mine;
}

// The block's statistics, the same on every thread: butterfly within each warp (lane 0's
// result is used), then the warps in order. Has a __syncthreads.
__device__ __forceinline__ SoftmaxStats block_stats(SoftmaxStats mine) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) {
    const SoftmaxStats other = {__shfl_xor_sync(kFullMask, mine.max, offset),
                                __shfl_xor_sync(kFullMask, mine.sum, offset)};
    mine = merge(mine, other);
  }
  __shared__ float shared_max[kWarps], shared_sum[kWarps];
  if (lane == 0) {
    shared_max[warp] = mine.max;
    shared_sum[warp] = mine.sum;
  }
  __syncthreads();
  SoftmaxStats stats = {shared_max[0], shared_sum[0]};
  for (int w = 1; w < kWarps; ++w) stats = merge(stats, {shared_max[w], shared_sum[w]});
  return stats;
}

// The gradient sweep over a row's Vp columns: dloss (exp(z_j - max) / sum - [j == target])
// for j < n, 0 for the padding. Each thread reads a pack before it overwrites it (d may be z).
template <class T>
__device__ __forceinline__ void gradient_sweep(T* d, const T* z, int n, int Vp, int target, float scale,
                                               float max, float dloss, bool vec) {
  constexpr int K = kPack<T>;
  constexpr int kStride = kThreads * K;
  for (int c0 = threadIdx.x * K; c0 < Vp; c0 += kStride) {
    float x[K];
    load_floats(x, z, c0, Vp, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = c0 + k;
      float g = 0.0f;  // padding
      if (j < n) {
        g = scale * expf(x[k] - max);
        if (j == target) g -= dloss;
      }
      x[k] = g;
    }
    store_floats(d, x, c0, Vp, vec);
  }
}

// Block (kThreads): row blockIdx.x. No __restrict__ on logits and dlogits: they may be one
// buffer. That is safe because every read of the statistics sweep and of the target's logit
// happens before the __syncthreads, and in the gradient sweep each thread reads a pack
// before it overwrites that same pack.
template <class T>
__global__ void __launch_bounds__(kThreads)
    softmax_crossentropy_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                                const int32_t* __restrict__ targets, float dloss, int V, int Vp,
                                bool vec) {
  const int row = blockIdx.x;
  const T* z = logits + size_t(row) * Vp;
  const SoftmaxStats mine = thread_stats(z, V, Vp, vec);

  // The target's logit, read before the barrier (dlogits may overwrite it after).
  const int target = targets[row];
  const bool valid_target = target >= 0 && target < V;
  const float z_target = valid_target ? to_float(z[target]) : 0.0f;
  const SoftmaxStats stats = block_stats(mine);

  if (threadIdx.x == 0)
    losses[row] = valid_target ? logf(stats.sum) - (z_target - stats.max) : CUDART_NAN_F;
  if (!dlogits) return;
  // p_j = exp(z_j - max) / sum: dividing keeps p as accurate as the exp itself.
  const float scale = valid_target ? dloss / stats.sum : CUDART_NAN_F;
  gradient_sweep(dlogits + size_t(row) * Vp, z, V, Vp, target, scale, stats.max, dloss, vec);
}

// Block (kThreads): row blockIdx.x of a rank's Vl columns, of which the first `real` are
// below V. A target in another rank's range contributes 0; a target outside [0, V)
// makes the target logit NaN, so the combined loss is NaN, as the fused kernel's is.
template <class T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_stats_kernel(float* __restrict__ row_max, float* __restrict__ row_sumexp,
                              float* __restrict__ target_logit, const T* __restrict__ logits,
                              const int32_t* __restrict__ targets, int v0, int V, int real, int Vl, bool vec) {
  const int row = blockIdx.x;
  const T* z = logits + size_t(row) * Vl;
  const SoftmaxStats stats = block_stats(thread_stats(z, real, Vl, vec));
  if (threadIdx.x != 0) return;
  const int target = targets[row], t = target - v0;
  row_max[row] = stats.max;  // -inf and 0 for a rank holding only padding
  row_sumexp[row] = stats.sum;
  const bool valid_target = target >= 0 && target < V;
  target_logit[row] = !valid_target ? CUDART_NAN_F : t >= 0 && t < real ? to_float(z[t]) : 0.0f;
}

// Block (kThreads): row blockIdx.x, from the combined statistics. No __restrict__ on
// logits and dlogits: gradient_sweep reads each pack before it overwrites it.
template <class T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_from_stats_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                                   const float* __restrict__ row_max, const float* __restrict__ row_sumexp,
                                   const float* __restrict__ target_logit, const int32_t* __restrict__ targets,
                                   float dloss, int v0, int real, int Vl, bool vec) {
  const int row = blockIdx.x;
  const float max = row_max[row], sum = row_sumexp[row];
  if (threadIdx.x == 0) losses[row] = logf(sum) - (target_logit[row] - max);
  if (!dlogits) return;
  gradient_sweep(dlogits + size_t(row) * Vl, logits + size_t(row) * Vl, real, Vl, targets[row] - v0, dloss / sum,
                 max, dloss, vec);
}

}  // namespace

template <class A>
void softmax_crossentropy(float* losses, A* dlogits, const A* logits, const int32_t* targets,
                          float dloss, int N, int V, int Vp) {
  constexpr const char* fn = "softmax_crossentropy";
  if (N < 1)
    throw std::invalid_argument(std::string(fn) + ": N = " + std::to_string(N) + " (needs at least one row)");
  if (V < 1)
    throw std::invalid_argument(std::string(fn) + ": V = " + std::to_string(V) +
                                " (needs at least one vocabulary column)");
  if (Vp < V)
    throw std::invalid_argument(std::string(fn) + ": Vp = " + std::to_string(Vp) +
                                " is smaller than V = " + std::to_string(V));
  require_pointer(losses, fn, "losses");
  require_pointer(logits, fn, "logits");
  require_pointer(targets, fn, "targets");
  // dlogits may be null: the loss alone (evaluation).
  using T = DeviceType<A>;
  // 16-byte accesses need every row to start aligned: aligned bases and Vp % K == 0.
  const bool vec = Vp % kPack<T> == 0 && aligned16(logits) && (dlogits == nullptr || aligned16(dlogits));
  softmax_crossentropy_kernel<T><<<unsigned(N), kThreads>>>(losses, device_ptr(dlogits), device_ptr(logits),
                                                            targets, dloss, V, Vp, vec);
  GPT_CUDA_CHECK_LAUNCH();
}

// The rank's columns below V: [v0, min(v0 + Vl, V)).
static int real_columns(int v0, int V, int Vl) { return v0 >= V ? 0 : (Vl < V - v0 ? Vl : V - v0); }

static void check_range_shape(const char* fn, int v0, int V, int N, int Vl) {
  if (N < 1 || Vl < 1 || V < 1 || v0 < 0)
    throw std::invalid_argument(std::string(fn) + ": N = " + std::to_string(N) + ", Vl = " + std::to_string(Vl) +
                                ", V = " + std::to_string(V) + ", v0 = " + std::to_string(v0) +
                                " (needs a row, a column, a vocabulary and v0 >= 0)");
}

template <class A>
void crossentropy_stats(float* row_max, float* row_sumexp, float* target_logit, const A* logits,
                        const int32_t* targets, int v0, int V, int N, int Vl) {
  constexpr const char* fn = "crossentropy_stats";
  check_range_shape(fn, v0, V, N, Vl);
  require_pointer(row_max, fn, "row_max");
  require_pointer(row_sumexp, fn, "row_sumexp");
  require_pointer(target_logit, fn, "target_logit");
  require_pointer(logits, fn, "logits");
  require_pointer(targets, fn, "targets");
  using T = DeviceType<A>;
  const bool vec = Vl % kPack<T> == 0 && aligned16(logits);
  crossentropy_stats_kernel<T><<<unsigned(N), kThreads>>>(row_max, row_sumexp, target_logit, device_ptr(logits),
                                                          targets, v0, V, real_columns(v0, V, Vl), Vl, vec);
  GPT_CUDA_CHECK_LAUNCH();
}

template <class A>
void crossentropy_from_stats(float* losses, A* dlogits, const A* logits, const float* row_max,
                             const float* row_sumexp, const float* target_logit, const int32_t* targets, float dloss,
                             int v0, int V, int N, int Vl) {
  constexpr const char* fn = "crossentropy_from_stats";
  check_range_shape(fn, v0, V, N, Vl);
  require_pointer(losses, fn, "losses");
  require_pointer(logits, fn, "logits");
  require_pointer(row_max, fn, "row_max");
  require_pointer(row_sumexp, fn, "row_sumexp");
  require_pointer(target_logit, fn, "target_logit");
  require_pointer(targets, fn, "targets");
  using T = DeviceType<A>;
  const bool vec = Vl % kPack<T> == 0 && aligned16(logits) && (dlogits == nullptr || aligned16(dlogits));
  crossentropy_from_stats_kernel<T><<<unsigned(N), kThreads>>>(losses, device_ptr(dlogits), device_ptr(logits),
                                                               row_max, row_sumexp, target_logit, targets, dloss, v0,
                                                               real_columns(v0, V, Vl), Vl, vec);
  GPT_CUDA_CHECK_LAUNCH();
}

template void softmax_crossentropy<float>(float*, float*, const float*, const int32_t*, float, int, int, int);
template void crossentropy_stats<float>(float*, float*, float*, const float*, const int32_t*, int, int, int, int);
template void crossentropy_stats<gpt::bf16>(float*, float*, float*, const gpt::bf16*, const int32_t*, int, int, int,
                                            int);
template void crossentropy_from_stats<float>(float*, float*, const float*, const float*, const float*, const float*,
                                             const int32_t*, float, int, int, int, int);
template void crossentropy_from_stats<gpt::bf16>(float*, gpt::bf16*, const gpt::bf16*, const float*, const float*,
                                                 const float*, const int32_t*, float, int, int, int, int);
template void softmax_crossentropy<gpt::bf16>(float*, gpt::bf16*, const gpt::bf16*, const int32_t*, float, int,
                                              int, int);

}  // namespace gpt::cuda
