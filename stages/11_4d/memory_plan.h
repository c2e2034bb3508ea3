// What each rank of stage 11 will hold, from the configuration alone: the formulas a run
// prints beside its allocations after its first step (pipeline_report.h, memory_line),
// evaluated before anything is allocated, for a mesh of any size (build/bin/memory_plan).
//
// Rank (dp d, pp r, cp k, tp t) of a dp x pp x cp x tp mesh holds v chunks; chunk c is
// virtual stage s = c p + r of v p, layers stage_layers(n_layer, v p, s) in tp slice t:
//
//   weights, gradients, optimizer   local_zero_memory (stage 06) of each chunk's layers,
//                                   sharded over the dp x cp ranks that hold the same
//                                   slice (index d cp + k among them)
//   activations                     activation_memory (stage 06) of each chunk, on B
//                                   sequences of T/cp tokens, with the slots the schedule
//                                   keeps in flight on it (max_in_flight of rank r's
//                                   schedule); with several chunks their blocks' in one
//                                   pool of as many sets as the rank keeps in flight at
//                                   once where that saves memory (block_pool_shape,
//                                   block_pool_memory); under recompute one working set
//                                   the rank's chunks share
//
// Under ZeRO-3 with several chunks the gathered weights have no closed form (each chunk
// gathers at its own times): the plan leaves them at 0, as the run's line shows "-". Not
// counted, as in the run's formula: the communication buffers (MemKind::Buffers) and the
// whole-model copies a sample or an evaluation makes at the end (MemKind::Eval).
#pragma once
#include <vector>

#include "common/config.h"
#include "common/gpt2_layout.h"
#include "common/memory.h"
#include "common/mesh.h"

namespace gpt {

// One model chunk of a rank: its virtual stage, layers and activation slots.
struct ChunkPlan {
  int stage = 0;
  LayerRange layers;
  int slots = 0;
};

struct RankPlan {
  MeshCoord coord;
  std::vector<ChunkPlan> chunks;
  int block_pool_sets = 0;  // the sets of the block pool the chunks share (0: none)
  MemoryLedger memory;  // params, grads, optimizer and activations at the peak, in bytes
};

// The plan of world rank `world_rank` of `shape`, for a configuration validate(cfg,
// shape.dp, this_machine=false) and check_4d (stage_spec.h) have passed.
RankPlan plan_rank(const Config& cfg, const MeshShape& shape, int world_rank);

}  // namespace gpt
