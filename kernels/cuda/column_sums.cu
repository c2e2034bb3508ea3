// The second step of a deterministic column sum (column_sums.h): the chunks' partial sums
// of each column added into the sum, kSumLanes threads per column, in a fixed order.
#include "kernels/cuda/column_sums.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"

namespace gpt::cuda {
namespace {

// Block (32, kSumLanes) -> columns [32 blockIdx.x, + 32) of sum blockIdx.y. Thread (x, y)
// adds chunks y, y + kSumLanes, ... of its column in order; thread (x, 0) then adds the
// kSumLanes lane sums in lane order onto the column's sum. Consecutive x read
// consecutive columns (coalesced).
__global__ void __launch_bounds__(32 * kSumLanes) finish_column_sums_kernel(ColumnSums sums, int chunks, int C) {
  __shared__ float lane_sums[kSumLanes][32];
  const int x = int(threadIdx.x), y = int(threadIdx.y);
  const int c = int(blockIdx.x) * 32 + x;
  const float* partials = sums.partials[blockIdx.y];
  float lane_sum = 0.0f;
  if (c < C) {
#pragma unroll 4
    for (int j = y; j < chunks; j += kSumLanes) lane_sum += partials[size_t(j) * C + c];
  }
  lane_sums[y][x] = lane_sum;
  __syncthreads();
  if (y != 0 || c >= C) return;
  float total = lane_sums[0][x];
#pragma unroll
  for (int lane = 1; lane < kSumLanes; ++lane) total += lane_sums[lane][x];
  sums.sum[blockIdx.y][c] += total;
}

}  // namespace

void finish_column_sums(const ColumnSums& sums, int chunks, int C) {
  if (sums.count < 1 || sums.count > 2 || chunks < 1 || C < 1)
    throw std::invalid_argument("finish_column_sums: count=" + std::to_string(sums.count) + " chunks=" +
                                std::to_string(chunks) + " C=" + std::to_string(C) +
                                " (count 1 or 2, chunks and C at least 1)");
  for (int i = 0; i < sums.count; ++i)
    if (!sums.sum[i] || !sums.partials[i]) throw std::invalid_argument("finish_column_sums: a null pointer");
  finish_column_sums_kernel<<<dim3(ceil_div(C, 32), unsigned(sums.count)), dim3(32, kSumLanes)>>>(sums, chunks, C);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda
