// The block activations a rank's chunks share; see block_pool.h.
#include "common/block_pool.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "common/memory.h"

namespace gpt {

template <class A>
BlockPool<A>::BlockPool(int sets, int layers, Device d, const BlockDims& dims, int B, int T, int rows,
                        BlockBuffers which) {
  invariant(sets >= 1 && layers >= 1, "BlockPool: at least one set of one block");
  const MemScope scope(MemKind::Activations);
  sets_.resize(size_t(sets));
  for (std::vector<BlockActivations<A>>& set : sets_)
    for (int l = 0; l < layers; ++l) set.emplace_back(d, dims, B, T, rows, which);
  for (int i = sets - 1; i >= 0; --i) free_.push_back(i);  // set 0 is taken first
}

template <class A>
int BlockPool<A>::acquire() {
  invariant(!free_.empty(), "BlockPool: all " + std::to_string(size()) + " sets are held (a schedule keeps more "
                                "micro-batches in flight than the pool was made for)");
  const int set = free_.back();
  free_.pop_back();
  return set;
}

template <class A>
void BlockPool<A>::release(int set) {
  invariant(set >= 0 && set < size() && std::find(free_.begin(), free_.end(), set) == free_.end(),
            "BlockPool: set " + std::to_string(set) + " released but not held");
  free_.push_back(set);
}

template <class A>
size_t BlockPool<A>::bytes() const {
  size_t n = 0;
  for (const std::vector<BlockActivations<A>>& set : sets_)
    for (const BlockActivations<A>& b : set) n += b.bytes();
  return n;
}

template class BlockPool<float>;
template class BlockPool<double>;
template class BlockPool<bf16>;

}  // namespace gpt
