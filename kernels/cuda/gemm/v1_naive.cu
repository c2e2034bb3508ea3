// GEMM v1: naive. One thread computes one output element C[m,n] by walking k from 0
// to K-1 and reading both operands straight from global memory:
//
//   C[m,n] = (accumulate ? C[m,n] : 0) + sum_k op(A)[m,k] op(B)[k,n] + bias[n]
//
// Cost: every fused multiply-add (FMA) needs two global loads, one from A and one from
// B, so the kernel moves 2 * M * N * K values for 2 * M * N * K flops. Caches catch
// part of that (a warp's 32 threads share one row m and read the same A value), but
// the arithmetic intensity stays near 1 flop per value loaded (0.25 flop per byte in
// fp32, 0.5 in bf16): this version is bound by
// memory bandwidth, tens of times below the device's compute peak. It is the
// correctness baseline every later rung is compared with, and the smallest complete
// statement of the product: layouts, tails (any M, N, K; no tile to overhang) and
// the epilogue (accumulate, bias, GELU) are all in ~20 lines.
//
// Threads: a block of 32 x 8 threads covers 8 rows x 32 columns of C; threadIdx.x runs
// along n, so a warp stores 32 consecutive elements of one row of C (one coalesced
// store) and, for the !trans_b layouts, reads 32 consecutive elements of a row of B.
// The grid is one-dimensional (blocks numbered row of tiles by row of tiles), so M and
// N are limited only by the 2^31 - 1 blocks of gridDim.x, not by gridDim.y's 65535.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm.h"

namespace gpt::cuda {
namespace {

constexpr int kTileN = 32;  // columns per block = threads along x
constexpr int kTileM = 8;   // rows per block = threads along y

// op(A)[m,k] and op(B)[k,n] in the row-major storage of gemm.h. Offsets are 64-bit:
// rows x ld can pass 2^31 elements (e.g. 65536 tokens x a 50304-column vocabulary).
template <class Tin>
__device__ __forceinline__ float op_a(const Tin* A, int lda, bool trans_a, int m, int k) {
  return to_float(trans_a ? A[int64_t(k) * lda + m] : A[int64_t(m) * lda + k]);
}
template <class Tin>
__device__ __forceinline__ float op_b(const Tin* B, int ldb, bool trans_b, int k, int n) {
  return to_float(trans_b ? B[int64_t(n) * ldb + k] : B[int64_t(k) * ldb + n]);
}

// The epilogue, shared in spirit by every rung: the fp32 sum, plus the old C when
// accumulating, plus the bias, is the pre-activation; it is rounded once into C and,
// when asked, its GELU (computed from the unrounded fp32 value) into gelu_out.
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
__global__ void __launch_bounds__(kTileN * kTileM) gemm_naive_kernel(GemmArgs<Tin, Tout> a, int tiles_n) {
  const int n = (blockIdx.x % tiles_n) * kTileN + threadIdx.x;
  const int m = (blockIdx.x / tiles_n) * kTileM + threadIdx.y;
  if (m >= a.M || n >= a.N) return;  // the tails of the last row / column of tiles
  float sum = 0.0f;
  for (int k = 0; k < a.K; ++k)
    sum = fmaf(op_a(a.A, a.lda, a.trans_a, m, k), op_b(a.B, a.ldb, a.trans_b, k, n), sum);
  store_output(a, m, n, sum);
}

}  // namespace

// The arguments were validated by gemm() (gemm.cu).
template <class Tin, class Tout>
void gemm_v1(const GemmArgs<Tin, Tout>& args, cudaStream_t stream) {
  const unsigned tiles_n = ceil_div(args.N, kTileN), tiles_m = ceil_div(args.M, kTileM);
  const dim3 block(kTileN, kTileM);
  gemm_naive_kernel<Tin, Tout><<<tiles_m * tiles_n, block, 0, stream>>>(args, int(tiles_n));
  GPT_CUDA_CHECK_LAUNCH();
}

template void gemm_v1<float, float>(const GemmArgs<float, float>&, cudaStream_t);
template void gemm_v1<__nv_bfloat16, __nv_bfloat16>(const GemmArgs<__nv_bfloat16, __nv_bfloat16>&, cudaStream_t);
template void gemm_v1<__nv_bfloat16, float>(const GemmArgs<__nv_bfloat16, float>&, cudaStream_t);

}  // namespace gpt::cuda
