// The 1F1B schedule; see schedule_1f1b.h.
#include "stages/08_pipeline_1f1b/schedule_1f1b.h"

#include <algorithm>

namespace gpt {

PipeSchedule one_f_one_b_schedule(int p, int rank, int m) {
  check_pipeline_shape(p, rank, m);
  PipeSchedule s;
  const int warmup = std::min(p - rank - 1, m);
  int f = 0, b = 0;
  while (f < warmup) append_forward(s, p, rank, 1, f++, 0);
  while (f < m) {  // steady state: one forward, one backward
    append_forward(s, p, rank, 1, f++, 0);
    append_backward(s, p, rank, 1, b++, 0);
  }
  while (b < m) append_backward(s, p, rank, 1, b++, 0);  // cool-down
  return s;
}

}  // namespace gpt
