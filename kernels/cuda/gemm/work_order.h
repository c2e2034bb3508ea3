/// @file
/// How GEMM v5 divides its work among persistent CTAs: the grouped order of its output
/// tiles, and split K, how many parts of K to give a tile when there are too few tiles
/// to fill the GPU. Host and device code; the CPU tests check it (gemm_work_order).
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
#pragma once

// Compiled by nvcc for the kernel and by the host compiler for the CPU tests.
#if defined(__CUDACC__)
#define GPT_WORK_ORDER_FN __host__ __device__
#else
#define GPT_WORK_ORDER_FN
#endif

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

/// The order of a launch's output tiles (tiles_m x tiles_n of them). Tiles are numbered in
/// groups of kGroupRows tile rows: inside a group, consecutive numbers walk down a column
/// of tiles, then move one tile column right. The CTAs working at the same time then share
/// a few B column panels and kGroupRows A row panels in L2, instead of each reading a
/// different panel of both.
template <int kGroupRows>
struct GroupedTileOrder {
  int tiles_m;  ///< tiles down M
  int tiles_n;  ///< tiles across N
  /// How many tiles.
  GPT_WORK_ORDER_FN int count() const { return tiles_m * tiles_n; }
  /// The coordinates (tile row, tile column) of tile number `tile`.
  GPT_WORK_ORDER_FN void coords(int tile, int& tile_m, int& tile_n) const {
    const int tiles_per_group = kGroupRows * tiles_n;
    const int group = tile / tiles_per_group;
    const int first_m = group * kGroupRows;
    const int group_rows = tiles_m - first_m < kGroupRows ? tiles_m - first_m : kGroupRows;
    const int within = tile - group * tiles_per_group;
    tile_m = first_m + within % group_rows;
    tile_n = within / group_rows;
  }
};

/// The units of one launch: `splits` ranges of K for every tile. Unit u is range
/// u / tiles of tile u mod tiles, so the units running at once share a K range and,
/// through the grouped order, operand panels in L2. With one range this is the plain
/// persistent walk over tiles. CTA b of a grid of g takes units b, b + g, b + 2g, ...:
/// its producer and its consumers both walk them, through unit(), in the same order.
template <int kGroupRows>
struct WorkOrder {
  GroupedTileOrder<kGroupRows> tiles;  ///< the output tiles
  int splits;                          ///< ranges of K per tile (SplitK::splits)
  int k_blocks;                        ///< k-blocks of the whole K
  int k_blocks_per_split;              ///< k-blocks in every range but the last
  /// How many units.
  GPT_WORK_ORDER_FN int count() const { return tiles.count() * splits; }
  /// The tile of unit u, its range `split` and that range's k-blocks [kb0, kb1), never empty.
  GPT_WORK_ORDER_FN void unit(int u, int& tile_m, int& tile_n, int& split, int& kb0, int& kb1) const {
    const int n_tiles = tiles.count();
    split = u / n_tiles;
    tiles.coords(u - split * n_tiles, tile_m, tile_n);
    kb0 = split * k_blocks_per_split;
    kb1 = kb0 + k_blocks_per_split < k_blocks ? kb0 + k_blocks_per_split : k_blocks;
  }
};

inline constexpr int kV5GroupRows = 8;  ///< tile rows per group of v5's tile order
using V5WorkOrder = WorkOrder<kV5GroupRows>;  ///< v5's units

/// v5's work for an M x N output over K on `sms` SMs: its tiles, and K cut as
/// plan_split_k says when `may_split` (v5 splits only on the default stream), else whole.
inline V5WorkOrder v5_work_order(int M, int N, int K, int sms, bool may_split) {
  const GroupedTileOrder<kV5GroupRows> tiles{(M + kSplitKTileM - 1) / kSplitKTileM,
                                             (N + kSplitKTileN - 1) / kSplitKTileN};
  const int k_blocks = (K + kSplitKBlock - 1) / kSplitKBlock;
  const SplitK split = may_split ? plan_split_k(tiles.count(), k_blocks, sms) : SplitK{1, k_blocks};
  return {tiles, split.splits, k_blocks, split.k_blocks_per_split};
}

}  // namespace gpt::cuda

#undef GPT_WORK_ORDER_FN
