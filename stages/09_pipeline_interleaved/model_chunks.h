// A rank's model chunks in an interleaved pipeline. With v chunks per rank, the model's
// layers are cut into v p virtual stages and rank r holds stages r, r + p, ..., r + (v-1) p:
//
//   chunk c of rank r  =  virtual stage s = c p + r  =  layers stage_layers(n_layer, v p, s)
//
//   p = 2, v = 2, 8 layers:   rank 0: layers 0-1 (+ embeddings) and 4-5
//                             rank 1: layers 2-3 and 6-7 (+ ln_f and the head)
//
// Each chunk is a stage-07 stage on its own: a GPT2 slice with its activation slots, its
// local layout, the ZeRO stage of `zero` over dp, the layernorm sums of sequence
// parallelism and the tied embedding's store. ChunkCheckpoint writes a rank's chunks as
// one rank-local layout (checkpoints are written by one collective call per rank).
#pragma once
#include <memory>
#include <vector>

#include "common/checkpoint.h"
#include "common/comm_counter.h"
#include "common/comm.h"
#include "common/config.h"
#include "common/gpt2.h"
#include "common/rank_layout.h"
#include "common/whole_model.h"
#include "stages/06_tensor_parallel/gather_whole.h"
#include "stages/06_tensor_parallel/local_zero.h"
#include "stages/06_tensor_parallel/sequence_parallel_grads.h"
#include "stages/06_tensor_parallel/tp_budget.h"
#include "stages/06_tensor_parallel/tp_hooks.h"
#include "stages/07_pipeline_gpipe/schedule.h"
#include "stages/07_pipeline_gpipe/tied_embedding.h"

namespace gpt {

// A: the storage of weights and activations (float, or bf16 in bf16 mode).
template <class A>
struct ModelChunk {
  // The blocks' activations the rank's chunks share (common/block_pool.h, block_pool_shape);
  // null where it would not save memory (one chunk, whose slots are the rank's in flight;
  // full recompute; uneven layers that outweigh it). Before `model`, which uses it, so
  // that it outlives it.
  std::shared_ptr<BlockPool<A>> block_pool;
  // The chunk's own copy of the dp group: each chunk's store reduces its buckets on a
  // communication thread of its own, and collectives on one communicator must come in
  // the same order on every rank, which two threads cannot promise.
  std::unique_ptr<Communicator> dp;
  std::unique_ptr<GPT2<A>> model;
  std::unique_ptr<RankLayout> slices;  // the chunk's part of the global tensors
  std::unique_ptr<LocalZero<A>> zero;
  std::unique_ptr<SequenceParallelGrads<A>> sp_grads;
  // The store the model runs through, on every chunk: where the chunk holds the tied wte
  // (the first or the last stage) it sums wte's gradient with the other end's; elsewhere
  // it passes every gradient straight to the stores beneath.
  std::unique_ptr<TiedEmbeddingGrads<A>> tied;
};

// The layers of each of pp rank r's v chunks, over p ranks: chunk c runs virtual stage
// c p + r of v p, stage_layers(n_layer, v p, c p + r).
std::vector<LayerRange> rank_chunk_layers(int n_layer, int p, int v, int r);

// The block pool a rank's chunks share (common/block_pool.h), for chunks running
// `chunk_layers` under `schedule`: one set per micro-batch the rank keeps in flight at once
// (max_in_flight over all chunks), each of the most layers a chunk runs; none (sets 0)
// under full recompute (no block's are kept), and where the chunks' own slots would hold
// no more (the sum over chunks of max_in_flight times its layers: with uneven layers a
// pool's sets, each as deep as the deepest chunk, can hold more).
struct BlockPoolShape {
  int sets = 0, layers = 0;
};
BlockPoolShape block_pool_shape(const PipeSchedule& schedule, const std::vector<LayerRange>& chunk_layers,
                                Recompute recompute);

// The v = cfg.virtual_stages chunks of this rank (pp rank r of p, tp rank of tp), each
// with the activation slots `schedule` needs on it; `ends`: tied_embedding_group(pp).
// `slice` is how every chunk holds its layers (tensor-parallel slice and hooks, and in
// later stages token positions and recompute); its layers, in_flight and split_backward
// are set here per chunk. seq_len: tokens of each sequence this rank runs.
// The weights are not initialised: the caller initialises or loads the masters, then
// calls weights_from_master() on each chunk's zero.
template <class A>
std::vector<ModelChunk<A>> make_model_chunks(const Config& cfg, const ParamLayout& global,
                                             const PipeSchedule& schedule, Communicator& pp, Communicator& tp,
                                             Communicator& dp, Communicator* ends, const ModelSlice<A>& slice,
                                             int seq_len, Device device, Precision precision);

// The whole model's weights on world rank 0 (empty elsewhere), or on every rank (`on`):
// every chunk's local weights, gathered at once (gather_whole_model). Collective over the
// world, and over each chunk's dp group with zero = 3. counted: as gather_whole_model's.
template <class A>
std::vector<A> gather_chunks(Communicator& world, std::vector<ModelChunk<A>>& chunks, bool counted,
                             WholeOn on = WholeOn::Lead);

// One step's traffic over dp of all the rank's chunks (each chunk's store reduces and
// gathers its own layers: LocalZero::step_traffic with the chunk's passes in `schedule`,
// and its tied wte where it holds an end of it), for m micro-batches.
template <class A>
CommTally chunks_dp_traffic(const std::vector<ModelChunk<A>>& chunks, const PipeSchedule& schedule, int m);
// One step's traffic over tp of all the rank's chunks: stage 06's tp_step_traffic of each
// chunk's layers (with the embedding on the chunk that runs layer 0, the head on the one
// that runs the last).
template <class A>
CommTally chunks_tp_traffic(const std::vector<ModelChunk<A>>& chunks, const TpStep& step);

// The rank's chunks' weights, gradients and optimizer state at their peak: the sum of
// each chunk's LocalZero::memory_formula. Under ZeRO-3 with several chunks the weights'
// is left at 0 (no closed form): each chunk gathers its units at its own times, and which
// of another chunk's stay gathered meanwhile depends on the schedule. The activations:
// with_activations of the chunks (pipeline_report.h).
template <class A>
MemoryLedger chunks_memory_formula(const std::vector<ModelChunk<A>>& chunks);

// What the rank's chunks sent over dp in the last step, as counted: the sum of each
// chunk's LocalZero::step_counted, the count that chunks_dp_traffic is the formula of.
template <class A>
CommTally chunks_dp_counted(const std::vector<ModelChunk<A>>& chunks);

// A rank's chunks as one checkpoint: the tensors of every chunk's ZeRO range in the
// model's order (a RankLayout must list them so; wte, the last chunk's on rank p - 1,
// comes first) and their values copied into contiguous buffers before a checkpoint is
// written (pack) and back into the chunks after one is read (unpack). The buffers are the
// fp32 master weights and moments, whatever A.
template <class A>
class ChunkCheckpoint {
 public:
  ChunkCheckpoint(const ParamLayout& global, std::vector<ModelChunk<A>>& chunks);
  const RankLayout& layout() const { return layout_; }
  std::vector<CheckpointBuffer> buffers();  // param, adam_m, adam_v of the packed layout
  void pack();
  void unpack();

 private:
  struct Piece {
    int chunk;
    int64_t chunk_offset, packed_offset, count;  // count elements from each offset
  };
  std::vector<ModelChunk<A>>& chunks_;
  RankLayout layout_;
  std::vector<Piece> pieces_;
  std::vector<std::vector<float>> packed_;  // per kind
  std::vector<std::string> kinds_;
};

}  // namespace gpt
