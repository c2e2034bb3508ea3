// Stage 11: every axis at once, and activation checkpointing. The mesh is
// dp x pp x cp x tp (common/mesh.h):
//   tp  each layer's heads, hidden units and vocabulary rows split (stage 06), with
//       sequence parallelism for the elementwise work;
//   cp  each sequence's tokens split into chunks, the attention's keys and values passed
//       around a ring (stage 10);
//   pp  the layers split into p v virtual stages, run by the schedule of `schedule`
//       (interleaved 1F1B by default, or gpipe, 1f1b, zb-h1; stage 09);
//   dp  the batch's sequences split, gradients reduced and the ZeRO stage of `zero`
//       kept over dp x cp: the ranks that hold the same weight slices (stage 10).
// With activation_checkpointing=full each micro-batch in flight keeps only its blocks'
// outputs, and every backward recomputes its block's activations first (common/gpt2.cpp):
// the same bits, the memory of a micro-batch in flight cut to the residual stream, one
// more forward of the blocks per step. =selective keeps all but the layernorms' and the
// GELU's outputs and rebuilds those: 10 of 16 C values a row for a few elementwise passes.
//   for each step:  zero grads
//                   run this rank's schedule over the step's m micro-batches on its v
//                   chunks: each micro-batch is the same sequences on every cp and tp rank
//                   of a dp group, each cp rank its chunks of them; the ring passes keys
//                   and values (and their gradients) between the cp ranks of a stage
//                   wte's gradient summed between the first and the last stage; each
//                   chunk's store reduces over dp x cp
//                   the global norm (per tensor), AdamW on each chunk's range
// Checkpoints hold the whole model's tensors by name (common/checkpoint.h): a run saved
// on one mesh resumes on any other, or in any earlier stage.
// See README.md for the lesson.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/comm.h"
#include "common/comm_counter.h"
#include "common/config.h"
#include "common/data.h"
#include "common/device.h"
#include "common/driver.h"
#include "common/error.h"
#include "common/gpt2.h"
#include "common/layout_exchange.h"
#include "common/memory.h"
#include "common/mesh.h"
#include "common/metrics.h"
#include "common/optimizer.h"
#include "common/rank_layout.h"
#include "common/recompute.h"
#include "common/trace.h"
#include "stages/06_tensor_parallel/local_zero.h"
#include "stages/06_tensor_parallel/tp_budget.h"
#include "stages/06_tensor_parallel/tp_config.h"
#include "stages/06_tensor_parallel/tp_hooks.h"
#include "stages/07_pipeline_gpipe/grad_norm_by_tensor.h"
#include "stages/07_pipeline_gpipe/pipeline_config.h"
#include "stages/07_pipeline_gpipe/pipeline_executor.h"
#include "stages/07_pipeline_gpipe/pipeline_report.h"
#include "stages/07_pipeline_gpipe/tied_embedding.h"
#include "stages/09_pipeline_interleaved/model_chunks.h"
#include "stages/09_pipeline_interleaved/schedules.h"
#include "stages/10_context_parallel/context_split.h"
#include "stages/10_context_parallel/ring_attention.h"
#include "stages/11_4d/stage_spec.h"

using namespace gpt;

namespace {

// A is the storage of weights and activations: float, or bf16 in bf16 mode (the messages
// between stages, the tp hooks' collectives and the ZeRO gathers then move bf16).
template <class A>
int train_on(Run& run) {
  Config& cfg = run.cfg;
  const Device device = run.device;
  const Precision precision = run.precision;
  Communicator& pp = run.mesh.pp();
  CountingCommunicator tp(run.mesh.tp());  // tensor parallelism's traffic, counted per step
  CountingCommunicator cp(run.mesh.cp());  // the technique's traffic, counted per step
  // The ranks holding the same weight slices: dp x cp (each computes gradients from
  // tokens of its own), as in stage 10.
  const MeshShape shape = run.mesh.shape();
  const std::unique_ptr<Communicator> grad_group_owner = split_dp_cp(run.mesh);
  Communicator& grad_group = *grad_group_owner;
  Communicator& data_group = run.mesh.dp();  // the ranks that read different sequences
  const bool sp = cfg.sequence_parallel, lead = run.lead();
  const int accum = cfg.grad_accum(data_group.size());  // m, the micro-batches of a step
  const int v = cfg.virtual_stages;
  const std::string schedule_name = configured_schedule(cfg);
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(run);  // every rank checks the same tokens: a refusal is said once
  const DataLoader val_data = validation_data(run);  // empty when the run never validates
  ContextSplit split(cp.size(), cp.rank(), cfg.cp_split == "zigzag", T);
  split.group = &cp;
  const int Tl = split.local_len(T);  // tokens of each sequence on this rank
  TensorParallelHooks<A> hooks(tp, sp, device);
  RingAttentionHooks<A> ring(tp, sp, cp, split, device);  // at cp = 1 `hooks`: the same bits without block merges
  const PipeSchedule schedule = pipeline_schedule(schedule_name, pp.size(), pp.rank(), accum, v);
  const Recompute recompute = parse_recompute(cfg.activation_checkpointing);
  const ParamLayout global(cfg.model);
  CountingCommunicator pp_counted(pp);  // the technique's traffic, counted per step
  const std::unique_ptr<Communicator> ends = tied_embedding_group(pp_counted);  // the first and the last stage
  ModelHooks<A>* layer_hooks = cp.size() > 1 ? static_cast<ModelHooks<A>*>(&ring) : &hooks;  // tp's f, g
  ModelSlice<A> slice{tp.size(), tp.rank(), sp, layer_hooks, split.positions()};
  slice.recompute = recompute;
  // One block runs at a time on a rank, so its chunks recompute into one working set.
  BlockActivations<A> working_block;
  if (recompute != Recompute::None) {
    working_block = GPT2<A>::working_block_for(cfg.model, B, Tl, device, slice);
    slice.working_block = &working_block;
  }
  // This rank's v chunks (virtual stages r, r + p, ...), each with activations for every
  // micro-batch the schedule keeps in flight on it.
  std::vector<ModelChunk<A>> chunks =
      make_model_chunks(cfg, global, schedule, pp, tp, grad_group, ends.get(), slice, Tl, device, precision);
  std::vector<GPT2<A>*> models;
  std::vector<const GPT2<A>*> const_models;
  std::vector<LocalZero<A>*> zeros;
  int64_t n_local = 0;
  for (ModelChunk<A>& c : chunks) {
    models.push_back(c.model.get()), const_models.push_back(c.model.get()), zeros.push_back(c.zero.get());
    n_local += c.model->layout().total();
  }
  // The chunks' ranges as one layout, packed before each checkpoint (model_chunks.h).
  ChunkCheckpoint packed(global, chunks);
  RunCheckpoints ckpt{global, packed.buffers(), /*sharded=*/true, &packed.layout()};
  ckpt.before_write = [&] { packed.pack(); };

  CheckpointState state;
  const std::string resume = resolve_resume(cfg);
  if (resume.empty()) {
    for (ModelChunk<A>& c : chunks)  // the single-device values there
      c.slices->init(cfg.seed, c.zero->master_host(), c.zero->shard().begin, c.zero->shard().end);
  } else {
    std::vector<LocalBuffer> buffers;
    for (const CheckpointBuffer& b : ckpt.buffers) buffers.push_back({b.kind, b.data});
    state = load_checkpoint_local(run.world, resume, packed.layout(), buffers);  // any layout's checkpoint
    packed.unpack();
    if (lead) std::printf("resumed from %s at step %lld\n", resume.c_str(), static_cast<long long>(state.step));
  }
  for (ModelChunk<A>& c : chunks) c.zero->weights_from_master();
  PipelineExecutor pipeline(models, pp_counted);

  if (lead) {
    const std::string recompute_note = recompute == Recompute::None ? "" : ", " + cfg.activation_checkpointing + " recompute";
    // An axis of 1 is named without the details of its technique (a split backward changes even one stage's).
    const std::string chunk_count = std::to_string(v) + (v == 1 ? " chunk" : " chunks");
    const std::string pp_note = pp.size() == 1 && !splits_backward(schedule)
                                    ? "" : " (" + schedule_name + ", " + chunk_count + " per rank)";
    const std::string cp_note = cp.size() == 1 ? "" : " (" + cfg.cp_split + " split, " + std::to_string(Tl) +
                                                           " tokens of " + std::to_string(T) + " per rank)";
    std::printf("stage 11 | dp %d x pp %d%s x cp %d%s x tp %d%s (%s), zero=%d%s | device %s | %s | %d threads per rank | %.2fM parameters, %.2fM in this rank's part\n",
                data_group.size(), pp.size(), pp_note.c_str(), cp.size(), cp_note.c_str(),
                tp.size(), sp ? " sequence parallel" : "", run.world.backend(), cfg.zero,
                recompute_note.c_str(), device_name(device),
                precision_name(precision), omp_get_max_threads(), double(global.total()) / 1e6,
                double(n_local) / 1e6);
    std::printf("batch %d sequences x %d tokens = micro-batch %d x %d micro-batches x dp %d | train %lld tokens, val %lld tokens\n",
                cfg.batch_size, T, B, accum, data_group.size(), static_cast<long long>(train_data.num_tokens()),
                static_cast<long long>(val_data.num_tokens()));
    if (pp.size() > 1) std::printf("%s", stage_table(cfg.model, pp.size(), v).c_str());
    if (cp.size() > 1) std::printf("%s", split.work_line().c_str());
  }

  MetricsLog log(lead ? cfg.metrics_path() : "");
  // The whole model (every chunk's part), for the lead rank's sample and every rank's share
  // of the multiple-choice eval.
  const GatherWhole<A> whole = [&](WholeOn on) {
    return WholeWeights<A>::copy(on_device(device, gather_chunks(run.world, chunks, grad_group.rank() == 0, on)));
  };
  BubbleMeter bubble(pp);
  std::vector<int32_t> whole_in(size_t(B) * T), whole_tg(size_t(B) * T);
  state.layout_json = mesh_json(shape);  // checkpoints record the layout that wrote them
  const Validation validate = [&] {
    return pipeline_validation_loss(pipeline, val_data, cfg.val_batches, B, data_group, &split);
  };
  const int64_t first_step = state.step;
  for (int64_t step = state.step; step < cfg.steps; ++step) {
    const int64_t first_sequence = state.sequences(cfg.batch_size);  // the data position: the sequences read so far
    const auto t0 = std::chrono::steady_clock::now();
    const CommTally pp_before = pp_counted.tally(), cp_before = cp.tally(), tp_before = tp.tally();
    for (LocalZero<A>* z : zeros) z->zero_grads();
    bubble.start();
    const auto batch = [&](int micro, int32_t* inputs, int32_t* targets) {  // this rank's chunks of the sequences
      train_data.batch(first_sequence, micro, data_group.rank(), data_group.size(), B, cfg.batch_size, whole_in.data(),
                       whole_tg.data());
      split.take(whole_in.data(), inputs, B, T);
      split.take(whole_tg.data(), targets, B, T);
    };
    const auto before_backward = [&](int chunk, int micro) {
      const bool last = micro == accum - 1;  // each chunk's backwards run in micro-batch order
      ModelChunk<A>& c = chunks[size_t(chunk)];
      c.zero->set_last_micro(last);
      c.sp_grads->set_sum(c.zero->reduces_every_backward() || last);
      c.tied->set_last(last);
    };
    // Each micro-batch's mean loss over this rank's tokens; dp x cp parts of equal size
    // make the global batch.
    const std::vector<double> losses =
        pipeline.run(schedule, accum, batch, 1.0f / float(accum * grad_group.size()), before_backward);
    bubble.stop(pipeline.last_busy_s());
    for (ModelChunk<A>& c : chunks) c.tied->finish();
    const CommTally pp_step = pp_counted.tally() - pp_before, cp_step = cp.tally() - cp_before,
                    tp_step = tp.tally() - tp_before;
    for (LocalZero<A>* z : zeros) z->wait();
    double loss = 0;  // the mean over the global batch, added in micro-batch order as stage 01 does
    for (double l : losses) loss += l / (accum * grad_group.size());
    pp.all_reduce(&loss, 1, DType::F64);  // from the last stage (the others add 0)
    grad_group.all_reduce(&loss, 1, DType::F64);

    // the same bits for any schedule (under ZeRO at dp > 1, within the rounding of a shard's split)
    const double norm = grad_norm_by_tensor(run.world, zeros, global.tensors().size());
    const double lr = learning_rate(cfg, step);
    for (LocalZero<A>* z : zeros) z->step(lr, norm, int(step + 1));
    device_synchronize(device);  // the step ends when the GPU has run its kernels
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.step = step + 1;

    const MemoryLedger mem = MemoryTracker::global().peaks();
    if (step == first_step) {  // after the first step: memory and micro-batches in flight, per rank
      const int bound = pipeline_theory_in_flight(schedule_name, pp.size(), pp.rank(), accum, v);
      const std::string line = in_flight_line(run.world.rank(), pp.rank(), pp.size(), bound,
                                              pipeline.measured_in_flight(), const_models, mem, working_block.bytes()) +
                               memory_line(mem, chunks_memory_formula(chunks));
      print_from_every_rank(run.world, line);
      size_t wte_summed = 0;
      for (ModelChunk<A>& c : chunks) wte_summed += c.tied->summed_elements();
      const CommTally formula = pipeline_traffic(pp.size(), v, accum, pp.rank(), pipeline.message_size(), dtype_of<A>(),
                                                 wte_summed, dtype_of<GradOf<A>>());
      if (pp.size() > 1) print_traffic_by_rank(run.world, "pipeline", state.step, pp_step, formula);
      if (tp.size() > 1)  // a block recomputed under full runs its forward's collectives again
        print_traffic_by_rank(run.world, "tensor-parallel", state.step, tp_step,
                              chunks_tp_traffic(chunks, tp_step_of(cfg, tp.size(), int64_t(B) * Tl, accum,
                                                                   recompute == Recompute::Full)));
      int layers_here = 0;  // the ring runs once per attention layer of this rank's chunks
      for (const GPT2<A>* m : const_models) layers_here += m->layout().layer_end() - m->layout().layer_begin();
      const CommTally ring_formula =
          ring_attention_traffic(cp.size(), layers_here, accum, cfg.model.n_embd / tp.size(), int64_t(B) * Tl,
                                 dtype_of<A>(), recompute == Recompute::Full ? 2 : 1);
      if (cp.size() > 1) print_traffic_by_rank(run.world, "context-parallel", state.step, cp_step, ring_formula);
      if (grad_group.size() > 1)
        print_traffic_by_rank(run.world, cp.size() > 1 ? "data-parallel (dp x cp)" : "data-parallel", state.step,
                              chunks_dp_counted(chunks),
                              chunks_dp_traffic(chunks, schedule, accum));
    }
    log_step(run, log, state.step, loss, lr, norm, ms, mem);

    // true after a stop signal: this step is checkpointed, and the run ends
    if (after_step(run, validate, data_group, log, ckpt, state, whole)) break;
  }
  const std::string bubbles = bubble.report(  // the theory for the measured forward, backward and weight times
      [&](const PipeCosts& c) { return pipeline_theory_bubble(schedule_name, pp.size(), accum, v, c); },
      pipeline.measured_costs());
  if (lead && pp.size() > 1) std::printf("%s", bubbles.c_str());

  end_of_run(run, validate, data_group, log, ckpt, state, whole, T);
  return 0;
}

int train_ranks(Run& run) {
  return run.precision == Precision::BF16 ? train_on<gpt::bf16>(run) : train_on<float>(run);
}

}  // namespace

int main(int argc, char** argv) {
  return stage_main(argc, argv, stage_11_spec(), train_ranks);  // stage_spec.h: its keys and checks
}
