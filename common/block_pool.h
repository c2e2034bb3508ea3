/// @file
/// Block activations a rank's pipeline chunks share (ModelSlice::block_pool).
///
/// An interleaved rank runs v model chunks, each keeping its blocks' activations for the
/// micro-batches between their forward and their backward. Were every chunk to hold the
/// most it ever keeps, the rank would hold the sum of the chunks' peaks, but the chunks
/// peak at different times: in interleaved 1F1B at p = 4, v = 2, m = 8, rank 0's chunks
/// keep at most 8 and 4 micro-batches, yet never more than 8 together. So the blocks'
/// activations (nearly all of a micro-batch's) come from one pool of sets, as many as
/// the rank's schedule keeps in flight at once over all its chunks:
/// ```
///   per chunk, every slot      sum over chunks of max in flight      8 + 4 = 12 sets
///   one pool for the rank      max over time of the sum in flight    8 sets
/// ```
/// A micro-batch takes a set at its forward and gives it back after its backward (the
/// weight half, under a split backward); a set holds `layers` blocks, the most any chunk
/// runs (so a rank makes a pool only where it saves memory: stage 09's block_pool_shape).
/// The rest of a slot (the stage's input and its gradient, the head, the token ids) stays
/// the chunk's own.
#pragma once
#include <cstddef>
#include <vector>

#include "common/model_block.h"

namespace gpt {

/// The pool of one rank: `A` is the storage of the activations (float, bf16, or double).
template <class A>
class BlockPool {
 public:
  BlockPool() = default;
  /// `sets` sets of `layers` blocks' `which` buffers each, as BlockActivations makes them
  /// (B sequences of T tokens, `rows` residual rows), counted as activations.
  BlockPool(int sets, int layers, Device d, const BlockDims& dims, int B, int T, int rows, BlockBuffers which);
  /// A free set's index; an internal error when every set is held (a schedule that keeps
  /// more micro-batches in flight than the pool was made for).
  int acquire();
  void release(int set);  ///< gives set `set` back; it must be held
  /// Set i: layers() blocks' activations, block l of a chunk's layers in set(i)[l].
  std::vector<BlockActivations<A>>& set(int i) { return sets_[size_t(i)]; }
  /// Set i, read-only.
  const std::vector<BlockActivations<A>>& set(int i) const { return sets_[size_t(i)]; }
  int size() const { return int(sets_.size()); }   ///< sets in all
  int layers() const { return sets_.empty() ? 0 : int(sets_.front().size()); }  ///< blocks a set holds
  int held() const { return size() - int(free_.size()); }  ///< sets acquired and not released
  size_t bytes() const;  ///< of every set, held or free: what the pool's owner counts

 private:
  std::vector<std::vector<BlockActivations<A>>> sets_;
  std::vector<int> free_;  // a stack: the set released last is taken first
};

}  // namespace gpt
