/// @file
/// Split-K for GEMM v5: how many parts of K to give an output tile, when there are too
/// few tiles to fill the GPU.
///
/// A persistent GEMM gives each CTA whole output tiles. The weight gradients of training
/// have small outputs and a long K (dW = dout^T . inp: 768 x 768 over K = 16384 tokens
/// is 18 tiles of 128 x 256 for 132 SMs), so most SMs idle while a few walk 256 k-blocks
/// each. Split-K cuts K into `splits` ranges; a work unit is one (tile, range), the units
/// fill the SMs, each writes its fp32 partial tile to a workspace, and a second kernel
/// adds the partials in range order (the same bits every run) and applies the epilogue:
///
///   C = (accumulate ? C : 0) + (P_0 + P_1 + ... + P_{s-1}) + bias,   P_r = sum over k in range r
///
/// The plan minimises an estimate of the time, in k-blocks of one CTA:
///
///   cost(s) = waves(s) * ceil(k_blocks / s)  +  kPartialCost * s * tiles / sms
///   waves(s) = ceil(tiles * s / sms)
///
/// The first term is the K loop of the slowest SM; the second the partial tiles, written
/// and read back once each by the reduction, spread over the SMs. One partial tile of
/// 128 x 256 fp32 is 128 KB written and 128 KB read; one k-block loads 48 KB of operands
/// (mostly from L2, the partials from DRAM), so a partial costs about kPartialCost = 6
/// k-blocks. That constant is an estimate to be measured (bench_gemm's dW rows), not a
/// measurement. A split leaves at least kMinKBlocksPerSplit k-blocks per unit, so the
/// pipeline fill (kStages k-blocks) stays a small part of each unit.
/// Host only, no CUDA: the CPU tests check the plan.
#pragma once

namespace gpt::cuda {

/// How GEMM v5 divides K: `splits` ranges of `k_blocks_per_split` k-blocks (the last may
/// be shorter, none is empty).
struct SplitK {
  int splits = 1;              ///< ranges of K (1: no split)
  int k_blocks_per_split = 0;  ///< k-blocks in each range but the last (all of K when 1)
};

inline constexpr int kSplitKTileM = 128;       ///< v5's output tile: rows
inline constexpr int kSplitKTileN = 256;       ///< v5's output tile: columns
inline constexpr int kSplitKBlock = 64;        ///< v5's k-block: k per pipeline stage
inline constexpr int kMaxSplitK = 16;          ///< at most this many ranges
inline constexpr int kMinKBlocksPerSplit = 8;  ///< at least this many k-blocks per range
inline constexpr double kPartialCost = 6.0;    ///< one partial tile, in k-blocks (above)

/// The estimated time (above) of `splits` ranges of `per` k-blocks over `tiles` tiles.
inline double split_k_cost(long long tiles, int splits, int per, int sms) {
  const long long units = tiles * splits;
  const long long waves = (units + sms - 1) / sms;
  const double partials = splits > 1 ? kPartialCost * double(units) / sms : 0.0;
  return double(waves) * per + partials;
}

/// The plan for `tiles` output tiles, a K of `k_blocks` k-blocks (>= 1), on `sms` SMs
/// (>= 1). Ties go to fewer ranges.
inline SplitK plan_split_k(long long tiles, int k_blocks, int sms) {
  SplitK best{1, k_blocks};
  double best_cost = split_k_cost(tiles, 1, k_blocks, sms);
  for (int s = 2; s <= kMaxSplitK; ++s) {
    const int per = (k_blocks + s - 1) / s;
    if (per < kMinKBlocksPerSplit) break;
    if ((k_blocks + per - 1) / per != s) continue;  // s ranges of `per` leave one empty
    const double cost = split_k_cost(tiles, s, per, sms);
    if (cost < best_cost) {
      best = {s, per};
      best_cost = cost;
    }
  }
  return best;
}

/// The plan for v5's product of an M x N output over K, on `sms` SMs.
inline SplitK plan_split_k_for(int M, int N, int K, int sms) {
  const long long tiles = (long long)((M + kSplitKTileM - 1) / kSplitKTileM) * ((N + kSplitKTileN - 1) / kSplitKTileN);
  return plan_split_k(tiles, (K + kSplitKBlock - 1) / kSplitKBlock, sms);
}

}  // namespace gpt::cuda
