// A rank's memory from the configuration alone; see memory_plan.h.
#include "stages/11_4d/memory_plan.h"

#include "common/recompute.h"
#include "stages/06_tensor_parallel/local_zero.h"
#include "stages/06_tensor_parallel/tp_budget.h"
#include "stages/07_pipeline_gpipe/pipeline_config.h"
#include "stages/07_pipeline_gpipe/pipeline_executor.h"
#include "stages/09_pipeline_interleaved/model_chunks.h"
#include "stages/09_pipeline_interleaved/schedules.h"

namespace gpt {

RankPlan plan_rank(const Config& cfg, const MeshShape& shape, int world_rank) {
  RankPlan plan;
  plan.coord = mesh_coord(shape, world_rank);
  const int p = shape.pp, v = cfg.virtual_stages, r = plan.coord.pp;
  const PipeSchedule schedule = pipeline_schedule(configured_schedule(cfg), p, r, cfg.grad_accum(shape.dp), v);
  const bool bf16 = cfg.precision == "bf16";
  const int zero_ranks = shape.dp * shape.cp, zero_rank = plan.coord.dp * shape.cp + plan.coord.cp;

  ActivationShape act;  // what every chunk of the rank shares
  act.B = cfg.micro_batch_size, act.T = cfg.seq_len / shape.cp;  // both splits give a rank T/cp tokens
  act.tp = shape.tp, act.tp_rank = plan.coord.tp, act.sequence_parallel = cfg.sequence_parallel;
  act.activation_bytes = bf16 ? 2 : 4;
  act.recompute = parse_recompute(cfg.activation_checkpointing);
  act.split_backward = splits_backward(schedule);
  act.own_working_set = false;  // one for the rank, below
  // With several chunks the blocks' activations may come from one pool (model_chunks.h).
  const std::vector<LayerRange> chunk_layers = rank_chunk_layers(cfg.model.n_layer, p, v, r);
  const BlockPoolShape pool = block_pool_shape(schedule, chunk_layers, act.recompute);
  act.pooled_blocks = pool.sets > 0;
  plan.block_pool_sets = pool.sets;

  int64_t activations = recompute_working_set(cfg.model, act);
  if (act.pooled_blocks) activations += block_pool_memory(cfg.model, act, pool.sets, pool.layers);
  for (int c = 0; c < v; ++c) {
    ChunkPlan chunk;
    chunk.stage = c * p + r;
    chunk.layers = chunk_layers[size_t(c)];
    chunk.slots = max_in_flight(schedule, c);
    const ParamLayout part(cfg.model, shape.tp, plan.coord.tp, chunk.layers);
    const MemoryLedger zero = local_zero_memory(cfg, part, zero_ranks, zero_rank, bf16);
    for (MemKind kind : {MemKind::Params, MemKind::Grads, MemKind::Optimizer}) plan.memory.add(kind, zero.get(kind));
    act.layers = chunk.layers.end - chunk.layers.begin;
    act.embedding = part.has_embeddings(), act.head = part.has_head(), act.slots = chunk.slots;
    activations += activation_memory(cfg.model, act);
    plan.chunks.push_back(chunk);
  }
  if (v > 1 && cfg.zero == 3) plan.memory.set(MemKind::Params, 0);  // no closed form (memory_plan.h)
  plan.memory.set(MemKind::Activations, size_t(activations));
  return plan;
}

}  // namespace gpt
