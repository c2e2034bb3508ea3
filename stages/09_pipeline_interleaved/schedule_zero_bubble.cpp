// Zero-bubble ZB-H1; see schedule_zero_bubble.h.
#include "stages/09_pipeline_interleaved/schedule_zero_bubble.h"

#include <algorithm>

namespace gpt {

PipeSchedule zb_h1_schedule(int p, int rank, int m) {
  check_pipeline_shape(p, rank, m);
  PipeSchedule s;
  const int warmup = std::min(p - 1 - rank, m);
  int f = 0, w = 0;
  while (f < warmup) append_forward(s, p, rank, 1, f++, 0);
  for (int b = 0; b < m; ++b) {
    if (f < m) append_forward(s, p, rank, 1, f++, 0);
    append_backward(s, p, rank, 1, b, 0, PipeOp::BackwardInput);
    if (b >= rank) s.push_back({PipeOp::BackwardWeight, w++, 0});
  }
  while (w < m) s.push_back({PipeOp::BackwardWeight, w++, 0});
  return s;
}

double zb_h1_bubble(int p, int m, const PipeCosts& c) {
  const double filled = std::min({c.backward_weight, c.forward, c.backward_input});  // by each deferred W
  const double idle = (p - 1) * (c.forward + c.backward_input) - (std::min(m, p) - 1) * filled;
  return idle / (idle + m * (c.forward + c.backward_input + c.backward_weight));
}

int zb_h1_max_in_flight(int p, int m) { return std::min(p, m); }

}  // namespace gpt
