/// @file
/// Device helpers shared by the attention kernels: the shape check, the qkv / out index
/// arithmetic and tile loads (kernels/cuda/common.cuh has the project-wide ones).
///
/// Layout (the one the qkv GEMM writes, so no transposes are needed):
/// ```
///   qkv (B, T, 3C): position (b, t) is one row of 3C values: q | k | v, each C wide;
///                   head h occupies columns [h*hs, (h+1)*hs) of each part (hs = C/NH).
///   out (B, T, C):  head h of position (b, t) in columns [h*hs, (h+1)*hs).
///   per-row statistics (logsumexp, D) are (B, NH, T) fp32: index (b*NH + h)*T + t.
/// ```
#pragma once
#include "kernels/cuda/common.cuh"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace gpt::cuda {

/// The shapes every attention entry point accepts; throws std::invalid_argument naming
/// the problem, or returns the head size hs = C/NH. The flash kernels are compiled for
/// hs = 64 and 128 only; the naive version takes any hs up to 1024 (one thread per column).
inline int attention_head_size(const char* fn, int B, int T, int C, int NH, bool any_head_size) {
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument(std::string(fn) + ": " + why + " (B=" + std::to_string(B) +
                                " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                                " NH=" + std::to_string(NH) + ")");
  };
  if (B < 1 || T < 1 || NH < 1 || C < 1) bad("every size must be positive");
  if (C % NH != 0) bad("C must be a multiple of NH");
  const int hs = C / NH;
  if (!any_head_size && hs != 64 && hs != 128) bad("head size C/NH must be 64 or 128");
  if (any_head_size && hs > 1024) bad("head size C/NH must be at most 1024");
  if (long(B) * NH > 65535) bad("B*NH must fit the grid's y dimension (65535)");
  return hs;
}

// ---- device side ------------------------------------------------------------------

/// Where head h of position t in batch b starts, in qkv: part 0 = q, 1 = k, 2 = v.
/// ```
///   row (b, t) starts at (b*T + t) * 3C; the part adds part*C; the head adds h*hs.
/// ```
__device__ __forceinline__ size_t qkv_at(int b, int t, int part, int h, int T, int C, int hs) {
  return (size_t(b) * T + t) * (3 * size_t(C)) + size_t(part) * C + size_t(h) * hs;
}
/// Where head h of position t in batch b starts, in out / dout (B, T, C).
__device__ __forceinline__ size_t out_at(int b, int t, int h, int T, int C, int hs) {
  return (size_t(b) * T + t) * size_t(C) + size_t(h) * hs;
}

/// Copies `rows` rows of a head (hs = HS values each, row stride `src_stride` elements in
/// global memory) into shared memory as fp32, `dst_stride` floats apart; rows at or past
/// `valid_rows` are filled with zeros (the tail tile when T is not a multiple of the tile).
/// Consecutive threads take consecutive columns, so each row is read coalesced.
template <int HS, class T>
__device__ __forceinline__ void load_tile(float* dst, int dst_stride, const T* src, size_t src_stride,
                                          int rows, int valid_rows) {
  for (int i = threadIdx.x; i < rows * HS; i += blockDim.x) {
    const int r = i / HS, d = i % HS;
    dst[r * dst_stride + d] = r < valid_rows ? to_float(src[r * src_stride + d]) : 0.0f;
  }
}

// ---- the backward's row statistic D ---------------------------------------------

// Internal linkage: each file that launches it (v3, v4) compiles its own copy, so no
// kernel is defined in two objects.
namespace {

/// D_t = dy_t . y_t for every row of (B, NH, T), into dsum[(b*NH + h)*T + t]: the sum
/// sum_u P[t,u] dP[t,u] that the softmax's backward subtracts (dS = P (dP - D)), which
/// equals dy_t . (sum_u P[t,u] v_u) = dy_t . y_t. One warp per row; a lane reads two
/// neighbouring values at a time (hs is even: 64 or 128 for the flash kernels), and the
/// warp adds its lanes' partial sums.
template <class T>
__global__ void dsum_kernel(float* dsum, const T* dout, const T* out, long rows, int T_, int C, int NH) {
  const long row = (long(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // warp-uniform: blockDim is a multiple of 32
  const int hs = C / NH;
  const int bh = int(row / T_), t = int(row % T_), b = bh / NH, h = bh % NH;
  const size_t at = out_at(b, t, h, T_, C, hs);
  float D = 0.0f;
  for (int d = 2 * lane; d < hs; d += 64)
    D += to_float(dout[at + d]) * to_float(out[at + d]) + to_float(dout[at + d + 1]) * to_float(out[at + d + 1]);
  D = warp_sum(D);
  if (lane == 0) dsum[row] = D;
}

/// Launches dsum_kernel over the B*NH*T rows on `stream`.
template <class T>
void launch_dsum(float* dsum, const T* dout, const T* out, int B, int T_, int C, int NH, cudaStream_t stream) {
  const long rows = long(B) * NH * T_;
  dsum_kernel<T><<<ceil_div(rows * 32, 256), 256, 0, stream>>>(dsum, dout, out, rows, T_, C, NH);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

}  // namespace gpt::cuda
