// A rank's pipeline chunks sharing one pool of block activations (ModelSlice::block_pool,
// common/block_pool.h) against each keeping its own per slot: the same bits in every loss
// and weight gradient, the pool's bytes counted by its owner and not by the chunks, every
// set given back after the backwards, and a pool too small for the micro-batches in
// flight, of other shapes or under full recompute refused.
#include <catch2/catch.hpp>

#include <vector>

#include "common/gpt2.h"
#include "tests/model/model_fixture.h"
#include "tests/ops/gradcheck.h"

using namespace gpt;
using gpt::test::kBatch;
using gpt::test::kInFlight;
using gpt::test::kSeqLen;
using gpt::test::Rng;
using gpt::test::same_bits;
using gpt::test::stage_of;
using gpt::test::stage_slice;
using gpt::test::tiny_model;
using gpt::test::two_stage_run;

// Two chunks of one rank (chunk 0: layers 0-1 with the embedding, chunk 1: layer 2 with
// the head) run every forward first (two_stage_run), so 2 kInFlight micro-batches are in
// flight at once.
TEST_CASE("model: a rank's chunks can share one pool of block activations", "[model]") {
  const ModelConfig m = tiny_model();
  for (const Recompute mode : {Recompute::None, Recompute::Selective}) {
    INFO(recompute_name(mode));
    ModelSlice<float> first_slice = stage_slice<float>(LayerRange{0, 2}, mode);
    BlockActivations<float> working;
    if (mode != Recompute::None) {
      working = GPT2<float>::working_block_for(m, kBatch, kSeqLen, Device::CPU, first_slice);
      first_slice.working_block = &working;
    }
    ModelSlice<float> last_slice = first_slice;
    last_slice.layers = LayerRange{2, 3};
    auto make_chunk = [&](const ModelSlice<float>& slice) { return stage_of(m, slice); };
    GPT2<float> own_first = make_chunk(first_slice), own_last = make_chunk(last_slice);
    // As many sets as micro-batches in flight on the rank at once, of the most layers a chunk runs.
    BlockPool<float> pool = GPT2<float>::block_pool_for(m, kBatch, kSeqLen, Device::CPU, first_slice, 2 * kInFlight, 2);
    first_slice.block_pool = last_slice.block_pool = &pool;
    GPT2<float> pooled_first = make_chunk(first_slice), pooled_last = make_chunk(last_slice);
    Rng a(5), b(5);
    const std::vector<float> own = two_stage_run(own_first, own_last, a);
    const std::vector<float> pooled = two_stage_run(pooled_first, pooled_last, b);
    REQUIRE(own.size() == pooled.size());
    CHECK(same_bits(own.data(), pooled.data(), own.size()));
    CHECK(pool.held() == 0);  // every backward gave its set back
    // A pooled chunk does not count its slots' blocks; the pool's owner counts the pool.
    const size_t block = pool.set(0)[0].bytes();
    CHECK(own_first.activation_bytes() - pooled_first.activation_bytes() == size_t(kInFlight) * 2 * block);
    CHECK(own_last.activation_bytes() - pooled_last.activation_bytes() == size_t(kInFlight) * 1 * block);
    CHECK(pool.bytes() == size_t(2 * kInFlight) * 2 * block);

    // An evaluation's forward keeps its set until told (the send of its output is done).
    std::vector<int32_t> tokens(size_t(kBatch) * kSeqLen, 1);
    pooled_first.forward_micro(0, tokens.data(), tokens.data(), /*for_backward=*/false);
    CHECK(pool.held() == 1);
    pooled_first.release_blocks(0);
    CHECK(pool.held() == 0);

    // Too few sets for the micro-batches in flight: the forward that finds none is refused.
    BlockPool<float> small =
        GPT2<float>::block_pool_for(m, kBatch, kSeqLen, Device::CPU, first_slice, 2 * kInFlight - 1, 2);
    first_slice.block_pool = last_slice.block_pool = &small;
    GPT2<float> small_first = make_chunk(first_slice), small_last = make_chunk(last_slice);
    Rng c(5);
    REQUIRE_THROWS_WITH(two_stage_run(small_first, small_last, c), Catch::Contains("sets are held"));
    // Sets of other shapes (another micro-batch size, fewer layers than the chunk runs)
    // are refused.
    BlockPool<float> other = GPT2<float>::block_pool_for(m, 2 * kBatch, kSeqLen, Device::CPU, first_slice, 1, 2);
    first_slice.block_pool = &other;
    REQUIRE_THROWS_WITH(make_chunk(first_slice), Catch::Contains("not the one this model's slice needs"));
    BlockPool<float> shallow = GPT2<float>::block_pool_for(m, kBatch, kSeqLen, Device::CPU, first_slice, 1, 1);
    first_slice.block_pool = &shallow;
    REQUIRE_THROWS_WITH(make_chunk(first_slice), Catch::Contains("not the one this model's slice needs"));
  }
  // Full recompute keeps no block's activations: no pool for it.
  const ModelSlice<float> full = stage_slice<float>(LayerRange{0, 2}, Recompute::Full);
  REQUIRE_THROWS_WITH(GPT2<float>::block_pool_for(m, kBatch, kSeqLen, Device::CPU, full, 1, 2),
                      Catch::Contains("full recompute"));
}
