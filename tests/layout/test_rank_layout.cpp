// Rank-local layouts (common/rank_layout.h), all ranks of a mesh in one process: for
// random tensor x pipeline meshes, the ranks' slices gathered reproduce the global
// buffer bit for bit, every element is counted exactly once, and each slice's
// initialisation is the single-device one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/gpt2_layout.h"
#include "common/optimizer.h"
#include "common/rank_layout.h"
#include "tests/layout/layouts.h"

using namespace gpt;
using gpt::test::random_mesh;

TEST_CASE("layout: random meshes gather back to the global buffer, each element counted once", "[layout]") {
  const ParamLayout global(gpt::test::layout_test_model());
  std::vector<float> whole(size_t(global.total()));
  global.init_range(1234, 0, global.total(), whole.data());
  std::mt19937 rng(77);
  for (int trial = 0; trial < 40; ++trial) {
    const int choices[] = {1, 2, 3, 4, 5, 6, 8};  // 7 ranks make no mesh of this model (7 heads? 7 layers?)
    const int ranks = choices[rng() % 7];
    const auto mesh = random_mesh(global, ranks, rng);
    INFO(ranks << " ranks: " << mesh.describe());
    REQUIRE_NOTHROW(check_counted_once(global, mesh.layouts));
    std::vector<float> gathered(size_t(global.total()), std::nanf(""));
    for (const RankLayout& r : mesh.layouts) {
      std::vector<float> local(size_t(r.total()));
      r.init(1234, local.data());  // the slice's own initialisation
      std::vector<float> taken(local.size());
      r.scatter(whole.data(), taken.data());
      CHECK(local == taken);  // equals the single-device values there
      r.gather(local.data(), gathered.data(), /*counted_only=*/true);
    }
    CHECK(std::equal(gathered.begin(), gathered.end(), whole.begin()));  // bit for bit (NaN fails)

    // The counted sums of squares add up to the whole buffer's: a replica counted once.
    double split = 0, all = 0;
    for (const RankLayout& r : mesh.layouts) {
      std::vector<float> local(size_t(r.total()));
      r.scatter(whole.data(), local.data());
      split += r.counted_sum_of_squares(gpt::Device::CPU, local.data());
    }
    for (float x : whole) all += double(x) * double(x);
    // double sums of the same ~6e4 terms in two orders: within n * eps64 relative.
    CHECK(std::fabs(split - all) <= double(whole.size()) * 1.2e-16 * all);
  }
}

TEST_CASE("layout: a tensor-parallel rank's slices have the shapes of its heads", "[layout]") {
  const ModelConfig m = gpt::test::layout_test_model();
  const ParamLayout global(m);
  const RankLayout r = RankLayout::tensor_parallel(global, 2, 1);
  const int64_t C = m.n_embd;
  CHECK(r.find("h.0.attn.c_attn.weight")->numel == 3 * (C / 2) * C);
  CHECK(r.find("h.0.attn.c_proj.weight")->numel == C * (C / 2));
  CHECK(r.find("h.0.mlp.c_fc.weight")->numel == 4 * C / 2 * C);
  CHECK(r.find("wte")->numel == m.padded_vocab() / 2 * C);
  CHECK(r.find("h.0.ln_1.weight")->counted == false);  // a replica: counted on rank 0
  CHECK(RankLayout::tensor_parallel(global, 2, 0).find("h.0.ln_1.weight")->counted == true);
  // rank 1's first K row is global row C + C/2 of c_attn
  const auto runs = r.runs();
  const ParamTensor& qkv = global.find("h.0.attn.c_attn.weight");
  const int64_t k_block_start = r.find("h.0.attn.c_attn.weight")->offset + (C / 2) * C;
  const auto it = std::find_if(runs.begin(), runs.end(), [&](const LayoutRun& x) { return x.local == k_block_start; });
  REQUIRE(it != runs.end());
  CHECK(it->global == qkv.offset + (C + C / 2) * C);
}

TEST_CASE("layout: a tensor-parallel rank's local tensors are those of its local ParamLayout", "[layout]") {
  // The stores, buckets and shards of stages 02-05 work on ParamLayout units; stage 06
  // hands them ParamLayout(m, tp, rank), which must place every tensor exactly where
  // RankLayout::tensor_parallel puts the slices. tp = 3 splits the vocabulary unevenly.
  ModelConfig m = gpt::test::layout_test_model();
  m.n_head = 12, m.n_embd = 48;
  const ParamLayout global(m);
  for (int tp : {1, 2, 3, 4, 6, 12})
    for (int rank = 0; rank < tp; ++rank) {
      INFO("tp " << tp << " rank " << rank);
      const RankLayout r = RankLayout::tensor_parallel(global, tp, rank);
      const ParamLayout local(m, tp, rank);
      REQUIRE(local.total() == r.total());
      REQUIRE(local.tensors().size() == r.tensors().size());
      for (size_t i = 0; i < r.tensors().size(); ++i) {
        CHECK(local.tensors()[i].offset == r.tensors()[i].offset);
        CHECK(local.tensors()[i].numel == r.tensors()[i].numel);
        CHECK(local.tensors()[i].name == global.tensors()[size_t(r.tensors()[i].tensor)].name);
      }
      const VocabRange v = vocab_range(m, tp, rank);
      CHECK(r.find("wte")->numel == int64_t(v.size()) * m.n_embd);
    }
  CHECK_THROWS_WITH(ParamLayout(m, 5, 0), Catch::Contains("tp=5 must divide n_head=12"));
}

TEST_CASE("layout: ranges of a local layout (ZeRO shards over dp) hold their elements and count them once", "[layout]") {
  const ModelConfig m = gpt::test::layout_test_model();
  const ParamLayout global(m);
  std::vector<float> whole(size_t(global.total()));
  global.init_range(99, 0, global.total(), whole.data());
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const int tp = 1 << (rng() % 3), dp = 1 + int(rng() % 4);
    const bool replicated = rng() % 2;  // zero=0: every dp rank holds everything, dp rank 0 counts it
    INFO("tp " << tp << " dp " << dp << (replicated ? " replicated" : " sharded"));
    std::vector<RankLayout> ranks;
    std::vector<float> gathered(size_t(global.total()), std::nanf(""));
    for (int t = 0; t < tp; ++t) {
      const RankLayout local = RankLayout::tensor_parallel(global, tp, t);
      std::vector<float> values(size_t(local.total()));
      local.scatter(whole.data(), values.data());
      for (int d = 0; d < dp; ++d) {
        const int64_t b = replicated ? 0 : local.total() * d / dp, e = replicated ? local.total() : local.total() * (d + 1) / dp;
        ranks.push_back(local.range(b, e, !replicated || d == 0));
        const RankLayout& part = ranks.back();
        REQUIRE(part.total() == e - b);
        std::vector<float> mine(size_t(part.total()));
        part.scatter(whole.data(), mine.data());
        CHECK(std::equal(mine.begin(), mine.end(), values.begin() + b));  // the same elements, in local order
        part.gather(mine.data(), gathered.data(), /*counted_only=*/true);
      }
    }
    REQUIRE_NOTHROW(check_counted_once(global, ranks));
    CHECK(std::equal(gathered.begin(), gathered.end(), whole.begin()));
  }
  // Short ranges, most of them inside one row of a block (a ZeRO shard smaller than a row:
  // many ranks, a small model), and ranges across a row's end: exactly their elements.
  for (int tp : {1, 2}) {
    const RankLayout local = RankLayout::tensor_parallel(global, tp, 0);
    std::vector<float> values(size_t(local.total()));
    local.scatter(whole.data(), values.data());
    for (int trial = 0; trial < 2000; ++trial) {
      const int64_t b = int64_t(rng() % uint64_t(local.total())), e = std::min(local.total(), b + 1 + int64_t(rng() % 40));
      const RankLayout part = local.range(b, e, true);
      INFO("tp " << tp << ": range [" << b << ", " << e << ")");
      REQUIRE(part.total() == e - b);
      std::vector<float> mine(size_t(e - b));
      part.scatter(whole.data(), mine.data());
      REQUIRE(std::equal(mine.begin(), mine.end(), values.begin() + b));
    }
  }
  // Negative control: two dp ranks both counting a replica.
  const RankLayout local = RankLayout::tensor_parallel(global, 1, 0);
  CHECK_THROWS_WITH(check_counted_once(global, {local.range(0, local.total(), true), local.range(0, local.total(), true)}),
                    Catch::Contains("counted by 2 ranks"));
}

TEST_CASE("layout: bad layouts are refused, naming the tensor", "[layout]") {
  const ModelConfig m = gpt::test::layout_test_model();
  const ParamLayout global(m);
  // A rank missing: its elements are counted by nobody.
  std::vector<RankLayout> missing = {RankLayout::tensor_parallel(global, 2, 0)};
  CHECK_THROWS_WITH(check_counted_once(global, missing), Catch::Contains("counted by 0 ranks"));
  // Two ranks both counting the replicated layernorms.
  std::vector<RankLayout> twice = {RankLayout::whole(global), RankLayout::whole(global)};
  CHECK_THROWS_WITH(check_counted_once(global, twice), Catch::Contains("counted by 2 ranks"));
  // A block outside its tensor, and tp that does not divide the heads.
  RankLayout r(global);
  CHECK_THROWS_WITH(r.add(0, {{250, 10, 0, m.n_embd}}, true), Catch::Contains("leaves tensor wte"));
  CHECK_THROWS_WITH(RankLayout::tensor_parallel(global, 3, 0), Catch::Contains("n_head"));
}

TEST_CASE("layout: AdamW on local slices (and ZeRO ranges of them) is the whole update's slice", "[layout]") {
  const ParamLayout global(gpt::test::layout_test_model());
  const size_t N = size_t(global.total());
  std::vector<float> params(N), grads(N);
  global.init_range(99, 0, global.total(), params.data());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& g : grads) g = normal(rng);
  Config cfg;
  cfg.weight_decay = 0.1;  // decay differs by tensor: a wrong mapping shows

  std::vector<float> whole = params;
  AdamW<float> full(global, 0, global.total(), /*keep_master=*/false);
  full.step(Device::CPU, whole.data(), grads.data(), 1e-2, 0.7, cfg, 1, false);
  const std::vector<float> whole_m(full.m().data(), full.m().data() + N);
  const std::vector<float> whole_v(full.v().data(), full.v().data() + N);

  // The weights and both moments after one step on tp ranks, each rank's buffer in two
  // ZeRO ranges, gathered into the global layout. At step 1 AdamW moves every weight by
  // about lr sign(g), so the weights alone would not show a gradient scaled by a constant
  // factor; the moments would (m = (1 - beta1) g).
  struct Gathered {
    std::vector<float> p, m, v;
  };
  // global_flags: the control below, where each local buffer takes its decay flags
  // from the global layout at the same offsets instead of from its own tensors.
  const auto step_on_slices = [&](int tp, double grad_scale, bool global_flags = false) {
    Gathered out{std::vector<float>(N, std::nanf("")), std::vector<float>(N, std::nanf("")),
                 std::vector<float>(N, std::nanf(""))};
    for (int r = 0; r < tp; ++r) {
      const RankLayout layout = RankLayout::tensor_parallel(global, tp, r);
      const int64_t n = layout.total(), mid = n / 3;  // two ZeRO ranges of the local buffer
      std::vector<float> p(static_cast<size_t>(n)), g(static_cast<size_t>(n));
      layout.scatter(params.data(), p.data());
      layout.scatter(grads.data(), g.data());
      const RankLayout flags = global_flags ? RankLayout::whole(global) : layout;
      AdamW<float> first(flags, 0, mid, false), second(flags, mid, n, false);
      first.step(Device::CPU, p.data(), g.data(), 1e-2, grad_scale, cfg, 1, false);
      second.step(Device::CPU, p.data() + mid, g.data() + mid, 1e-2, grad_scale, cfg, 1, false);
      std::vector<float> m(first.m().data(), first.m().data() + mid), v(first.v().data(), first.v().data() + mid);
      m.insert(m.end(), second.m().data(), second.m().data() + (n - mid));
      v.insert(v.end(), second.v().data(), second.v().data() + (n - mid));
      layout.gather(p.data(), out.p.data(), /*counted_only=*/true);
      layout.gather(m.data(), out.m.data(), /*counted_only=*/true);
      layout.gather(v.data(), out.v.data(), /*counted_only=*/true);
    }
    return out;
  };
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::equal(a.begin(), a.end(), b.begin());  // bit for bit (a NaN left ungathered fails)
  };
  for (int tp : {2, 4}) {
    const Gathered got = step_on_slices(tp, 0.7);
    INFO("tp " << tp);
    CHECK(same(got.p, whole));
    CHECK(same(got.m, whole_m));
    CHECK(same(got.v, whole_v));
  }
  // Negative controls: decay flags mapped by offset rather than by tensor (a local
  // buffer's elements decayed as the global buffer's elements at those offsets) change
  // the weights; the gradient 1.01x shows in the moments.
  const Gathered misflagged = step_on_slices(2, 0.7, /*global_flags=*/true);
  CHECK_FALSE(same(misflagged.p, whole));
  CHECK(same(misflagged.m, whole_m));  // decay touches the weights only
  const Gathered scaled = step_on_slices(2, 0.7 * 1.01);
  CHECK_FALSE(same(scaled.m, whole_m));
  CHECK_FALSE(same(scaled.v, whole_v));
}
