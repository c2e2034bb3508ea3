// GEMM v2: shared-memory tiling. What it adds to v1: operands are read from global
// memory once per block, not once per thread.
//
// A block of T x T threads (T = 32) owns a T x T tile of C. It walks k in steps of T:
// at each step the block copies a T x T tile of op(A) (rows m0.., columns k0..) and a
// T x T tile of op(B) (rows k0.., columns n0..) into shared memory, one element per
// thread, then every thread computes its T products from shared memory:
//
//             k0 .. k0+T-1                 n0 .. n0+T-1
//           +-------------+              +-------------+
//   m0..    |   As (TxT)  |   x   k0..   |   Bs (TxT)  |   ->  C tile (T x T)
//           +-------------+              +-------------+
//
// Reuse factor. v1 issues 2 global loads per FMA (one from A, one from B). Here a
// block loads 2 T^2 values per k-step and performs T^3 FMAs with them, so
//   global loads per FMA = 2 T^2 / T^3 = 2 / T = 1/16 for T = 32,
// each value fetched from global memory is used T = 32 times (by a whole row or
// column of the tile). Shared memory still serves 2 loads per FMA (As[ty][k] is one
// broadcast per warp, Bs[k][tx] one conflict-free row read), and that is v3's target:
// shared-memory bandwidth, not global, is now the limit.
//
// Coalescing for every layout. Which direction is contiguous in memory depends on the
// transpose flags: op(A) is contiguous along k when !trans_a and along m when trans_a
// (likewise op(B): along n when !trans_b, along k when trans_b). The loader assigns
// threadIdx.x to the contiguous direction, so a warp always reads 32 consecutive
// elements, and writes the tile in shared memory in the (row, k) / (k, column) order
// the compute loop wants. When that is a transposing write (column of the tile), the
// row stride T + 1 puts the 32 lanes in 32 different banks.
//
// Tails: tile elements past M, N or K are loaded as zero, so they add nothing, and
// outputs past M or N are not stored. Shared values are fp32 whatever the storage type.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm.h"

namespace gpt::cuda {
namespace {

constexpr int kTile = 32;          // T: the C tile is T x T, k advances by T
constexpr int kStride = kTile + 1;  // shared row stride: transposing writes hit distinct banks

// One element of a tile: element (row, col) of a matrix stored row-major with stride
// ld, or zero outside rows x cols (the tails).
template <class Tin>
__device__ __forceinline__ float load_or_zero(const Tin* p, int ld, int row, int col, int rows, int cols) {
  return (row < rows && col < cols) ? to_float(p[int64_t(row) * ld + col]) : 0.0f;
}

// tile[i][j] = op(X)[r0 + i][c0 + j] for i, j < T, where op(X) is X when !transposed
// (X stored rows x cols) and X^T otherwise (X stored cols x rows). Thread (tx, ty)
// loads with tx along the stored rows' contiguous direction.
template <class Tin>
__device__ __forceinline__ void load_tile(float (*tile)[kStride], const Tin* X, int ld, bool transposed,
                                          int r0, int c0, int rows, int cols) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  if (!transposed)  // op(X) = X is contiguous along its columns j: tx -> j
    tile[ty][tx] = load_or_zero(X, ld, r0 + ty, c0 + tx, rows, cols);
  else  // op(X)[i][j] = X[j][i] is contiguous along i: tx -> i (a transposing write)
    tile[tx][ty] = load_or_zero(X, ld, c0 + ty, r0 + tx, cols, rows);
}

template <class Tin, class Tout>
__device__ __forceinline__ void store_output(const GemmArgs<Tin, Tout>& a, int m, int n, float sum) {
  const int64_t at = int64_t(m) * a.ldc + n;
  float v = sum;
  if (a.accumulate) v += to_float(a.C[at]);
  if (a.bias) v += to_float(a.bias[n]);
  a.C[at] = from_float<Tout>(v);
  if (a.gelu_out) a.gelu_out[at] = from_float<Tout>(gelu(v));
}

template <class Tin, class Tout>
__global__ void __launch_bounds__(kTile * kTile) gemm_shared_kernel(GemmArgs<Tin, Tout> a, int tiles_n) {
  __shared__ float As[kTile][kStride];  // As[i][k]: op(A)[m0 + i][k0 + k]
  __shared__ float Bs[kTile][kStride];  // Bs[k][j]: op(B)[k0 + k][n0 + j]
  const int m0 = (blockIdx.x / tiles_n) * kTile, n0 = (blockIdx.x % tiles_n) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;  // this thread's output: C[m0 + ty][n0 + tx]

  float sum = 0.0f;
  for (int k0 = 0; k0 < a.K; k0 += kTile) {
    load_tile(As, a.A, a.lda, a.trans_a, m0, k0, a.M, a.K);
    load_tile(Bs, a.B, a.ldb, a.trans_b, k0, n0, a.K, a.N);
    __syncthreads();  // the tiles are complete
    for (int k = 0; k < kTile; ++k) sum = fmaf(As[ty][k], Bs[k][tx], sum);
    __syncthreads();  // everyone is done reading before the next tiles overwrite them
  }
  const int m = m0 + ty, n = n0 + tx;
  if (m < a.M && n < a.N) store_output(a, m, n, sum);
}

}  // namespace

// The arguments were validated by gemm() (gemm.cu).
template <class Tin, class Tout>
void gemm_v2(const GemmArgs<Tin, Tout>& args, cudaStream_t stream) {
  const unsigned tiles_n = ceil_div(args.N, kTile), tiles_m = ceil_div(args.M, kTile);
  const dim3 block(kTile, kTile);
  gemm_shared_kernel<Tin, Tout><<<tiles_m * tiles_n, block, 0, stream>>>(args, int(tiles_n));
  GPT_CUDA_CHECK_LAUNCH();
}

template void gemm_v2<float, float>(const GemmArgs<float, float>&, cudaStream_t);
template void gemm_v2<__nv_bfloat16, __nv_bfloat16>(const GemmArgs<__nv_bfloat16, __nv_bfloat16>&, cudaStream_t);
template void gemm_v2<__nv_bfloat16, float>(const GemmArgs<__nv_bfloat16, float>&, cudaStream_t);

}  // namespace gpt::cuda
