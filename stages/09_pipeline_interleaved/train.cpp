// Stage 09: pipeline parallelism with v model chunks per rank (virtual stages) and the
// schedule chosen by `schedule`: interleaved 1F1B (the default), or 1F1B, GPipe or the
// zero-bubble ZB-H1 on one chunk; composed with tensor parallelism (stage 06) and data
// parallelism with ZeRO 0, 1, 2 or 3, as stages 07 and 08.
//   for each step:  zero grads
//                   run this rank's schedule over the step's m micro-batches on its v
//                   chunks (pipeline_executor.h): chunk c of rank r is virtual stage c p + r,
//                   so a micro-batch crosses the ranks v times, and the pipeline fills
//                   and drains in steps of a chunk, v times shorter than a stage
//                   wte's gradient summed between the first and the last stage; each
//                   chunk's store reduces over dp
//                   the global norm (per tensor: stage 08's bits, but for the last ones
//                   under ZeRO at dp > 1, grad_norm_by_tensor.h), AdamW on
//                   each chunk's range of its local buffer, all-gather over dp for zero=1 and 2
//                   (zero=3 gathers each unit when it computes)
// See schedule_interleaved.h for the schedule, model_chunks.h for the chunks, and
// README.md for the lesson.
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

using namespace gpt;

namespace {

// A is the storage of weights and activations: float, or bf16 in bf16 mode (the messages
// between stages, the tp hooks' collectives and the ZeRO gathers then move bf16).
template <class A>
int train_on(Run& run) {
  Config& cfg = run.cfg;
  const Device device = run.device;
  const Precision precision = run.precision;
  Communicator& dp = run.mesh.dp();
  Communicator& pp = run.mesh.pp();
  CountingCommunicator tp(run.mesh.tp());  // tensor parallelism's traffic, counted per step
  const bool sp = cfg.sequence_parallel, lead = run.lead();
  const int accum = cfg.grad_accum(dp.size());  // m, the micro-batches of a step
  const int v = cfg.virtual_stages;
  const std::string schedule_name = configured_schedule(cfg);
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(run);  // every rank checks the same tokens: a refusal is said once
  const DataLoader val_data = validation_data(run);  // empty when the run never validates
  TensorParallelHooks<A> hooks(tp, sp, device);
  // This rank's v chunks (virtual stages r, r + p, ...), each with activations for every
  // micro-batch the schedule keeps in flight on it.
  const PipeSchedule schedule = pipeline_schedule(schedule_name, pp.size(), pp.rank(), accum, v);
  const ParamLayout global(cfg.model);
  CountingCommunicator pp_counted(pp);  // the technique's traffic, counted per step
  const std::unique_ptr<Communicator> ends = tied_embedding_group(pp_counted);  // the first and the last stage
  std::vector<ModelChunk<A>> chunks =
      make_model_chunks(cfg, global, schedule, pp, tp, dp, ends.get(),
                        ModelSlice<A>{tp.size(), tp.rank(), sp, &hooks, /*positions=*/{}}, T, device, precision);
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
    std::printf("stage 09 | %s, %d chunk%s per rank | pp %d x tp %d x dp %d (%s)%s, zero=%d | device %s | %s | %d threads per rank | %.2fM parameters, %.2fM in this rank's part\n",
                schedule_name.c_str(), v, v == 1 ? "" : "s", pp.size(), tp.size(), dp.size(), run.world.backend(),
                sp ? ", sequence parallel" : "", cfg.zero, device_name(device), precision_name(precision),
                omp_get_max_threads(), double(global.total()) / 1e6, double(n_local) / 1e6);
    std::printf("batch %d sequences x %d tokens = micro-batch %d x %d micro-batches x dp %d | train %lld tokens, val %lld tokens\n",
                cfg.batch_size, T, B, accum, dp.size(), static_cast<long long>(train_data.num_tokens()),
                static_cast<long long>(val_data.num_tokens()));
    std::printf("%s", stage_table(cfg.model, pp.size(), v).c_str());
  }

  MetricsLog log(lead ? cfg.metrics_path() : "");
  // The whole model (every chunk's part), for the lead rank's sample and every rank's share
  // of the multiple-choice eval.
  const GatherWhole<A> whole = [&](WholeOn on) {
    return WholeWeights<A>::copy(on_device(device, gather_chunks(run.world, chunks, dp.rank() == 0, on)));
  };
  BubbleMeter bubble(pp);
  state.layout_json = mesh_json(run.mesh.shape());  // checkpoints record the layout that wrote them
  const Validation validate = [&] { return pipeline_validation_loss(pipeline, val_data, cfg.val_batches, B, dp); };
  const int64_t first_step = state.step;
  for (int64_t step = state.step; step < cfg.steps; ++step) {
    const int64_t first_sequence = state.sequences(cfg.batch_size);  // the data position: the sequences read so far
    const auto t0 = std::chrono::steady_clock::now();
    const CommTally pp_before = pp_counted.tally(), tp_before = tp.tally();
    for (LocalZero<A>* z : zeros) z->zero_grads();
    bubble.start();
    const auto batch = [&](int micro, int32_t* inputs, int32_t* targets) {
      train_data.batch(first_sequence, micro, dp.rank(), dp.size(), B, cfg.batch_size, inputs, targets);
    };
    const auto before_backward = [&](int chunk, int micro) {
      const bool last = micro == accum - 1;  // each chunk's backwards run in micro-batch order
      ModelChunk<A>& c = chunks[size_t(chunk)];
      c.zero->set_last_micro(last);
      c.sp_grads->set_sum(c.zero->reduces_every_backward() || last);
      c.tied->set_last(last);
    };
    const std::vector<double> losses =
        pipeline.run(schedule, accum, batch, 1.0f / float(accum * dp.size()), before_backward);
    bubble.stop(pipeline.last_busy_s());
    for (ModelChunk<A>& c : chunks) c.tied->finish();
    const CommTally pp_step = pp_counted.tally() - pp_before, tp_step = tp.tally() - tp_before;
    for (LocalZero<A>* z : zeros) z->wait();
    double loss = 0;  // the mean over the global batch, added in micro-batch order as stage 01 does
    for (double l : losses) loss += l / (accum * dp.size());
    pp.all_reduce(&loss, 1, DType::F64);  // from the last stage (the others add 0)
    dp.all_reduce(&loss, 1, DType::F64);

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
                                              pipeline.measured_in_flight(), const_models, mem) +
                               memory_line(mem, chunks_memory_formula(chunks));
      print_from_every_rank(run.world, line);
      size_t wte_summed = 0;
      for (ModelChunk<A>& c : chunks) wte_summed += c.tied->summed_elements();
      const CommTally formula = pipeline_traffic(pp.size(), v, accum, pp.rank(), pipeline.message_size(), dtype_of<A>(),
                                                 wte_summed, dtype_of<GradOf<A>>());
      if (pp.size() > 1) print_traffic_by_rank(run.world, "pipeline", state.step, pp_step, formula);
      if (tp.size() > 1)
        print_traffic_by_rank(run.world, "tensor-parallel", state.step, tp_step,
                              chunks_tp_traffic(chunks, tp_step_of(cfg, tp.size(), int64_t(B) * T, accum)));
      if (dp.size() > 1)
        print_traffic_by_rank(run.world, "data-parallel", state.step, chunks_dp_counted(chunks),
                              chunks_dp_traffic(chunks, schedule, accum));
    }
    log_step(run, log, state.step, loss, lr, norm, ms, mem);

    // true after a stop signal: this step is checkpointed, and the run ends
    if (after_step(run, validate, dp, log, ckpt, state, whole)) break;
  }
  const std::string bubbles = bubble.report(  // the theory for the measured forward, backward and weight times
      [&](const PipeCosts& c) { return pipeline_theory_bubble(schedule_name, pp.size(), accum, v, c); },
      pipeline.measured_costs());
  if (lead) std::printf("%s", bubbles.c_str());

  end_of_run(run, validate, dp, log, ckpt, state, whole, T);
  return 0;
}

int train_ranks(Run& run) {
  return run.precision == Precision::BF16 ? train_on<gpt::bf16>(run) : train_on<float>(run);
}

// This stage's own limits on a configuration: stage_main checks them with the shared ones
// before the run starts, the ranks comparing their refusals.
void check_stage(const Config& cfg, const MeshShape& mesh) {
  check_tensor_parallel(cfg);
  check_pipeline(cfg, mesh.pp, cfg.grad_accum(mesh.dp));
  check_pipeline_schedule(configured_schedule(cfg), cfg.virtual_stages);
}

}  // namespace

int main(int argc, char** argv) {
  StageSpec spec{"09_pipeline_interleaved"};
  spec.tp = true, spec.pp = true, spec.virtual_stages = true, spec.zero_key = true, spec.schedule_key = true;
  spec.checks = check_stage;
  return stage_main(argc, argv, spec, train_ranks);
}
