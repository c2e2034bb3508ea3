// What every pipeline schedule of stages 07-09 must satisfy, checked on the lists of
// actions of all ranks (the simulator checks the timing and the data flow):
//   - each (micro, chunk) is forwarded exactly once and its backward completed exactly
//     once (a Backward, or a BackwardInput followed by a BackwardWeight);
//   - on each chunk the backwards, and the weight gradients, run in micro-batch order
//     0..m-1, so gradients accumulate in the order of the non-pipelined run;
//   - every send has one receive at pipe_peer with the same tag (pipe_action_tag), and
//     no two messages between the same ranks share a tag.
// schedule_problems returns what is broken, or an empty string.
#pragma once
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "stages/07_pipeline_gpipe/schedule.h"

namespace gpt::test {

inline std::string schedule_problems(const std::vector<PipeSchedule>& ranks, int m, int v) {
  const int p = int(ranks.size());
  std::string out;
  // (from, to, tag) of the sends and of the receives
  std::multiset<std::tuple<int, int, int>> sends, recvs;
  for (int r = 0; r < p; ++r) {
    const std::string at = "rank " + std::to_string(r) + ": ";
    std::map<std::pair<int, int>, int> forwards, input_grads, weight_grads;  // (micro, chunk) -> count
    std::vector<int> next_input(size_t(v), 0), next_weight(size_t(v), 0);   // per chunk: the micro due
    for (const PipeAction& a : ranks[size_t(r)]) {
      const std::string what = std::string(pipe_op_name(a.op)) + " of micro-batch " + std::to_string(a.micro) +
                               " chunk " + std::to_string(a.chunk);
      if (a.micro < 0 || a.micro >= m || a.chunk < 0 || a.chunk >= v) {
        out += at + what + ": out of range; ";
        continue;
      }
      const std::pair<int, int> key{a.micro, a.chunk};
      switch (a.op) {
        case PipeOp::Forward: ++forwards[key]; break;
        case PipeOp::Backward:
        case PipeOp::BackwardInput:
          if (a.micro != next_input[size_t(a.chunk)]) out += at + what + ": out of micro-batch order; ";
          next_input[size_t(a.chunk)] = a.micro + 1;
          ++input_grads[key];
          if (a.op == PipeOp::BackwardInput) break;
          [[fallthrough]];
        case PipeOp::BackwardWeight:
          if (a.micro != next_weight[size_t(a.chunk)]) out += at + what + ": weight gradient out of micro-batch order; ";
          next_weight[size_t(a.chunk)] = a.micro + 1;
          ++weight_grads[key];
          break;
        case PipeOp::SendActivation:
        case PipeOp::SendGradient: sends.insert({r, pipe_peer(a, p, r, v).rank, pipe_action_tag(a, p, r, v)}); break;
        case PipeOp::RecvActivation:
        case PipeOp::RecvGradient: recvs.insert({pipe_peer(a, p, r, v).rank, r, pipe_action_tag(a, p, r, v)}); break;
      }
    }
    for (int i = 0; i < m; ++i)
      for (int c = 0; c < v; ++c) {
        const std::pair<int, int> key{i, c};
        const std::string mc = "micro-batch " + std::to_string(i) + " chunk " + std::to_string(c);
        if (forwards[key] != 1) out += at + mc + " forwarded " + std::to_string(forwards[key]) + " times; ";
        if (input_grads[key] != 1 || weight_grads[key] != 1) out += at + mc + " backwarded other than once; ";
      }
  }
  if (sends != recvs) out += "sends and receives do not pair up by (from, to, tag); ";
  if (std::set<std::tuple<int, int, int>>(sends.begin(), sends.end()).size() != sends.size())
    out += "two messages between the same ranks share a tag; ";
  return out;
}

}  // namespace gpt::test
