// Pipeline schedules' common parts, GPipe, and the simulator; see schedule.h.
#include "stages/07_pipeline_gpipe/schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "common/error.h"

namespace gpt {

const char* pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::Forward: return "forward";
    case PipeOp::Backward: return "backward";
    case PipeOp::BackwardInput: return "backward (input)";
    case PipeOp::BackwardWeight: return "backward (weights)";
    case PipeOp::SendActivation: return "send activation";
    case PipeOp::RecvActivation: return "recv activation";
    case PipeOp::SendGradient: return "send gradient";
    case PipeOp::RecvGradient: return "recv gradient";
  }
  return "?";
}

void check_pipeline_shape(int p, int rank, int m, int v) {
  require(p >= 1, "pp=" + std::to_string(p) + ": must be >= 1");
  require(m >= 1, "micro-batches per step: " + std::to_string(m) +
                      " (batch_size / micro_batch_size / dp) must be >= 1");
  require(v >= 1, "virtual_stages=" + std::to_string(v) + ": must be >= 1");
  invariant(rank >= 0 && rank < p, "pipeline schedule: rank " + std::to_string(rank) + " of " + std::to_string(p));
}

void append_forward(PipeSchedule& s, int p, int rank, int v, int micro, int chunk) {
  const int stage = chunk * p + rank;
  if (stage > 0) s.push_back({PipeOp::RecvActivation, micro, chunk});
  s.push_back({PipeOp::Forward, micro, chunk});
  if (stage < p * v - 1) s.push_back({PipeOp::SendActivation, micro, chunk});
}

void append_backward(PipeSchedule& s, int p, int rank, int v, int micro, int chunk, PipeOp op) {
  invariant(op == PipeOp::Backward || op == PipeOp::BackwardInput, "append_backward: op must be a backward");
  const int stage = chunk * p + rank;
  if (stage < p * v - 1) s.push_back({PipeOp::RecvGradient, micro, chunk});
  s.push_back({op, micro, chunk});
  if (stage > 0) s.push_back({PipeOp::SendGradient, micro, chunk});
}

PipeSchedule gpipe_schedule(int p, int rank, int m) {
  check_pipeline_shape(p, rank, m);
  PipeSchedule s;
  for (int i = 0; i < m; ++i) append_forward(s, p, rank, 1, i, 0);
  for (int i = 0; i < m; ++i) append_backward(s, p, rank, 1, i, 0);
  return s;
}

int pipe_message_tag(bool gradient, int micro, int chunk, int chunks) {
  return 2 * (micro * chunks + chunk) + (gradient ? 1 : 0);
}

PipePeer pipe_peer(const PipeAction& a, int p, int rank, int v) {
  const bool towards_later = a.op == PipeOp::SendActivation || a.op == PipeOp::RecvGradient;
  const bool towards_earlier = a.op == PipeOp::RecvActivation || a.op == PipeOp::SendGradient;
  invariant(towards_later || towards_earlier, std::string("pipe_peer: ") + pipe_op_name(a.op) + " is not a message");
  const int stage = a.chunk * p + rank + (towards_later ? 1 : -1);
  invariant(stage >= 0 && stage < p * v, "pipe_peer: a message past the first or last stage");
  return {stage % p, stage / p};
}

int pipe_action_tag(const PipeAction& a, int p, int rank, int v) {
  const bool gradient = a.op == PipeOp::SendGradient || a.op == PipeOp::RecvGradient;
  const bool receiving = a.op == PipeOp::RecvActivation || a.op == PipeOp::RecvGradient;
  const int chunk = receiving ? a.chunk : pipe_peer(a, p, rank, v).chunk;
  return pipe_message_tag(gradient, a.micro, chunk, v);
}

double pipeline_bubble(int p, int m) { return double(p - 1) / double(m + p - 1); }

namespace {

// What has happened to one (micro, chunk) on its rank, for the data-flow checks.
struct MicroState {
  bool input = false, forward = false, output_grad = false, input_grad = false, weight_grad = false;
};

std::string where(int rank, const PipeAction& a) {
  return "rank " + std::to_string(rank) + ": " + pipe_op_name(a.op) + " of micro-batch " + std::to_string(a.micro) +
         " chunk " + std::to_string(a.chunk);
}

// The first data-flow rule `a` breaks on a stage of `stages` (empty if none); updates the state.
std::string apply(MicroState& st, const PipeAction& a, int stage, int stages) {
  const bool first = stage == 0, last = stage == stages - 1;
  switch (a.op) {
    case PipeOp::RecvActivation:
      if (first) return "stage 0 has no activation to receive";
      if (st.input) return "received twice";
      st.input = true;
      return "";
    case PipeOp::Forward:
      if (st.forward) return "forwarded twice";
      if (!first && !st.input) return "forward before its activation arrived";
      st.forward = true;
      return "";
    case PipeOp::SendActivation:
      if (last) return "the last stage has no activation to send";
      if (!st.forward) return "sent before its forward";
      return "";
    case PipeOp::RecvGradient:
      if (last) return "the last stage has no gradient to receive";
      if (st.output_grad) return "received twice";
      st.output_grad = true;
      return "";
    case PipeOp::Backward:
    case PipeOp::BackwardInput:
      if (!st.forward) return "backward before its forward";
      if (st.input_grad) return "backwarded twice";
      if (!last && !st.output_grad) return "backward before its output's gradient arrived";
      st.input_grad = true;
      st.weight_grad = a.op == PipeOp::Backward;
      return "";
    case PipeOp::BackwardWeight:
      if (!st.input_grad || st.weight_grad) return "weight gradient without a split input gradient before it";
      st.weight_grad = true;
      return "";
    case PipeOp::SendGradient:
      if (first) return "stage 0 has no gradient to send";
      if (!st.input_grad) return "sent before its backward";
      return "";
  }
  return "unknown op";
}

bool is_compute(PipeOp op) {
  return op == PipeOp::Forward || op == PipeOp::Backward || op == PipeOp::BackwardInput || op == PipeOp::BackwardWeight;
}

double cost_of(PipeOp op, const PipeCosts& c, int v) {
  switch (op) {
    case PipeOp::Forward: return c.forward / v;
    case PipeOp::Backward: return (c.backward_input + c.backward_weight) / v;
    case PipeOp::BackwardInput: return c.backward_input / v;
    case PipeOp::BackwardWeight: return c.backward_weight / v;
    default: return 0;
  }
}

constexpr int kMaxTimelineCells = 4096;  // the widest timeline row drawn, in cells

struct Slot {
  double start, end;
  PipeAction a;
};

// One row per rank, one cell per `unit` of time (the shortest action drawn): "F3" starts
// micro-batch 3's forward, dashes continue it, " . " is idle; with v > 1 the chunk is a
// letter (F3a, F3b).
std::string draw_timeline(const std::vector<std::vector<Slot>>& compute, double makespan, int v) {
  double unit = 0;
  for (const auto& row : compute)
    for (const Slot& s : row)
      if (const double d = s.end - s.start; d > 0 && (unit == 0 || d < unit)) unit = d;
  if (unit <= 0) return "";
  int width = 3;
  for (const auto& row : compute)
    for (const Slot& s : row)
      width = std::max(width, int(std::to_string(s.a.micro).size()) + (v > 1 ? 3 : 2));
  // A row as wide as the makespan in the shortest action's time: an action far shorter
  // than the others (tW near 0) would make it millions of cells wide, so such a timeline
  // is not drawn.
  const double width_in_cells = makespan / unit;
  if (!(width_in_cells <= kMaxTimelineCells)) {
    char note[160];
    std::snprintf(note, sizeof note,
                  "(timeline not drawn: %.3g cells wide at one cell per the shortest action's time, more than %d)\n",
                  width_in_cells, kMaxTimelineCells);
    return note;
  }
  const int cells = int(std::lround(width_in_cells));
  std::string out;
  for (size_t r = 0; r < compute.size(); ++r) {
    std::string idle(size_t(width), ' ');
    idle[size_t(width - 1) / 2] = '.';
    std::vector<std::string> row(size_t(cells), idle);
    for (const Slot& s : compute[r]) {
      const int c0 = int(std::lround(s.start / unit)), c1 = int(std::lround(s.end / unit));
      std::string label = s.a.op == PipeOp::Forward ? "F" : s.a.op == PipeOp::BackwardWeight ? "W" : "B";
      label += std::to_string(s.a.micro);
      if (v > 1) label += char('a' + s.a.chunk);
      label.resize(size_t(width), ' ');
      for (int c = c0; c < c1 && c < cells; ++c) row[size_t(c)] = c == c0 ? label : std::string(size_t(width), '-');
    }
    out += "rank " + std::to_string(r) + " |";
    for (const std::string& c : row) out += c;
    out += "|\n";
  }
  return out;
}

}  // namespace

PipeSimulation simulate_pipeline(const std::vector<PipeSchedule>& ranks, double tF, double tB) {
  return simulate_pipeline(ranks, PipeCosts{tF, tB, 0}, 1);
}

PipeSimulation simulate_pipeline(const std::vector<PipeSchedule>& ranks, const PipeCosts& costs, int v) {
  const int p = int(ranks.size());
  require(p >= 1 && v >= 1, "simulate_pipeline: needs at least one rank and one chunk");
  PipeSimulation sim;
  std::vector<size_t> pc(size_t(p), 0);
  std::vector<double> clock(size_t(p), 0.0), busy(size_t(p), 0.0);
  std::vector<int> in_flight(size_t(p), 0);
  sim.max_in_flight.assign(size_t(p), 0);
  std::vector<std::map<std::pair<int, int>, MicroState>> state(static_cast<size_t>(p));  // (micro, chunk)
  // (gradient?, micro, receiving rank, receiving chunk) -> the time the message was sent
  std::map<std::tuple<bool, int, int, int>, double> sent;
  std::vector<std::vector<Slot>> compute(static_cast<size_t>(p));
  auto violate = [&](const std::string& what) {
    if (sim.error.empty()) sim.error = what;
  };
  bool progress = true;
  while (progress && sim.error.empty()) {
    progress = false;
    for (int r = 0; r < p && sim.error.empty(); ++r) {
      while (pc[size_t(r)] < ranks[size_t(r)].size()) {
        const PipeAction& a = ranks[size_t(r)][pc[size_t(r)]];
        if (a.chunk < 0 || a.chunk >= v || a.micro < 0) {
          violate(where(r, a) + ": no such micro-batch or chunk (v = " + std::to_string(v) + ")");
          break;
        }
        double& t = clock[size_t(r)];
        const bool grad = a.op == PipeOp::SendGradient || a.op == PipeOp::RecvGradient;
        if (a.op == PipeOp::RecvActivation || a.op == PipeOp::RecvGradient) {
          if (a.chunk * p + r == (grad ? p * v - 1 : 0)) {
            violate(where(r, a) + ": " + apply(state[size_t(r)][{a.micro, a.chunk}], a, a.chunk * p + r, p * v));
            break;
          }
          const auto it = sent.find({grad, a.micro, r, a.chunk});
          if (it == sent.end()) break;  // blocked until the sender gets there
          t = std::max(t, it->second);
          sent.erase(it);
        }
        const std::string broken = apply(state[size_t(r)][{a.micro, a.chunk}], a, a.chunk * p + r, p * v);
        if (!broken.empty()) {
          violate(where(r, a) + ": " + broken);
          break;
        }
        if (a.op == PipeOp::SendActivation || a.op == PipeOp::SendGradient) {
          const PipePeer to = pipe_peer(a, p, r, v);
          sent[{grad, a.micro, to.rank, to.chunk}] = t;
        } else if (is_compute(a.op)) {
          const double cost = cost_of(a.op, costs, v);
          compute[size_t(r)].push_back({t, t + cost, a});
          t += cost, busy[size_t(r)] += cost;
          if (a.op == PipeOp::Forward) ++in_flight[size_t(r)];
          if (a.op == PipeOp::Backward || a.op == PipeOp::BackwardWeight) --in_flight[size_t(r)];
          sim.max_in_flight[size_t(r)] = std::max(sim.max_in_flight[size_t(r)], in_flight[size_t(r)]);
        }
        ++pc[size_t(r)];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p && sim.error.empty(); ++r)
    if (pc[size_t(r)] < ranks[size_t(r)].size()) {
      sim.deadlock = true;
      sim.stuck += "rank " + std::to_string(r) + " waits at " + pipe_op_name(ranks[size_t(r)][pc[size_t(r)]].op) +
                   " of micro-batch " + std::to_string(ranks[size_t(r)][pc[size_t(r)]].micro) + " chunk " +
                   std::to_string(ranks[size_t(r)][pc[size_t(r)]].chunk) + "; ";
    }
  if (!sim.deadlock) {
    for (int r = 0; r < p; ++r)
      for (const auto& [key, st] : state[size_t(r)])
        if (st.forward && !st.weight_grad)
          violate("rank " + std::to_string(r) + ": micro-batch " + std::to_string(key.first) + " chunk " +
                  std::to_string(key.second) + " forwarded, its backward never completed");
    if (!sent.empty())
      violate("a message to rank " + std::to_string(std::get<2>(sent.begin()->first)) + " is never received");
  }
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < p; ++r) sim.bubble.push_back(sim.makespan > 0 ? 1.0 - busy[size_t(r)] / sim.makespan : 0.0);
  sim.timeline = draw_timeline(compute, sim.makespan, v);
  return sim;
}

}  // namespace gpt
