// How the ZeRO stages cut the model over the dp ranks: the flat parameter buffer (P
// elements, layout order) is split by the ring's chunk rule, so rank r owns
//     shard r = [ floor(r P / N), floor((r+1) P / N) )
// — contiguous, sizes differ by at most one element (N = 3 works as well as N = 4),
// and exactly the chunk ring_reduce_scatter leaves summed on rank r. A shard may cut
// through a tensor; nothing cares, since the optimizer and the checkpoint work on
// ranges of the flat buffer.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "stages/02_ddp/ring_allreduce.h"

namespace gpt {

struct Shard {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

inline Shard shard_of(int64_t total, int ranks, int rank) {
  return {int64_t(ring_chunk_begin(size_t(total), ranks, rank)),
          int64_t(ring_chunk_begin(size_t(total), ranks, rank + 1))};
}

// The chunk bounds, relative to `begin`, that cut the range [begin, end) of the flat
// buffer along the shards: chunk r is the part of the range rank r owns. Feeding them
// to ring_reduce_scatter_v reduces a bucket straight into every rank's shard.
inline std::vector<size_t> shard_bounds_within(int64_t begin, int64_t end, int64_t total, int ranks) {
  std::vector<size_t> bounds(size_t(ranks) + 1);
  for (int r = 0; r <= ranks; ++r) {
    const int64_t edge = int64_t(ring_chunk_begin(size_t(total), ranks, r));
    bounds[r] = size_t(std::clamp(edge, begin, end) - begin);
  }
  return bounds;
}

}  // namespace gpt
