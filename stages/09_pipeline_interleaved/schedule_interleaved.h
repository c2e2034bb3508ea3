// Interleaved 1F1B (Narayanan et al. 2021): each rank holds v model chunks instead of
// one contiguous range, rank r the chunks r, r+p, ..., r+(v-1)p of the p*v stages, so a
// micro-batch crosses every rank v times and the pipeline fills v times faster:
//
//   p = 2, v = 2:  stage 0 (rank 0) -> 1 (rank 1) -> 2 (rank 0) -> 3 (rank 1)
//
// Forwards go through micro-batches in groups of g: a rank runs chunk 0 for the group's
// g micro-batches, then chunk 1 for the same g, ..., then the next group; backwards the
// same with the chunks in reverse. A group holds at least p micro-batches, so that by
// the time a rank comes back to a group's first micro-batch on the next chunk, that
// micro-batch has been round the ring of p ranks. The m micro-batches are cut into
// floor(m/p) groups of nearly equal size, the larger first (m = 7, p = 3: 4 + 3), so any
// m works; with m < p there is one group of m and each chunk waits for the ring. The
// warm-up below is sized by the first group, so a first group shorter than the others
// would start a backward before its forward: the split never makes one.
//
// Warm-up: rank r runs
//
//   w = min(v m, (v - 1) g0 + p - 1 - r)        (g0: the first group's size)
//
// forwards before its first backward: the chunks before the last for the first group,
// then 1F1B's warm-up on the last chunk (the backward of micro-batch 0's last chunk
// needs it to have gone to stage p v - 1 and back). Then one forward and one backward
// alternate, then the remaining backwards drain. So rank r holds at most
//
//   min(v m, (v - 1) g0 + p - r)  chunk activations (each 1/v of a micro-batch's).
//
// Megatron-LM warms up with 2 (p - 1 - r) after the (v - 1) g; on this machine model,
// with non-blocking sends, the shorter warm-up is free of deadlock, as fast in the
// simulator, and holds p - 1 - r fewer chunk activations.
//
// A chunk's forward and backward take 1/v of the rank's, and the pipeline fills and
// drains in p - 1 chunk steps instead of p - 1 rank steps, so for m >= p
//
//   bubble = (p - 1) / (v m + p - 1)
//
// and for m < p, where each chunk waits for the ring, (v (p - m) + m - 1) / (v p + m - 1).
// With v = 1 this is exactly 1F1B. Backwards of each chunk run in micro-batch order, so
// the gradients accumulate as in stages 07 and 08.
#pragma once
#include "stages/07_pipeline_gpipe/schedule.h"

namespace gpt {

// The actions of `rank` of p with v chunks, for m micro-batches. A UserError for p, m or
// v < 1.
PipeSchedule interleaved_schedule(int p, int rank, int m, int v);

// The sizes of the micro-batch groups above (sum m).
std::vector<int> interleaved_groups(int p, int m);
// The theory: the bubble and the most chunk activations rank r holds.
double interleaved_bubble(int p, int m, int v);
int interleaved_max_in_flight(int p, int rank, int m, int v);

}  // namespace gpt
