// Interleaved 1F1B and ZB-H1 (stage 09), and the schedules by name, on the simulated
// machine: no deadlock, every (micro, chunk) forwarded and backwarded once with the
// backwards and the weight gradients of each chunk in micro-batch order, messages
// paired by tag across the wrap from rank p-1 to rank 0, the bubble and the most
// activations in flight equal to each header's theory, and ZB-H1's bubble at most half
// of 1F1B's for tF = tB = tW and m >= p. Negative controls: a split backward with the W
// right after its B (no deferral) is not half of 1F1B; a W before its B and a send to
// the wrong chunk are caught. Bad input is a UserError naming the key.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/error.h"
#include "stages/08_pipeline_1f1b/schedule_1f1b.h"
#include "stages/09_pipeline_interleaved/schedule_interleaved.h"
#include "stages/09_pipeline_interleaved/schedule_zero_bubble.h"
#include "stages/09_pipeline_interleaved/schedules.h"
#include "tests/pp/schedule_checks.h"

using namespace gpt;

namespace {

std::vector<PipeSchedule> all_ranks(const std::string& name, int p, int m, int v) {
  std::vector<PipeSchedule> s;
  for (int r = 0; r < p; ++r) s.push_back(pipeline_schedule(name, p, r, m, v));
  return s;
}

// Runs schedule `name` at (p, m, v) and checks it against its theory for `costs`.
void check_against_theory(const std::string& name, int p, int m, int v, const PipeCosts& costs) {
  INFO(name << ", p " << p << ", m " << m << ", v " << v << ", costs " << costs.forward << " " << costs.backward_input
            << " " << costs.backward_weight);
  const auto ranks = all_ranks(name, p, m, v);
  CHECK(test::schedule_problems(ranks, m, v).empty());
  const PipeSimulation sim = simulate_pipeline(ranks, costs, v);
  REQUIRE_FALSE(sim.deadlock);
  REQUIRE(sim.error.empty());
  const double theory = pipeline_theory_bubble(name, p, m, v, costs);
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r);
    CHECK(std::fabs(sim.bubble[size_t(r)] - theory) < 1e-12);
    CHECK(sim.max_in_flight[size_t(r)] == pipeline_theory_in_flight(name, p, r, m, v));
  }
}

// (p, m) shapes with m below, equal to and above p; and (p, v) pairs for the
// interleaved schedule, each run with every m from 1 to 3p + 1 (m around p).
const std::vector<std::pair<int, int>> kShapes = {{1, 1}, {2, 1}, {2, 2}, {3, 2}, {3, 7}, {4, 8}, {4, 5}, {5, 12}};
const std::vector<std::pair<int, int>> kInterleaved = {{2, 2}, {2, 3}, {3, 2}, {4, 3}, {1, 3}};

}  // namespace

TEST_CASE("pipeline: interleaved 1F1B runs any m with the theory's bubble and in-flight bound", "[pipeline]") {
  for (auto [p, v] : kInterleaved)
    for (int m = 1; m <= 3 * p + 1; ++m)
      for (const PipeCosts& costs : {PipeCosts{1, 2, 0}, PipeCosts{1, 1, 0}, PipeCosts{1, 3, 0}})
        check_against_theory("interleaved", p, m, v, costs);
  CHECK(interleaved_bubble(4, 8, 2) == Approx(3.0 / 19));  // (p-1)/(vm+p-1)
  // The textbook bubble, written here rather than taken from the library: with m a
  // multiple of p every rank idles (p - 1) chunk slots of forward plus backward, against
  // v m of work, so (p-1)/(v m + p - 1) of its step.
  for (auto [p, v] : kInterleaved)
    for (int m = p; m <= 3 * p; m += p) {
      INFO("p " << p << ", v " << v << ", m " << m);
      const PipeSimulation sim = simulate_pipeline(all_ranks("interleaved", p, m, v), PipeCosts{1, 2, 0}, v);
      for (int r = 0; r < p; ++r) CHECK(sim.bubble[size_t(r)] == Approx(double(p - 1) / (v * m + p - 1)).epsilon(1e-12));
    }
  CHECK(interleaved_groups(3, 7) == std::vector<int>{4, 3});
  CHECK(interleaved_groups(4, 3) == std::vector<int>{3});
}

TEST_CASE("pipeline: interleaved 1F1B with one chunk is 1F1B; chunks wrap from the last rank to the first",
          "[pipeline]") {
  for (auto [p, m] : kShapes)
    for (int r = 0; r < p; ++r) CHECK(interleaved_schedule(p, r, m, 1) == one_f_one_b_schedule(p, r, m));
  // p = 3, v = 2: rank 2's chunk 0 (stage 2) feeds rank 0's chunk 1 (stage 3), whose
  // input gradient goes back to it.
  const PipePeer next = pipe_peer({PipeOp::SendActivation, 4, 0}, 3, 2, 2);
  CHECK((next.rank == 0 && next.chunk == 1));
  const PipePeer back = pipe_peer({PipeOp::SendGradient, 4, 1}, 3, 0, 2);
  CHECK((back.rank == 2 && back.chunk == 0));
  CHECK(pipe_action_tag({PipeOp::SendActivation, 4, 0}, 3, 2, 2) == pipe_action_tag({PipeOp::RecvActivation, 4, 1}, 3, 0, 2));
  // Interleaving shrinks the bubble v-fold in the number of chunk steps.
  const double one = simulate_pipeline(all_ranks("1f1b", 4, 8, 1), PipeCosts{1, 2, 0}).bubble[0];
  const double two = simulate_pipeline(all_ranks("interleaved", 4, 8, 2), PipeCosts{1, 2, 0}, 2).bubble[0];
  CHECK(two < one);
}

TEST_CASE("pipeline: ZB-H1 fills the bubble with weight gradients, in micro-batch order", "[pipeline]") {
  for (auto [p, m] : kShapes)
    for (const PipeCosts& costs : {PipeCosts{1, 1, 1}, PipeCosts{2, 3, 1}, PipeCosts{1, 2, 1}, PipeCosts{1, 1, 0.5},
                                   // a W longer than tF or tB
                                   PipeCosts{1, 1, 2}, PipeCosts{1, 3, 2}, PipeCosts{3, 1, 2}, PipeCosts{0.09, 0.09, 0.34}})
      check_against_theory("zb-h1", p, m, 1, costs);
  // Costs drawn at random (a fixed seed), each from 0.1 to 3: any order of tF, tB and tW.
  std::mt19937 draw(2026);
  std::uniform_real_distribution<double> cost(0.1, 3.0);
  for (int i = 0; i < 300; ++i) {
    const PipeCosts costs{cost(draw), cost(draw), cost(draw)};
    check_against_theory("zb-h1", 1 + i % 6, 1 + i / 6 % 13, 1, costs);
  }
  for (auto [p, m] : kShapes) {
    INFO("p " << p << ", m " << m);
    const double zb = simulate_pipeline(all_ranks("zb-h1", p, m, 1), PipeCosts{1, 1, 1}).bubble[0];
    const double ofob = simulate_pipeline(all_ranks("1f1b", p, m, 1), PipeCosts{1, 1, 1}).bubble[0];
    CHECK(zb <= ofob);
    if (m >= p) CHECK(zb <= 0.5 * ofob + 1e-12);  // below p, no order halves it (schedule_zero_bubble.h)
  }
}

TEST_CASE("pipeline: the checks reject an undeferred W, a W before its B and a misaddressed send", "[pipeline]") {
  // 1F1B with each backward split into B and an immediate W: correct, but no faster than 1F1B.
  const int p = 4, m = 8;
  std::vector<PipeSchedule> split;
  for (int r = 0; r < p; ++r) {
    PipeSchedule s;
    for (const PipeAction& a : one_f_one_b_schedule(p, r, m)) {
      if (a.op != PipeOp::Backward) {
        s.push_back(a);
        continue;
      }
      s.push_back({PipeOp::BackwardInput, a.micro, a.chunk});
      s.push_back({PipeOp::BackwardWeight, a.micro, a.chunk});
    }
    split.push_back(s);
  }
  CHECK(test::schedule_problems(split, m, 1).empty());
  const PipeSimulation undeferred = simulate_pipeline(split, PipeCosts{1, 1, 1});
  REQUIRE(undeferred.error.empty());
  CHECK(undeferred.bubble[0] > 0.5 * pipeline_bubble(p, m));
  CHECK(std::fabs(undeferred.bubble[0] - zb_h1_bubble(p, m, PipeCosts{1, 1, 1})) > 0.01);
  // A W moved before its B.
  auto early = all_ranks("zb-h1", 2, 2, 1);
  PipeSchedule& last = early[1];
  const auto w0 = std::find(last.begin(), last.end(), PipeAction{PipeOp::BackwardWeight, 0, 0});
  last.erase(w0);
  last.insert(last.begin(), PipeAction{PipeOp::BackwardWeight, 0, 0});
  CHECK_THAT(simulate_pipeline(early, PipeCosts{1, 1, 1}).error, Catch::Contains("weight gradient without"));
  // Interleaved, but rank 1 sends chunk 0's output as chunk 1's, which is not computed
  // yet (and would reach rank 2's chunk 1, not the chunk 0 waiting for it).
  auto wrong = all_ranks("interleaved", 3, 3, 2);
  std::find(wrong[1].begin(), wrong[1].end(), PipeAction{PipeOp::SendActivation, 0, 0})->chunk = 1;
  CHECK_THAT(simulate_pipeline(wrong, PipeCosts{1, 2, 0}, 2).error,
             Catch::Contains("rank 1: send activation of micro-batch 0 chunk 1: sent before its forward"));
  CHECK_THAT(test::schedule_problems(wrong, 3, 2), Catch::Contains("do not pair up"));
}

TEST_CASE("pipeline: schedules by name; bad input is a UserError naming the key", "[pipeline]") {
  for (const std::string& name : pipeline_schedule_names()) CHECK_FALSE(pipeline_schedule(name, 2, 0, 2, 1).empty());
  CHECK(pipeline_schedule("1f1b", 3, 1, 5, 1) == one_f_one_b_schedule(3, 1, 5));
  CHECK_THROWS_WITH(pipeline_schedule("zb", 2, 0, 2, 1),
                    Catch::Contains("schedule=zb") && Catch::Contains("gpipe, 1f1b, interleaved, zb-h1"));
  CHECK_THROWS_WITH(pipeline_schedule("1f1b", 2, 0, 2, 2), Catch::Contains("schedule=1f1b runs one model chunk"));
  CHECK_THROWS_WITH(pipeline_schedule("zb-h1", 2, 0, 2, 3), Catch::Contains("virtual_stages=3"));
  CHECK_THROWS_WITH(pipeline_schedule("interleaved", 2, 0, 0, 2), Catch::Contains("must be >= 1"));
  CHECK_THROWS_WITH(pipeline_schedule("interleaved", 2, 0, 4, 0), Catch::Contains("virtual_stages=0"));
  CHECK_THROWS_WITH(interleaved_schedule(2, 0, 4, 0), Catch::Contains("virtual_stages=0"));
  CHECK_THROWS_WITH(zb_h1_schedule(2, 1, 0), Catch::Contains("must be >= 1"));
  CHECK_THROWS_AS(pipeline_schedule("gpipe", 0, 0, 2, 1), UserError);
}
