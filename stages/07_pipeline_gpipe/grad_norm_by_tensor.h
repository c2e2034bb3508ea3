// The global gradient norm of a pipeline, the same bits whichever rank holds which layers.
//
//   |g|^2 = sum over tensors t (in the model's order) of  s_t,   s_t = sum of g_i^2 over t
//
// Each rank computes its part of s_t for the tensors it counts (in double, one
// ops::sum_of_squares per contiguous piece of the tensor, added in order), the world
// all-gathers the per-tensor vectors, and every rank adds, for each tensor, the ranks'
// parts in world-rank order, then the tensors in the model's order. A tensor's parts
// come from the ranks of one pipeline stage (its tensor-parallel slices, the
// data-parallel shards it spans), and for a fixed stage the world ranks are
// ordered by (dp, cp, tp) alone (common/mesh.h), so the parts are added in the same order
// whichever stage holds the tensor; adding the other ranks' zeros is exact. Summing each
// rank's total instead would group the tensors by rank, and schedules that assign layers
// to ranks differently (GPipe and 1F1B give rank r one range of layers, interleaving
// several) would round the norm differently, and with it the clipping scale and the bits
// of every weight. What remains is the split of a tensor between data-parallel shards:
// interleaved chunks are sharded one chunk at a time, so a tensor's boundary may fall
// elsewhere, its parts are other partial sums, and the norm may differ in its last bits
// (tests/pipeline/exact_pair.sh holds such runs' norms to that rounding).
#pragma once
#include <vector>

#include "common/comm.h"
#include "stages/06_tensor_parallel/local_zero.h"

namespace gpt {

// The norm of the gradients held by `chunks` (this rank's model chunks' ZeRO ranges) on
// every rank of `world`; n_tensors: the global layout's tensor count. Collective.
template <class A>
double grad_norm_by_tensor(Communicator& world, const std::vector<LocalZero<A>*>& chunks, size_t n_tensors);

}  // namespace gpt
