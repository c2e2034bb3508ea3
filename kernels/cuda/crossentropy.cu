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
// Targets are device data, so the host cannot check them without a synchronising copy.
// The CPU reference does not check them either (the model's forward validates targets
// on the host before they are uploaded, common/gpt2.cpp), and there a target outside
// [0, V) would read out of bounds. Here the kernel never reads outside the row: a row
// with such a target gets a NaN loss and NaN gradients in [0, V), so the error shows up
// in the loss and the gradient norm of that very step instead of passing unnoticed.
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

// Block (kThreads): row blockIdx.x. No __restrict__ on logits and dlogits: they may be one
// buffer. That is safe because every read of the statistics sweep and of the target's logit
// happens before the __syncthreads, and in the gradient sweep each thread reads a pack
// before it overwrites that same pack.
template <class T>
__global__ void __launch_bounds__(kThreads)
    softmax_crossentropy_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                                const int32_t* __restrict__ targets, float dloss, int V, int Vp,
                                bool vec) {
  constexpr int K = kPack<T>;
  constexpr int kStride = kThreads * K;
  const int row = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const T* z = logits + size_t(row) * Vp;

  // Sweep 1: this thread's (max, sum) over its packs of [0, V). Columns at or past V are
  // padding: they are excluded from the max and contribute exp(-inf) = 0 to the sum.
  SoftmaxStats mine = {-CUDART_INF_F, 0.0f};
  for (int c0 = threadIdx.x * K; c0 < V; c0 += kStride) {
    float x[K];
    load_floats(x, z, c0, Vp, vec);  // within the row: Vp columns exist
    float pack_max = -CUDART_INF_F;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (c0 + k >= V) x[k] = -CUDART_INF_F;
      pack_max = fmaxf(pack_max, x[k]);
    }
    const float m = fmaxf(mine.max, pack_max);  // finite: column c0 < V is in the pack
    float s = mine.sum * expf(mine.max - m);     // the first pack: 0 * exp(-inf) = 0
#pragma unroll
    for (int k = 0; k < K; ++k) s += expf(x[k] - m);
    mine = {m, s};
  }

  // The target's logit, read before the barrier (dlogits may overwrite it after).
  const int target = targets[row];
  const bool valid_target = target >= 0 && target < V;
  const float z_target = valid_target ? to_float(z[target]) : 0.0f;

  // Merge: butterfly within each warp (lane 0's result is used), then the warps in order.
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

  if (threadIdx.x == 0)
    losses[row] = valid_target ? logf(stats.sum) - (z_target - stats.max) : CUDART_NAN_F;
  if (!dlogits) return;

  // Sweep 2: the gradient over all Vp columns, the padding set to 0.
  // p_j = exp(z_j - max) / sum: dividing keeps p as accurate as the exp itself.
  const float scale = valid_target ? dloss / stats.sum : CUDART_NAN_F;
  T* d = dlogits + size_t(row) * Vp;
  for (int c0 = threadIdx.x * K; c0 < Vp; c0 += kStride) {
    float x[K];
    load_floats(x, z, c0, Vp, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = c0 + k;
      float g = 0.0f;  // padding
      if (j < V) {
        g = scale * expf(x[k] - stats.max);
        if (j == target) g -= dloss;
      }
      x[k] = g;
    }
    store_floats(d, x, c0, Vp, vec);
  }
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

template void softmax_crossentropy<float>(float*, float*, const float*, const int32_t*, float, int, int, int);
template void softmax_crossentropy<gpt::bf16>(float*, gpt::bf16*, const gpt::bf16*, const int32_t*, float, int,
                                              int, int);

}  // namespace gpt::cuda
