// Layer normalisation on the GPU, forward and backward, computing what
// kernels/cpu/layernorm.cpp computes, over the C channels of each of N rows:
//   mean = sum(x) / C,   rstd = 1 / sqrt(sum((x - mean)^2) / C + 1e-5)
//   xhat = (x - mean) rstd,   out = xhat w + b
// Backward, with g = dout w:
//   dinp += rstd (g - mean(g) - xhat mean(g xhat))
//   dw   += sum over rows of dout xhat,   db += sum over rows of dout
//
// Forward and dinp: one warp per row. Lane l owns the 16-byte packs l, l + 32, l + 64...
// of the row (kernels/cuda/vector_io.cuh), so each sweep over the row is a run of
// coalesced 512-byte warp accesses. A row is swept more than once (forward: sum, then
// squared deviations, then the output), but only the first sweep comes from DRAM: a
// row is a few KiB and the later sweeps find it in L1. The variance is the two-pass
// one, sum((x - mean)^2), as the CPU's: it does not lose digits to cancellation the way
// sum(x^2)/C - mean^2 does. Lane sums are combined by a butterfly (a fixed order).
//
// dw and db are column sums over all N rows: every row adds into every column. Float
// atomics would add the rows in whatever order the hardware picked, so the bits would
// change from run to run. Instead the rows are split into fixed chunks and the sums
// are taken in two fixed-order steps (kernels/cuda/column_sums.h):
//
//   rows  0..63    block (chunk 0)  -> partial_dw[0, :], partial_db[0, :]
//   rows 64..127   block (chunk 1)  -> partial_dw[1, :], partial_db[1, :]
//   ...
//   finish_column_sums: dw[c] += the partials of column c, in a fixed order
//
// Inside a chunk, a thread owns one pack of K columns and walks every 8th row of the
// chunk, then the 8 threads of a column add their sums through shared memory in thread
// order. The split depends on N only, never on the device, so a run is reproducible bit
// for bit. This costs a second read of dout and inp (the dinp kernel read them once);
// fusing the two would need per-block column accumulators of 2 C floats per warp, and
// the unfused form is the one that reads clearly.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/cuda/column_sums.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;  // as kernels/cpu/layernorm.cpp

constexpr int kRowWarps = 8;  // rows per block in the row kernels: one warp each
constexpr int kRowThreads = 32 * kRowWarps;

constexpr int kRowsPerChunk = 64;       // rows one block of the dw/db kernel sums
constexpr int kChunkWarps = kSumLanes;  // threads per column in that block: each takes every 8th row

// ---- forward: one warp per row --------------------------------------------------------
// No __restrict__: out may be inp (in place); each lane reads its packs before it writes
// them and no lane touches another's.

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b,
                             int N, int C, bool vec) {
  constexpr int K = kPack<T>;
  constexpr int kStride = 32 * K;  // elements between one lane's packs
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowWarps + threadIdx.x / 32;
  if (row >= N) return;  // the same for the whole warp: the shuffles below see 32 lanes
  const T* x = inp + size_t(row) * C;
  T* o = out + size_t(row) * C;

  // Sweep 1: the mean. Elements past C load as 0 and add nothing.
  float sum = 0.0f;
  for (int c0 = lane * K; c0 < C; c0 += kStride) {
    float v[K];
    load_floats(v, x, c0, C, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) sum += v[k];
  }
  const float m = warp_sum(sum) / float(C);

  // Sweep 2: the variance about the mean; the padding past C must not add m^2.
  float squares = 0.0f;
  for (int c0 = lane * K; c0 < C; c0 += kStride) {
    float v[K];
    load_floats(v, x, c0, C, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float d = c0 + k < C ? v[k] - m : 0.0f;
      squares += d * d;
    }
  }
  const float s = 1.0f / sqrtf(warp_sum(squares) / float(C) + kLayerNormEps);

  // Sweep 3: normalise, scale and shift.
  for (int c0 = lane * K; c0 < C; c0 += kStride) {
    float v[K], wk[K], bk[K];
    load_floats(v, x, c0, C, vec);
    load_floats(wk, w, c0, C, vec);
    load_floats(bk, b, c0, C, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = (v[k] - m) * s * wk[k] + bk[k];
    store_floats(o, v, c0, C, vec);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// ---- backward: dinp, one warp per row -------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp, const T* w, const float* mean,
                                    const float* rstd, int N, int C, bool vec) {
  constexpr int K = kPack<T>;
  constexpr int kStride = 32 * K;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowWarps + threadIdx.x / 32;
  if (row >= N) return;  // whole warps only
  const T* x = inp + size_t(row) * C;
  const T* dy = dout + size_t(row) * C;
  T* dx = dinp + size_t(row) * C;
  const float m = mean[row], s = rstd[row];

  // Sweep 1: mean(g) and mean(g xhat). Past C, dout and w load as 0, so g = 0 adds nothing.
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (int c0 = lane * K; c0 < C; c0 += kStride) {
    float d[K], v[K], wk[K];
    load_floats(d, dy, c0, C, vec);
    load_floats(v, x, c0, C, vec);
    load_floats(wk, w, c0, C, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float g = d[k] * wk[k];
      sum_g += g;
      sum_g_xhat += g * (v[k] - m) * s;
    }
  }
  const float mean_g = warp_sum(sum_g) / float(C);
  const float mean_g_xhat = warp_sum(sum_g_xhat) / float(C);

  // Sweep 2: dinp += rstd (g - mean(g) - xhat mean(g xhat)).
  for (int c0 = lane * K; c0 < C; c0 += kStride) {
    float d[K], v[K], wk[K], acc[K];
    load_floats(d, dy, c0, C, vec);
    load_floats(v, x, c0, C, vec);
    load_floats(wk, w, c0, C, vec);
    load_floats(acc, dx, c0, C, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] += s * (d[k] * wk[k] - mean_g - (v[k] - m) * s * mean_g_xhat);
    store_floats(dx, acc, c0, C, vec);
  }
}

// ---- backward: dw and db, per-chunk partial sums -----------------------------------------

// Block (32, kChunkWarps): blockIdx.x is the chunk, rows [kRowsPerChunk chunk, ...),
// blockIdx.y a tile of 32 packs of columns; lane x owns columns [c0, c0 + K). Thread
// (x, y) sums rows r0 + y, r0 + y + kChunkWarps, ... in order; then warp 0 adds the
// kChunkWarps sums of its columns, y in order, and writes its K columns of row `chunk`
// of the partials.
// vec also covers the partials: their rows are C floats long from a 16-byte aligned
// base, so with C % K == 0 every row starts aligned.
template <class T>
__global__ void __launch_bounds__(32 * kChunkWarps)
    layernorm_param_partials_kernel(float* __restrict__ partial_dw, float* __restrict__ partial_db,
                                    const T* __restrict__ dout, const T* __restrict__ inp,
                                    const float* __restrict__ mean, const float* __restrict__ rstd,
                                    int N, int C, bool vec) {
  constexpr int K = kPack<T>;
  const int lane = threadIdx.x, y = threadIdx.y;
  const int c0 = (blockIdx.y * 32 + lane) * K;
  const int chunk = blockIdx.x;
  const int row_end = min((chunk + 1) * kRowsPerChunk, N);

  float dw[K] = {}, db[K] = {};
  if (c0 < C) {
    for (int r = chunk * kRowsPerChunk + y; r < row_end; r += kChunkWarps) {
      float d[K], v[K];
      load_floats(d, dout + size_t(r) * C, c0, C, vec);
      load_floats(v, inp + size_t(r) * C, c0, C, vec);
      const float m = mean[r], s = rstd[r];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        dw[k] += d[k] * (v[k] - m) * s;
        db[k] += d[k];
      }
    }
  }

  // [y][k][lane]: consecutive lanes hit consecutive banks.
  __shared__ float shared_dw[kChunkWarps][K][32];
  __shared__ float shared_db[kChunkWarps][K][32];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    shared_dw[y][k][lane] = dw[k];
    shared_db[y][k][lane] = db[k];
  }
  __syncthreads();
  if (y != 0 || c0 >= C) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    for (int j = 1; j < kChunkWarps; ++j) {  // onto warp 0's own sums, in warp order
      dw[k] += shared_dw[j][k][lane];
      db[k] += shared_db[j][k][lane];
    }
  }
  store_floats(partial_dw + size_t(chunk) * C, dw, c0, C, vec);
  store_floats(partial_db + size_t(chunk) * C, db, c0, C, vec);
}

// ---- host side ----------------------------------------------------------------------

void check_shape(const char* fn, int N, int C) {
  if (N < 1)
    throw std::invalid_argument(std::string(fn) + ": N = " + std::to_string(N) +
                                " (needs at least one row)");
  if (C < 1)
    throw std::invalid_argument(std::string(fn) + ": C = " + std::to_string(C) +
                                " (needs at least one channel)");
}

ScratchBuffer partials_scratch;  // kernels/cuda/scratch.h

}  // namespace

template <class A>
void layernorm_forward(A* out, float* mean, float* rstd, const A* inp, const A* w, const A* b, int N,
                       int C) {
  constexpr const char* fn = "layernorm_forward";
  check_shape(fn, N, C);
  require_pointer(out, fn, "out");
  require_pointer(mean, fn, "mean");
  require_pointer(rstd, fn, "rstd");
  require_pointer(inp, fn, "inp");
  require_pointer(w, fn, "w");
  require_pointer(b, fn, "b");
  using T = DeviceType<A>;
  // 16-byte accesses need every row to start aligned: aligned bases and C % K == 0.
  const bool vec = C % kPack<T> == 0 && all_aligned16(out, inp, w, b);
  layernorm_forward_kernel<T><<<ceil_div(N, kRowWarps), kRowThreads>>>(
      device_ptr(out), mean, rstd, device_ptr(inp), device_ptr(w), device_ptr(b), N, C, vec);
  GPT_CUDA_CHECK_LAUNCH();
}

template <class A>
void layernorm_backward(A* dinp, float* dw, float* db, const A* dout, const A* inp, const A* w,
                        const float* mean, const float* rstd, int N, int C) {
  constexpr const char* fn = "layernorm_backward";
  check_shape(fn, N, C);
  // Either half may be left out (a zero-bubble schedule runs them apart): dinp null skips
  // the input gradient, dw and db null skip the weight gradients.
  if (!dinp && !dw && !db) throw std::invalid_argument(std::string(fn) + ": nothing to compute");
  if (!dw != !db) throw std::invalid_argument(std::string(fn) + ": dw and db go together");
  require_pointer(dout, fn, "dout");
  require_pointer(inp, fn, "inp");
  require_pointer(w, fn, "w");
  require_pointer(mean, fn, "mean");
  require_pointer(rstd, fn, "rstd");
  using T = DeviceType<A>;
  constexpr int K = kPack<T>;
  const unsigned column_tiles = ceil_div(C, 32L * K);
  if (column_tiles > 65535)  // gridDim.y's limit
    throw std::invalid_argument(std::string(fn) + ": C = " + std::to_string(C) + " is too large");

  if (dinp) {
    const bool vec = C % K == 0 && all_aligned16(dinp, dout, inp, w);
    layernorm_backward_input_kernel<T><<<ceil_div(N, kRowWarps), kRowThreads>>>(
        device_ptr(dinp), device_ptr(dout), device_ptr(inp), device_ptr(w), mean, rstd, N, C, vec);
    GPT_CUDA_CHECK_LAUNCH();
  }
  if (!dw) return;

  // Partials: chunks x C for dw, then chunks x C for db, in one scratch buffer (256-byte
  // aligned, scratch.h; the db half is aligned whenever C % K == 0, the only case vec is set).
  const int chunks = int(ceil_div(N, kRowsPerChunk));
  float* partial_dw = partials_scratch.as<float>(2 * size_t(chunks) * C);
  float* partial_db = partial_dw + size_t(chunks) * C;
  const bool vec_partials = C % K == 0 && all_aligned16(dout, inp);
  layernorm_param_partials_kernel<T><<<dim3(unsigned(chunks), column_tiles), dim3(32, kChunkWarps)>>>(
      partial_dw, partial_db, device_ptr(dout), device_ptr(inp), mean, rstd, N, C, vec_partials);
  GPT_CUDA_CHECK_LAUNCH();
  finish_column_sums(ColumnSums{.sum = {dw, db}, .partials = {partial_dw, partial_db}, .count = 2}, chunks, C);
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*,
                                       int, int);
template void layernorm_forward<gpt::bf16>(gpt::bf16*, float*, float*, const gpt::bf16*, const gpt::bf16*,
                                           const gpt::bf16*, int, int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, int, int);
template void layernorm_backward<gpt::bf16>(gpt::bf16*, float*, float*, const gpt::bf16*, const gpt::bf16*,
                                            const gpt::bf16*, const float*, const float*, int, int);

}  // namespace gpt::cuda
