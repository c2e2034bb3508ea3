// GPipe (stage 07) and 1F1B (stage 08) on the simulated machine: for p in 1-5 and 8, with
// m below, equal to and above p, no deadlock, every micro-batch forwarded and
// backwarded once per rank with backwards in micro-batch order, messages paired by tag,
// the bubble equal to (p-1)/(m+p-1) (tF = 1, tB = 2: exact in binary floating point up
// to the division), GPipe holding m micro-batches in flight and 1F1B min(p - r, m).
// Negative controls: a rank waiting for a gradient before sending the activation it
// depends on must deadlock; swapped backwards, a backward before its forward and a
// GPipe rank claimed to hold only min(p - r, m) must be caught.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "common/error.h"
#include "stages/07_pipeline_gpipe/schedule.h"
#include "stages/08_pipeline_1f1b/schedule_1f1b.h"
#include "tests/pp/schedule_checks.h"

using namespace gpt;

namespace {

std::vector<PipeSchedule> all_ranks(bool one_f_one_b, int p, int m) {
  std::vector<PipeSchedule> s;
  for (int r = 0; r < p; ++r) s.push_back(one_f_one_b ? one_f_one_b_schedule(p, r, m) : gpipe_schedule(p, r, m));
  return s;
}

}  // namespace

TEST_CASE("pipeline: GPipe and 1F1B run, in micro-batch order, with the theory's bubble and memory", "[pipeline]") {
  const std::vector<std::pair<int, int>> shapes = {{1, 1}, {2, 1}, {2, 2}, {3, 2}, {3, 7}, {4, 8}, {4, 4},
                                                   {4, 16}, {2, 4}, {5, 3}, {8, 2}};
  for (bool ofob : {false, true})
    for (auto [p, m] : shapes) {
      INFO((ofob ? "1F1B" : "GPipe") << ", p " << p << ", m " << m);
      const auto ranks = all_ranks(ofob, p, m);
      CHECK(test::schedule_problems(ranks, m, 1).empty());
      for (const PipeCosts& costs : {PipeCosts{1, 2, 0}, PipeCosts{1, 1, 1}}) {
        const PipeSimulation sim = simulate_pipeline(ranks, costs);
        REQUIRE_FALSE(sim.deadlock);
        REQUIRE(sim.error.empty());
        for (int r = 0; r < p; ++r) {
          INFO("rank " << r);
          CHECK(std::fabs(sim.bubble[size_t(r)] - pipeline_bubble(p, m)) < 1e-12);
          CHECK(sim.max_in_flight[size_t(r)] == (ofob ? std::min(p - r, m) : m));
        }
        CHECK(sim.makespan == Approx(3.0 * (m + p - 1)).epsilon(1e-12));
      }
    }
}

TEST_CASE("pipeline: message tags name micro-batch, chunk and direction uniquely", "[pipeline]") {
  std::set<int> tags;
  for (int micro = 0; micro < 64; ++micro)
    for (int chunk = 0; chunk < 4; ++chunk)
      for (bool grad : {false, true}) CHECK(tags.insert(pipe_message_tag(grad, micro, chunk, 4)).second);
  // With one chunk per rank both ends of a message agree with pipe_message_tag(grad, micro, 0, 1).
  CHECK(pipe_action_tag({PipeOp::SendActivation, 5, 0}, 4, 1, 1) == pipe_message_tag(false, 5, 0, 1));
  CHECK(pipe_action_tag({PipeOp::RecvGradient, 5, 0}, 4, 1, 1) == pipe_message_tag(true, 5, 0, 1));
  CHECK(pipe_peer({PipeOp::SendActivation, 5, 0}, 4, 1, 1).rank == 2);
  CHECK(pipe_peer({PipeOp::SendGradient, 5, 0}, 4, 1, 1).rank == 0);
}

TEST_CASE("pipeline: the checks catch a deadlock, a wrong order and wrong memory claims", "[pipeline]") {
  // Rank 0 waits for micro-batch 0's gradient before sending micro-batch 0's activation.
  auto ranks = all_ranks(true, 2, 2);
  PipeSchedule& first = ranks[0];
  const auto send = std::find(first.begin(), first.end(), PipeAction{PipeOp::SendActivation, 0, 0});
  const auto recv = std::find(first.begin(), first.end(), PipeAction{PipeOp::RecvGradient, 0, 0});
  REQUIRE(send != first.end());
  REQUIRE(recv != first.end());
  std::iter_swap(send, recv);
  const PipeSimulation sim = simulate_pipeline(ranks, 1.0, 2.0);
  CHECK(sim.deadlock);
  CHECK_THAT(sim.stuck, Catch::Contains("rank 0 waits at recv gradient of micro-batch 0"));
  // Backwards swapped on the last rank: still runs, but the gradients would sum out of order.
  auto swapped = all_ranks(true, 3, 4);
  PipeSchedule& last = swapped[2];
  std::iter_swap(std::find(last.begin(), last.end(), PipeAction{PipeOp::Backward, 1, 0}),
                 std::find(last.begin(), last.end(), PipeAction{PipeOp::Backward, 2, 0}));
  CHECK_FALSE(simulate_pipeline(swapped, 1.0, 2.0).deadlock);
  CHECK_THAT(test::schedule_problems(swapped, 4, 1), Catch::Contains("rank 2: backward of micro-batch 2 chunk 0: out of micro-batch order"));
  // A backward moved before its forward is a data-flow error.
  auto early = all_ranks(false, 1, 2);
  std::rotate(early[0].begin(), early[0].begin() + 2, early[0].begin() + 3);  // F0 F1 B0 -> B0 F0 F1
  CHECK_THAT(simulate_pipeline(early, 1.0, 2.0).error, Catch::Contains("backward before its forward"));
  // GPipe does not hold only min(p - r, m): the counter tells them apart.
  const PipeSimulation gpipe = simulate_pipeline(all_ranks(false, 4, 8), 1.0, 2.0);
  CHECK(gpipe.max_in_flight[1] != std::min(4 - 1, 8));
  CHECK_THROWS_WITH(gpipe_schedule(2, 0, 0), Catch::Contains("must be >= 1"));
  CHECK_THROWS_AS(one_f_one_b_schedule(0, 0, 2), UserError);
}
