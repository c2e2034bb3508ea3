// GEMM v5's split-K plan (kernels/cuda/gemm/split_k.h), on the CPU: every plan cuts K into
// non-empty ranges that cover it once, splits only where its own estimate says the split
// is faster, and on an H200's 132 SMs splits the weight gradients of GPT-2 124M (too few
// tiles for the SMs) and none of the products that already fill them. The GPU test
// (test_gemm_gpu.cpp, "split K") runs the split shapes against double.
#include <catch2/catch.hpp>

#include "kernels/cuda/gemm/split_k.h"

using gpt::cuda::plan_split_k;
using gpt::cuda::plan_split_k_for;
using gpt::cuda::split_k_cost;
using gpt::cuda::SplitK;

TEST_CASE("split-K plans cover K with non-empty ranges and never estimate a loss", "[split_k]") {
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

TEST_CASE("split-K on GPT-2 124M's products at 16384 tokens, 132 SMs", "[split_k]") {
  constexpr int sms = 132, tokens = 16384;
  // The weight gradients (M = OC, N = C, K = tokens): 18, 54, 72 and 72 tiles for 132 SMs,
  // 256 k-blocks each.
  CHECK(plan_split_k_for(768, 768, tokens, sms).splits == 7);    // attproj.dW: 126 units, 1 wave
  CHECK(plan_split_k_for(2304, 768, tokens, sms).splits == 7);   // qkv.dW: 378 units, 3 waves
  CHECK(plan_split_k_for(3072, 768, tokens, sms).splits == 7);   // fc.dW: 504 units, 4 waves
  CHECK(plan_split_k_for(768, 3072, tokens, sms).splits == 7);   // fcproj.dW
  CHECK(plan_split_k_for(50304, 768, tokens, sms).splits == 1);  // lmhead.dW: 1179 tiles fill the SMs
  // The forward and input-gradient products: many tiles, K of 768 or 3072.
  CHECK(plan_split_k_for(tokens, 2304, 768, sms).splits == 1);
  CHECK(plan_split_k_for(tokens, 768, 3072, sms).splits == 1);
  CHECK(plan_split_k_for(tokens, 50304, 768, sms).splits == 1);
  CHECK(plan_split_k_for(4096, 4096, 4096, sms).splits == 1);
  // Ranges of at least kMinKBlocksPerSplit k-blocks (the last may be shorter), however few
  // the tiles: 14 k-blocks stay whole, 15 split into 8 + 7.
  CHECK(plan_split_k_for(64, 64, 14 * 64, sms).splits == 1);
  CHECK(plan_split_k_for(64, 64, 15 * 64, sms).splits == 2);
}
