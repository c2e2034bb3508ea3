// A rank's model chunks and their checkpoint; see model_chunks.h.
#include "stages/09_pipeline_interleaved/model_chunks.h"

#include <algorithm>
#include <tuple>

#include "common/error.h"
#include "stages/07_pipeline_gpipe/pipeline_config.h"
#include "stages/07_pipeline_gpipe/pipeline_executor.h"
#include "stages/07_pipeline_gpipe/pipeline_report.h"

namespace gpt {

std::vector<LayerRange> rank_chunk_layers(int n_layer, int p, int v, int r) {
  std::vector<LayerRange> layers;
  for (int c = 0; c < v; ++c) layers.push_back(stage_layers(n_layer, v * p, c * p + r));
  return layers;
}

BlockPoolShape block_pool_shape(const PipeSchedule& schedule, const std::vector<LayerRange>& chunk_layers,
                                Recompute recompute) {
  BlockPoolShape pool;
  if (chunk_layers.size() < 2 || recompute == Recompute::Full) return pool;
  int64_t own_slots = 0;  // blocks the chunks' own slots would keep
  for (size_t c = 0; c < chunk_layers.size(); ++c) {
    const int layers = chunk_layers[c].end - chunk_layers[c].begin;
    own_slots += int64_t(max_in_flight(schedule, int(c))) * layers;
    pool.layers = std::max(pool.layers, layers);
  }
  pool.sets = max_in_flight(schedule, kAllChunks);
  if (int64_t(pool.sets) * pool.layers >= own_slots) pool.sets = 0;
  return pool;
}

template <class A>
std::vector<ModelChunk<A>> make_model_chunks(const Config& cfg, const ParamLayout& global,
                                             const PipeSchedule& schedule, Communicator& pp, Communicator& tp,
                                             Communicator& dp, Communicator* ends, const ModelSlice<A>& slice,
                                             int seq_len, Device device, Precision precision) {
  const int p = pp.size(), v = cfg.virtual_stages, stages = p * v;
  const RankLayout tp_slice = RankLayout::tensor_parallel(global, tp.size(), tp.rank());
  std::vector<ModelChunk<A>> chunks(static_cast<size_t>(v));
  const std::vector<LayerRange> chunk_layers = rank_chunk_layers(cfg.model.n_layer, p, v, pp.rank());
  const BlockPoolShape pool = block_pool_shape(schedule, chunk_layers, slice.recompute);
  std::shared_ptr<BlockPool<A>> block_pool;
  if (pool.sets > 0)
    block_pool = std::make_shared<BlockPool<A>>(
        GPT2<A>::block_pool_for(cfg.model, cfg.micro_batch_size, seq_len, device, slice, pool.sets, pool.layers));
  for (int c = 0; c < v; ++c) {
    ModelChunk<A>& k = chunks[size_t(c)];
    const int stage = c * p + pp.rank();
    const LayerRange layers = chunk_layers[size_t(c)];
    k.block_pool = block_pool;
    ModelSlice<A> chunk_slice = slice;
    chunk_slice.block_pool = block_pool.get();
    chunk_slice.layers = layers;
    chunk_slice.in_flight = max_in_flight(schedule, c);
    chunk_slice.split_backward = splits_backward(schedule);
    k.model = std::make_unique<GPT2<A>>(cfg.model, cfg.micro_batch_size, seq_len, device, precision,
                                        /*own_weights=*/cfg.zero <= 1, chunk_slice);
    k.slices = std::make_unique<RankLayout>(
        RankLayout::pipeline_stage(tp_slice, layers.begin, layers.end, stage == 0, stage == stages - 1));
    k.dp = dp.split(0, dp.rank());  // the same ranks, a communicator of its own
    k.zero = std::make_unique<LocalZero<A>>(cfg, *k.model, *k.slices, *k.dp, device);
    const ParamLayout& layout = k.model->layout();
    k.sp_grads = std::make_unique<SequenceParallelGrads<A>>(layout, tp, k.zero->store(), device);
    WeightStore<A>& inner = cfg.sequence_parallel ? static_cast<WeightStore<A>&>(*k.sp_grads) : k.zero->store();
    const bool holds_wte = layout.has_embeddings() || layout.has_head();
    k.tied = std::make_unique<TiedEmbeddingGrads<A>>(layout, holds_wte ? ends : nullptr, inner, device,
                                                     k.zero->reduces_every_backward());
    k.model->set_store(k.tied.get());
  }
  return chunks;
}

template <class A>
std::vector<A> gather_chunks(Communicator& world, std::vector<ModelChunk<A>>& chunks, bool counted, WholeOn on) {
  std::vector<std::vector<A>> locals;  // each chunk's weights, in host memory
  for (ModelChunk<A>& c : chunks) locals.push_back(c.zero->local_weights());
  std::vector<LocalPart<A>> parts;
  for (size_t i = 0; i < chunks.size(); ++i) parts.push_back({chunks[i].slices.get(), &locals[i]});
  return gather_whole_model(world, parts, counted, on);
}

namespace {

// The sum over a rank's chunks of tally(chunk index, chunk).
template <class A, class F>
CommTally sum_over_chunks(const std::vector<ModelChunk<A>>& chunks, F&& tally) {
  CommTally sum;
  for (size_t c = 0; c < chunks.size(); ++c) sum += tally(int(c), chunks[c]);
  return sum;
}

}  // namespace

template <class A>
CommTally chunks_dp_traffic(const std::vector<ModelChunk<A>>& chunks, const PipeSchedule& schedule, int m) {
  return sum_over_chunks(chunks, [&](int c, const ModelChunk<A>& k) {
    return k.zero->step_traffic(m, chunk_passes(schedule, c), k.tied->summed_elements() > 0);
  });
}

template <class A>
CommTally chunks_tp_traffic(const std::vector<ModelChunk<A>>& chunks, const TpStep& step) {
  return sum_over_chunks(chunks, [&](int, const ModelChunk<A>& k) { return tp_step_traffic(step, k.model->layout()); });
}

template <class A>
MemoryLedger chunks_memory_formula(const std::vector<ModelChunk<A>>& chunks) {
  MemoryLedger sum;
  for (const ModelChunk<A>& c : chunks) {
    const MemoryLedger one = c.zero->memory_formula();
    for (MemKind kind : {MemKind::Params, MemKind::Grads, MemKind::Optimizer}) sum.add(kind, one.get(kind));
  }
  if (chunks.size() > 1 && chunks[0].zero->zero_level() == 3) sum.set(MemKind::Params, 0);
  std::vector<const GPT2<A>*> models;
  for (const ModelChunk<A>& c : chunks) models.push_back(c.model.get());
  return with_activations(sum, models);
}

template <class A>
CommTally chunks_dp_counted(const std::vector<ModelChunk<A>>& chunks) {
  return sum_over_chunks(chunks, [](int, const ModelChunk<A>& k) { return k.zero->step_counted(); });
}

template <class A>
ChunkCheckpoint<A>::ChunkCheckpoint(const ParamLayout& global, std::vector<ModelChunk<A>>& chunks)
    : chunks_(chunks), layout_(global) {
  // (tensor, chunk, its LocalTensor) over every chunk's range, in the model's order.
  std::vector<std::tuple<int, int, const LocalTensor*>> all;
  for (size_t c = 0; c < chunks.size(); ++c)
    for (const LocalTensor& lt : chunks[c].zero->range().tensors()) all.emplace_back(lt.tensor, int(c), &lt);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  for (const auto& [tensor, chunk, lt] : all) {
    pieces_.push_back({chunk, lt->offset, layout_.total(), lt->numel});
    layout_.add(tensor, lt->blocks, lt->counted);
  }
  for (const CheckpointBuffer& b : chunks.front().zero->checkpoint_buffers()) kinds_.push_back(b.kind);
  packed_.assign(kinds_.size(), std::vector<float>(size_t(layout_.total())));
}

template <class A>
std::vector<CheckpointBuffer> ChunkCheckpoint<A>::buffers() {
  std::vector<CheckpointBuffer> out;
  for (size_t k = 0; k < kinds_.size(); ++k) out.push_back({kinds_[k], packed_[k].data(), 0, 0});
  return out;
}

template <class A>
void ChunkCheckpoint<A>::pack() {
  for (ModelChunk<A>& c : chunks_) c.zero->checkpoint_to_host();  // the device arrays into the chunks' host buffers
  for (size_t k = 0; k < kinds_.size(); ++k)
    for (const Piece& piece : pieces_) {
      const float* from = chunks_[size_t(piece.chunk)].zero->checkpoint_buffers()[k].data + piece.chunk_offset;
      std::copy_n(from, piece.count, packed_[k].data() + piece.packed_offset);
    }
}

template <class A>
void ChunkCheckpoint<A>::unpack() {
  for (size_t k = 0; k < kinds_.size(); ++k)
    for (const Piece& piece : pieces_) {
      float* to = chunks_[size_t(piece.chunk)].zero->checkpoint_buffers()[k].data + piece.chunk_offset;
      std::copy_n(packed_[k].data() + piece.packed_offset, piece.count, to);
    }
}

template std::vector<ModelChunk<float>> make_model_chunks(const Config&, const ParamLayout&, const PipeSchedule&,
                                                          Communicator&, Communicator&, Communicator&, Communicator*,
                                                          const ModelSlice<float>&, int, Device, Precision);
template std::vector<ModelChunk<bf16>> make_model_chunks(const Config&, const ParamLayout&, const PipeSchedule&,
                                                         Communicator&, Communicator&, Communicator&, Communicator*,
                                                         const ModelSlice<bf16>&, int, Device, Precision);
template std::vector<float> gather_chunks(Communicator&, std::vector<ModelChunk<float>>&, bool, WholeOn);
template std::vector<bf16> gather_chunks(Communicator&, std::vector<ModelChunk<bf16>>&, bool, WholeOn);
template CommTally chunks_dp_traffic(const std::vector<ModelChunk<float>>&, const PipeSchedule&, int);
template CommTally chunks_dp_traffic(const std::vector<ModelChunk<bf16>>&, const PipeSchedule&, int);
template CommTally chunks_tp_traffic(const std::vector<ModelChunk<float>>&, const TpStep&);
template CommTally chunks_tp_traffic(const std::vector<ModelChunk<bf16>>&, const TpStep&);
template MemoryLedger chunks_memory_formula(const std::vector<ModelChunk<float>>&);
template MemoryLedger chunks_memory_formula(const std::vector<ModelChunk<bf16>>&);
template CommTally chunks_dp_counted(const std::vector<ModelChunk<float>>&);
template CommTally chunks_dp_counted(const std::vector<ModelChunk<bf16>>&);
template class ChunkCheckpoint<float>;
template class ChunkCheckpoint<bf16>;

}  // namespace gpt
