// How GEMM v5 divides its work (kernels/cuda/gemm/work_order.h), on the CPU:
//  * the split-K plan cuts K into non-empty ranges that cover it once, splits only where
//    its own estimate says the split is faster, and on an H200's 132 SMs splits the weight
//    gradients of GPT-2 124M (too few tiles for the SMs) and none of the products that
//    already fill them;
//  * the persistent walk: the grid's CTAs, each taking units b, b + g, ... through
//    WorkOrder::unit as the kernel's producer and consumers do, cover every (tile, k-block)
//    of the product exactly once, with every tile coordinate inside the output.
// The GPU test (test_gemm_gpu.cpp, "split K") runs split shapes against double.
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/cuda/gemm/work_order.h"

using gpt::cuda::plan_split_k;
using gpt::cuda::split_k_cost;
using gpt::cuda::SplitK;
using gpt::cuda::v5_work_order;

TEST_CASE("split-K plans cover K with non-empty ranges and never estimate a loss", "[gemm_work_order]") {
  for (int sms : {1, 16, 114, 132})
    for (long long tiles : {1LL, 2LL, 7LL, 18LL, 54LL, 72LL, 131LL, 132LL, 133LL, 400LL, 1179LL})
      for (int k_blocks : {1, 7, 8, 12, 15, 16, 17, 48, 63, 64, 100, 256, 1000}) {
        const SplitK plan = plan_split_k(tiles, k_blocks, sms);
        INFO("sms " << sms << ", tiles " << tiles << ", k_blocks " << k_blocks << ": " << plan.splits << " x "
                    << plan.k_blocks_per_split);
        REQUIRE(plan.splits >= 1);
        REQUIRE(plan.splits <= gpt::cuda::kMaxSplitK);
        // Ranges [r per, min((r + 1) per, k_blocks)): all covered, the last one not empty.
        CHECK(long(plan.splits) * plan.k_blocks_per_split >= k_blocks);
        CHECK(long(plan.splits - 1) * plan.k_blocks_per_split < k_blocks);
        if (plan.splits > 1) {
          CHECK(plan.k_blocks_per_split >= gpt::cuda::kMinKBlocksPerSplit);
          CHECK(split_k_cost(tiles, plan.splits, plan.k_blocks_per_split, sms) <
                split_k_cost(tiles, 1, k_blocks, sms));
        } else {
          CHECK(plan.k_blocks_per_split == k_blocks);
        }
      }
}

TEST_CASE("split-K on GPT-2 124M's products at 16384 tokens, 132 SMs", "[gemm_work_order]") {
  constexpr int sms = 132, tokens = 16384;
  // The weight gradients (M = OC, N = C, K = tokens): 18, 54, 72 and 72 tiles for 132 SMs,
  // 256 k-blocks each.
  CHECK(v5_work_order(768, 768, tokens, sms, true).splits == 7);    // attproj.dW: 126 units, 1 wave
  CHECK(v5_work_order(768, 768, tokens, sms, false).splits == 1);   // off the default stream: whole
  CHECK(v5_work_order(2304, 768, tokens, sms, true).splits == 7);   // qkv.dW: 378 units, 3 waves
  CHECK(v5_work_order(3072, 768, tokens, sms, true).splits == 7);   // fc.dW: 504 units, 4 waves
  CHECK(v5_work_order(768, 3072, tokens, sms, true).splits == 7);   // fcproj.dW
  CHECK(v5_work_order(50304, 768, tokens, sms, true).splits == 1);  // lmhead.dW: 1179 tiles fill the SMs
  // The forward and input-gradient products: many tiles, K of 768 or 3072.
  CHECK(v5_work_order(tokens, 2304, 768, sms, true).splits == 1);
  CHECK(v5_work_order(tokens, 768, 3072, sms, true).splits == 1);
  CHECK(v5_work_order(tokens, 50304, 768, sms, true).splits == 1);
  CHECK(v5_work_order(4096, 4096, 4096, sms, true).splits == 1);
  // Ranges of at least kMinKBlocksPerSplit k-blocks (the last may be shorter), however few
  // the tiles: 14 k-blocks stay whole, 15 split into 8 + 7.
  CHECK(v5_work_order(64, 64, 14 * 64, sms, true).splits == 1);
  CHECK(v5_work_order(64, 64, 15 * 64, sms, true).splits == 2);
}

TEST_CASE("the persistent walk covers every (tile, k-block) of the product once", "[gemm_work_order]") {
  struct Shape {
    int M, N, K, sms;
  };
  // Ragged edges, a last range shorter than the others, more units than CTAs and fewer,
  // and the GPT-2 shapes that split, on 132 SMs and on a few.
  const Shape shapes[] = {{200, 129, 4000, 132}, {65, 300, 2500, 132}, {7, 520, 1100, 132},
                          {768, 768, 16384, 132}, {3072, 768, 16384, 132}, {2304, 768, 16384, 7},
                          {1000, 1000, 300, 132}, {128, 256, 64, 1},  {1, 1, 1, 132}};
  for (const Shape& s : shapes) {
    const gpt::cuda::V5WorkOrder order = v5_work_order(s.M, s.N, s.K, s.sms, true);
    const int tiles_m = order.tiles.tiles_m, tiles_n = order.tiles.tiles_n, k_blocks = order.k_blocks;
    CHECK(tiles_m * gpt::cuda::kSplitKTileM >= s.M);
    CHECK((tiles_m - 1) * gpt::cuda::kSplitKTileM < s.M);
    CHECK(tiles_n * gpt::cuda::kSplitKTileN >= s.N);
    CHECK((tiles_n - 1) * gpt::cuda::kSplitKTileN < s.N);
    CHECK(k_blocks * gpt::cuda::kSplitKBlock >= s.K);
    CHECK((k_blocks - 1) * gpt::cuda::kSplitKBlock < s.K);
    INFO("M=" << s.M << " N=" << s.N << " K=" << s.K << " sms " << s.sms << ": " << order.splits << " ranges");
    const int grid = order.count() < s.sms ? order.count() : s.sms;  // as the launch
    std::vector<int> seen(size_t(tiles_m) * tiles_n * k_blocks, 0);
    bool inside = true, nonempty = true;
    for (int cta = 0; cta < grid; ++cta)
      for (int u = cta; u < order.count(); u += grid) {
        int tile_m = -1, tile_n = -1, split = -1, kb0 = 0, kb1 = 0;
        order.unit(u, tile_m, tile_n, split, kb0, kb1);
        inside = inside && tile_m >= 0 && tile_m < tiles_m && tile_n >= 0 && tile_n < tiles_n && split >= 0 &&
                 split < order.splits && kb0 >= 0 && kb1 <= k_blocks;
        nonempty = nonempty && kb1 > kb0;
        if (!inside) break;
        for (int kb = kb0; kb < kb1; ++kb) ++seen[(size_t(tile_m) * tiles_n + tile_n) * k_blocks + kb];
      }
    CHECK(inside);
    CHECK(nonempty);
    size_t wrong = 0;
    for (int count : seen) wrong += count != 1;
    CHECK(wrong == 0);
  }
}
