// Pipeline schedules (stages/07_pipeline_gpipe/schedule.h) on the simulated machine:
// for every (p, m) of the pipeline issue's list and more, GPipe and 1F1B never deadlock,
// every rank runs each micro-batch's forward and backward once, backwards in
// micro-batch order, the bubble equals (p-1)/(m+p-1) exactly (tF = 1, tB = 2: exact in
// binary floating point up to the division), GPipe holds m micro-batches in flight and
// 1F1B min(p - r, m). Negative controls: a schedule whose first rank waits for a
// gradient before sending the activation it depends on must deadlock, and a GPipe rank
// claimed to hold only min(p - r, m) must be caught.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "common/error.h"
#include "stages/07_pipeline_gpipe/schedule.h"

using namespace gpt;

namespace {

std::vector<PipeSchedule> all_ranks(bool one_f_one_b, int p, int m) {
  std::vector<PipeSchedule> s;
  for (int r = 0; r < p; ++r) s.push_back(one_f_one_b ? one_f_one_b_schedule(p, r, m) : gpipe_schedule(p, r, m));
  return s;
}

std::vector<int> order_of(const PipeSchedule& s, PipeOp op) {
  std::vector<int> out;
  for (const PipeAction& a : s)
    if (a.op == op) out.push_back(a.micro);
  return out;
}

}  // namespace

TEST_CASE("pipeline: GPipe and 1F1B run, in micro-batch order, with the theory's bubble and memory", "[pipeline]") {
  const std::vector<std::pair<int, int>> shapes = {{1, 1}, {2, 1}, {2, 2}, {3, 2}, {3, 7}, {4, 8}, {4, 4},
                                                   {4, 16}, {2, 4}, {5, 3}, {8, 2}};
  for (bool ofob : {false, true})
    for (auto [p, m] : shapes) {
      INFO((ofob ? "1F1B" : "GPipe") << ", p " << p << ", m " << m);
      const auto ranks = all_ranks(ofob, p, m);
      const PipeSimulation sim = simulate_pipeline(ranks, 1.0, 2.0);
      REQUIRE_FALSE(sim.deadlock);
      std::vector<int> in_order(static_cast<size_t>(m));
      for (int i = 0; i < m; ++i) in_order[size_t(i)] = i;
      for (int r = 0; r < p; ++r) {
        INFO("rank " << r);
        CHECK(order_of(ranks[size_t(r)], PipeOp::Forward) == in_order);
        CHECK(order_of(ranks[size_t(r)], PipeOp::Backward) == in_order);  // gradients accumulate as without a pipeline
        CHECK(std::fabs(sim.bubble[size_t(r)] - pipeline_bubble(p, m)) < 1e-12);
        CHECK(sim.max_in_flight[size_t(r)] == (ofob ? std::min(p - r, m) : m));
      }
      CHECK(sim.makespan == Approx(3.0 * (m + p - 1)).epsilon(1e-12));
    }
}

TEST_CASE("pipeline: message tags name micro-batch, chunk and direction uniquely", "[pipeline]") {
  std::set<int> tags;
  for (int micro = 0; micro < 64; ++micro)
    for (int chunk = 0; chunk < 4; ++chunk)
      for (bool grad : {false, true}) CHECK(tags.insert(pipe_message_tag(grad, micro, chunk, 4)).second);
}

TEST_CASE("pipeline: the simulation catches a deadlock and wrong memory claims", "[pipeline]") {
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
  // GPipe does not hold only min(p - r, m): the counter tells them apart.
  const PipeSimulation gpipe = simulate_pipeline(all_ranks(false, 4, 8), 1.0, 2.0);
  CHECK(gpipe.max_in_flight[1] != std::min(4 - 1, 8));
  CHECK_THROWS_WITH(gpipe_schedule(2, 0, 0), Catch::Contains("must be >= 1"));
}
