// A checkpoint written in one rank-local layout loads in another (run under mpirun on
// 1 to 4 ranks): every rank draws the same two random tensor x pipeline meshes A and B
// of the job's ranks; the ranks save their local buffers of layout A together
// (save_checkpoint_local), then load them into layout B; each rank's B buffers must be,
// bit for bit, the slices of the global buffers. The files must be byte for byte those
// one writer makes from the global buffers (so a checkpoint of any earlier stage is the
// same thing). Negative control: a layout set that misses a rank's elements is refused.
//
// No Catch2: a failing check on one rank must not leave the others in a collective;
// every rank counts its failures and the job fails if any rank failed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/comm.h"
#include "common/config.h"
#include "common/error.h"
#include "common/layout_exchange.h"
#include "tests/layout/layouts.h"
#include "tests/rank_checks.h"

using namespace gpt;

namespace {
int g_failures = 0;
void expect(bool ok, const std::string& what, int rank) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
}
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

int main(int argc, char** argv) {
  return run_main("test_layout_checkpoint", [&] {
    if (argc < 2) fail("usage: test_layout_checkpoint WORKDIR");
    const std::string work = argv[1];
    std::unique_ptr<Communicator> world = make_world(&argc, &argv, {});
    gpt::test::require_world_size(*world, "test_layout_checkpoint");
    const int n = world->size(), me = world->rank();
    Config cfg;
    cfg.model = gpt::test::layout_test_model();
    const ParamLayout global(cfg.model);
    // Global buffers: the initial weights, and distinct values for the moments.
    std::vector<float> param(size_t(global.total())), moment(size_t(global.total()));
    global.init_range(cfg.seed, 0, global.total(), param.data());
    for (size_t i = 0; i < moment.size(); ++i) moment[i] = float(i) * 1e-3f + 0.5f;

    std::mt19937 rng(2026 + unsigned(n));  // the same draws on every rank
    for (int trial = 0; trial < 3; ++trial) {
      const auto a = gpt::test::random_mesh(global, n, rng), b = gpt::test::random_mesh(global, n, rng);
      const std::string what = "A = " + a.describe() + ", B = " + b.describe();
      if (me == 0) std::printf("trial %d: %s\n", trial, what.c_str());
      const RankLayout& la = a.layouts[size_t(me)];
      std::vector<float> pa(size_t(la.total())), ma(size_t(la.total()));
      la.init(cfg.seed, pa.data());
      la.scatter(moment.data(), ma.data());
      const std::string dir = work + "/trial" + std::to_string(trial);
      CheckpointState state;
      state.step = 7;
      const std::string path =
          save_checkpoint_local(*world, dir, cfg, la, state, {{"param", pa.data()}, {"adam_m", ma.data()}});

      const RankLayout& lb = b.layouts[size_t(me)];
      std::vector<float> pb(size_t(lb.total())), mb(size_t(lb.total())), want(size_t(lb.total()));
      const CheckpointState loaded = load_checkpoint_local(*world, path, lb, {{"param", pb.data()}, {"adam_m", mb.data()}});
      expect(loaded.step == 7, what + ": the step comes back", me);
      lb.scatter(param.data(), want.data());
      expect(pb == want, what + ": param in layout B equals the global slices", me);
      lb.scatter(moment.data(), want.data());
      expect(mb == want, what + ": adam_m in layout B equals the global slices", me);

      // The same files as one writer makes from the global buffers.
      if (me == 0) {
        const std::string single = save_checkpoint(work + "/single" + std::to_string(trial), cfg, global, state,
                                                   {{"param", param.data(), 0, global.total()},
                                                    {"adam_m", moment.data(), 0, global.total()}});
        for (const char* f : {"param.bin", "adam_m.bin"})
          expect(file_bytes(path + "/" + f) == file_bytes(single + "/" + f),
                 what + ": " + f + " is byte for byte the single writer's", me);
      }
      world->barrier();
    }

    // Negative controls, each a layout set local_to_flat must refuse:
    //  - every rank pretends to be rank 0 of a tp=2 mesh: elements missing (and, on two or
    //    more ranks, tensor-parallel rank 0's counted twice);
    //  - on two or more ranks, every rank counts elements from the start of the model, as
    //    many in all as the model has: the total is right, but the first ones arrive
    //    several times and the last ones never, so the shards' counts are wrong (a check of
    //    the total alone would pass it).
    const auto expect_refused = [&](const RankLayout& layout, const std::string& what) {
      std::vector<float> local(size_t(layout.total())), shard(size_t(flat_shard(global.total(), n, me).size()));
      bool refused = false;
      try {
        local_to_flat(*world, layout, local.data(), shard.data());
      } catch (const UserError& e) {
        refused = std::string(e.what()).find("misses elements or counts some twice") != std::string::npos;
      }
      double any = refused ? 1 : 0;
      world->all_reduce(&any, 1, DType::F64);
      expect(any > 0, what + " is refused", me);
    };
    expect_refused(RankLayout::tensor_parallel(global, 2, 0), "a layout set that misses elements");
    if (n > 1) {
      const int64_t each = global.total() / n, mine = me < n - 1 ? each : global.total() - (n - 1) * each;
      expect_refused(RankLayout::whole(global).range(0, mine, /*counted=*/true),
                     "a layout set of the right count that doubles some elements and misses others");
    }

    double failures = g_failures;
    world->all_reduce(&failures, 1, DType::F64);
    if (me == 0) std::printf("test_layout_checkpoint: %s on %d rank(s)\n", failures == 0 ? "PASS" : "FAIL", n);
    return failures == 0 ? 0 : 1;
  });
}
