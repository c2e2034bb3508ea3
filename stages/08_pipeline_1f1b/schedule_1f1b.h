// The one-forward-one-backward schedule (1F1B; Narayanan et al. 2021, PipeDream-Flush):
// rank r of p runs a warm-up of
//
//   w = min(p - r - 1, m)
//
// forwards, then alternates one forward and one backward, then drains the remaining w
// backwards. The warm-up is just long enough that the gradient of the rank's oldest
// micro-batch arrives as it finishes the next forward (it travelled down p - r - 1 ranks
// and back), so rank r holds at most
//
//   min(p - r, m)
//
// micro-batches' activations, GPipe m. The bubble is GPipe's, (p - 1) / (m + p - 1):
// 1F1B saves memory, not time. p = 4, m = 6, tB = 2 tF:
//
//   rank 0 |F0 F1 F2 F3  .  .  .  .  .  . B0 ---F4 B1 ---F5 B2 --- . B3 --- . B4 --- . B5 ---|
//   rank 3 | .  .  . F0 B0 ---F1 B1 ---F2 B2 ---F3 B3 ---F4 B4 ---F5 B5 --- .  .  .  .  .  . |
//
// Backwards still run in micro-batch order, so the gradients' bits are GPipe's.
#pragma once
#include <algorithm>

#include "stages/07_pipeline_gpipe/schedule.h"

namespace gpt {

// The actions of `rank` of p for m micro-batches. A UserError for p < 1 or m < 1.
PipeSchedule one_f_one_b_schedule(int p, int rank, int m);
// The most micro-batches whose activations rank r holds at once: min(p - r, m) (above).
inline int one_f_one_b_max_in_flight(int p, int rank, int m) { return std::min(p - rank, m); }

}  // namespace gpt
