/// @file
/// Between rank-local layouts and the flat global buffer, across ranks: what lets a
/// checkpoint written by any layout load into any other.
///
/// The global buffer is cut into comm.size() even contiguous shards, shard r on rank r
/// (the writers of a sharded checkpoint, common/checkpoint.h). local_to_flat sends every
/// COUNTED element of each rank's local buffer to the rank whose shard holds it (a
/// replica travels once); flat_to_local brings every element a rank holds (replicas
/// included) from the shards. Both are collective, and are built on point-to-point
/// messages: per pair of ranks, a list of (global offset, length) pieces and their values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/comm.h"
#include "common/rank_layout.h"

namespace gpt {

/// Elements [begin, end) of the flat global buffer: one rank's shard.
struct FlatShard {
  /// The shard's first element.
  int64_t begin = 0, end = 0;  ///< one past the shard's last element
  int64_t size() const { return end - begin; }  ///< elements in the shard
};
/// Shard `rank` of `ranks` even shards of [0, total).
FlatShard flat_shard(int64_t total, int ranks, int rank);

/// shard_out (this rank's flat shard) receives the counted elements every rank holds
/// there; the counted elements of all ranks must cover the global buffer exactly once.
void local_to_flat(Communicator& comm, const RankLayout& layout, const float* local, float* shard_out);
/// local receives all of its elements from the ranks' flat shards.
void flat_to_local(Communicator& comm, const RankLayout& layout, const float* shard, float* local);

/// A checkpoint of local buffers (kind -> this rank's local buffer of `layout`), written
/// together by every rank of comm through the flat shards, and read back into any layout.
struct LocalBuffer {
  std::string kind;  ///< "param", "adam_m", "adam_v"
  float* data;       ///< layout.total() elements
};
/// Writes the checkpoint of state.step from every rank's local buffers: each kind is
/// moved into the flat shards (local_to_flat), which save_checkpoint_sharded writes.
/// Collective; returns the checkpoint's path on every rank.
std::string save_checkpoint_local(Communicator& comm, const std::string& run_dir, const Config& cfg,
                                  const RankLayout& layout, const CheckpointState& state,
                                  const std::vector<LocalBuffer>& buffers);
/// Reads checkpoint `path` (written by any layout) into every rank's local buffers: each
/// rank loads its flat shard (load_checkpoint_sharded: an error on any rank is thrown on
/// every rank), then flat_to_local fills the local buffers, replicas included.
/// Collective; returns the checkpoint's state.
CheckpointState load_checkpoint_local(Communicator& comm, const std::string& path, const RankLayout& layout,
                                      const std::vector<LocalBuffer>& buffers);

}  // namespace gpt
