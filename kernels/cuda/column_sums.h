/// @file
/// Column sums over many rows with the same bits on every run: the gradients of a bias
/// (dbias[c] += sum over rows of dout[r, c]) and of layernorm's w and b. Float atomics
/// would add the rows in whatever order the hardware picked; here the rows are cut into
/// fixed chunks and summed in two steps, each in a fixed order:
///
///   step 1, the caller's kernel:  partials[j, c] = the sum of column c over chunk j's rows
///   step 2, finish_column_sums:   sum[c] += the chunks' partials of column c, as kSumLanes
///                                 lane sums (lane y adds chunks y, y + kSumLanes, ... in
///                                 order), then the lane sums added in lane order
///
/// Step 1 fills the GPU with (chunks x column tiles) blocks however few columns there
/// are; step 2 reads only chunks x C floats. Both orders depend on the shape alone, never
/// on the device or the launch, so a run is reproducible bit for bit.
#pragma once

namespace gpt::cuda {

/// Threads per column in the blocks of both steps: thread (x, y) of a block takes every
/// kSumLanes-th row (step 1) or chunk (step 2) of column x.
inline constexpr int kSumLanes = 8;

/// Up to two column sums finished by one launch, each sum[c] += the chunks x C partials
/// (row-major, chunk j's row at partials + j C). count is 1 or 2.
struct ColumnSums {
  float* sum[2] = {nullptr, nullptr};             ///< the sums added into: C floats each
  const float* partials[2] = {nullptr, nullptr};  ///< their partials: chunks x C floats each
  int count = 1;                                  ///< how many of the two are given: 1 or 2
};

/// Step 2 above, on the default stream: sums.sum[i][c] += the partials of column c, for
/// i < sums.count and c < C.
void finish_column_sums(const ColumnSums& sums, int chunks, int C);

}  // namespace gpt::cuda
