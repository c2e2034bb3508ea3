// A model split over ranks, made whole again: for the end-of-run sample and the
// multiple-choice eval, which run the whole model on one rank (or on each).
//
// Every rank holds slices of the global tensors (a tensor-parallel slice, a pipeline
// stage's layers, a ZeRO-3 shard gathered first), described by a RankLayout. Each rank
// writes the elements it counts into a buffer of zeros at their global offsets, and the
// world sums the buffers:
//
//   whole[g] = sum over ranks of (g counted by the rank ? local[g] : +0)  =  local[g]
//
// exact in any type, bf16 included, since one rank counts each element and x + 0 = x.
// A window of the global buffer at a time, so that no rank but the receiver holds a
// whole model.
#pragma once
#include <cstdint>
#include <vector>

#include "common/comm.h"
#include "common/rank_layout.h"
#include "common/whole_model.h"

namespace gpt {

// Elements a gather adds at a time (`window`): 16 Mi, 64 MiB of fp32, the most every
// other rank holds while the lead receives the model.
constexpr int64_t kGatherWindow = int64_t(1) << 24;

// One of a rank's local buffers: one, or one per model chunk in an interleaved pipeline.
template <class A>
struct LocalPart {
  const RankLayout* slices;     // which global elements the buffer holds
  const std::vector<A>* local;  // the buffer (LocalZero::local_weights)
};

// The whole model's weights on world rank 0 (empty elsewhere), for the sample, or on
// every rank (`on`), for the multiple-choice eval, from every rank's `parts`. `counted`:
// whether this rank counts its replicas (one rank per replica group). In host memory (the
// sampling model reads them from its device: on_device, device_array.h). Collective over
// the world.
template <class A>
std::vector<A> gather_whole_model(Communicator& world, const std::vector<LocalPart<A>>& parts, bool counted,
                                  WholeOn on = WholeOn::Lead, int64_t window = kGatherWindow);

// The same for one local buffer.
template <class A>
std::vector<A> gather_whole_model(Communicator& world, const RankLayout& slices, const std::vector<A>& local,
                                  bool counted, WholeOn on = WholeOn::Lead, int64_t window = kGatherWindow) {
  return gather_whole_model(world, std::vector<LocalPart<A>>{{&slices, &local}}, counted, on, window);
}

}  // namespace gpt
