// Pipeline schedules and their simulation; see schedule.h.
#include "stages/07_pipeline_gpipe/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "common/error.h"

namespace gpt {

const char* pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::Forward: return "forward";
    case PipeOp::Backward: return "backward";
    case PipeOp::SendActivation: return "send activation";
    case PipeOp::RecvActivation: return "recv activation";
    case PipeOp::SendGradient: return "send gradient";
    case PipeOp::RecvGradient: return "recv gradient";
  }
  return "?";
}

namespace {

void check_shape(int p, int rank, int m) {
  require(p >= 1, "pp=" + std::to_string(p) + ": must be >= 1");
  require(m >= 1, "micro-batches per step: " + std::to_string(m) + " (batch_size / micro_batch_size / dp) must be >= 1");
  invariant(rank >= 0 && rank < p, "pipeline schedule: rank " + std::to_string(rank) + " of " + std::to_string(p));
}

// One micro-batch's forward on a rank (v = 1): its activation in, the forward, out.
void forward(PipeSchedule& s, int p, int rank, int i) {
  if (rank > 0) s.push_back({PipeOp::RecvActivation, i, 0});
  s.push_back({PipeOp::Forward, i, 0});
  if (rank < p - 1) s.push_back({PipeOp::SendActivation, i, 0});
}
// And its backward: the output's gradient in, the backward, the input's gradient out.
void backward(PipeSchedule& s, int p, int rank, int i) {
  if (rank < p - 1) s.push_back({PipeOp::RecvGradient, i, 0});
  s.push_back({PipeOp::Backward, i, 0});
  if (rank > 0) s.push_back({PipeOp::SendGradient, i, 0});
}

}  // namespace

PipeSchedule gpipe_schedule(int p, int rank, int m) {
  check_shape(p, rank, m);
  PipeSchedule s;
  for (int i = 0; i < m; ++i) forward(s, p, rank, i);
  for (int i = 0; i < m; ++i) backward(s, p, rank, i);
  return s;
}

PipeSchedule one_f_one_b_schedule(int p, int rank, int m) {
  check_shape(p, rank, m);
  PipeSchedule s;
  const int warmup = std::min(p - rank - 1, m);
  int f = 0, b = 0;
  while (f < warmup) forward(s, p, rank, f++);
  while (f < m) {  // steady state: one forward, one backward
    forward(s, p, rank, f++);
    backward(s, p, rank, b++);
  }
  while (b < m) backward(s, p, rank, b++);  // cool-down
  return s;
}

int pipe_message_tag(bool gradient, int micro, int chunk, int chunks) {
  return 2 * (micro * chunks + chunk) + (gradient ? 1 : 0);
}

double pipeline_bubble(int p, int m) { return double(p - 1) / double(m + p - 1); }

PipeSimulation simulate_pipeline(const std::vector<PipeSchedule>& ranks, double tF, double tB) {
  const int p = int(ranks.size());
  PipeSimulation sim;
  std::vector<size_t> pc(size_t(p), 0);
  std::vector<double> clock(size_t(p), 0.0), busy(size_t(p), 0.0);
  std::vector<int> in_flight(size_t(p), 0);
  sim.max_in_flight.assign(size_t(p), 0);
  // (gradient?, micro, chunk, to) -> the time the message was sent
  std::map<std::tuple<bool, int, int, int>, double> sent;
  struct Slot {
    double start, end;
    PipeAction a;
  };
  std::vector<std::vector<Slot>> compute(static_cast<size_t>(p));
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (pc[size_t(r)] < ranks[size_t(r)].size()) {
        const PipeAction& a = ranks[size_t(r)][pc[size_t(r)]];
        double& t = clock[size_t(r)];
        if (a.op == PipeOp::Forward || a.op == PipeOp::Backward) {
          const double cost = a.op == PipeOp::Forward ? tF : tB;
          compute[size_t(r)].push_back({t, t + cost, a});
          t += cost, busy[size_t(r)] += cost;
          in_flight[size_t(r)] += a.op == PipeOp::Forward ? 1 : -1;
          sim.max_in_flight[size_t(r)] = std::max(sim.max_in_flight[size_t(r)], in_flight[size_t(r)]);
        } else if (a.op == PipeOp::SendActivation || a.op == PipeOp::SendGradient) {
          const bool grad = a.op == PipeOp::SendGradient;
          sent[{grad, a.micro, a.chunk, grad ? r - 1 : r + 1}] = t;
        } else {
          const bool grad = a.op == PipeOp::RecvGradient;
          const auto it = sent.find({grad, a.micro, a.chunk, r});
          if (it == sent.end()) break;  // blocked until the sender gets there
          t = std::max(t, it->second);
        }
        ++pc[size_t(r)];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (pc[size_t(r)] < ranks[size_t(r)].size()) {
      const PipeAction& a = ranks[size_t(r)][pc[size_t(r)]];
      sim.deadlock = true;
      sim.stuck += "rank " + std::to_string(r) + " waits at " + pipe_op_name(a.op) + " of micro-batch " +
                   std::to_string(a.micro) + "; ";
    }
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < p; ++r) sim.bubble.push_back(sim.makespan > 0 ? 1.0 - busy[size_t(r)] / sim.makespan : 0.0);
  // The timeline: one cell per time unit of min(tF, tB).
  const double unit = std::min(tF, tB);
  const int cells = int(std::lround(sim.makespan / unit));
  for (int r = 0; r < p; ++r) {
    std::vector<std::string> row(size_t(cells), " . ");
    for (const Slot& s : compute[size_t(r)]) {
      const int c0 = int(std::lround(s.start / unit)), c1 = int(std::lround(s.end / unit));
      char cell[16];
      std::snprintf(cell, sizeof cell, "%c%-2d", s.a.op == PipeOp::Forward ? 'F' : 'B', s.a.micro);
      for (int c = c0; c < c1 && c < cells; ++c) row[size_t(c)] = c == c0 ? cell : "---";
    }
    sim.timeline += "rank " + std::to_string(r) + " |";
    for (const std::string& c : row) sim.timeline += c;
    sim.timeline += "|\n";
  }
  return sim;
}

}  // namespace gpt
