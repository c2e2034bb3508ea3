// Stage 07: pipeline parallelism with the GPipe schedule, composed with tensor
// parallelism (stage 06) and data parallelism with ZeRO 0, 1, 2 or 3. The ranks form a
// dp x pp x tp mesh: the pp ranks of a pipeline hold consecutive ranges of layers
// (stages; the first also the embeddings, the last ln_f and the tied LM head) and pass
// each micro-batch's activations forward and their gradients back.
//   for each step:  zero grads
//                   run this rank's schedule over the step's m micro-batches
//                   (pipeline_executor.h): GPipe = all m forwards, then all m backwards
//                   wte's gradient summed between the first and the last stage
//                   (tied_embedding.h); the data-parallel store reduces over dp
//                   the global norm (each element counted once), AdamW on this rank's
//                   range of its local buffer, all-gather over dp for zero=1 and 2
//                   (zero=3 gathers each unit when it computes)
// See schedule.h for the schedule, and README.md for the lesson.
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
#include "stages/06_tensor_parallel/gather_whole.h"
#include "stages/06_tensor_parallel/local_zero.h"
#include "stages/06_tensor_parallel/sequence_parallel_grads.h"
#include "stages/06_tensor_parallel/tp_budget.h"
#include "stages/06_tensor_parallel/tp_config.h"
#include "stages/06_tensor_parallel/tp_hooks.h"
#include "stages/07_pipeline_gpipe/grad_norm_by_tensor.h"
#include "stages/07_pipeline_gpipe/pipeline_config.h"
#include "stages/07_pipeline_gpipe/pipeline_executor.h"
#include "stages/07_pipeline_gpipe/pipeline_report.h"
#include "stages/07_pipeline_gpipe/schedule.h"
#include "stages/07_pipeline_gpipe/tied_embedding.h"

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
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(run);  // every rank checks the same tokens: a refusal is said once
  const DataLoader val_data = validation_data(run);  // empty when the run never validates
  TensorParallelHooks<A> hooks(tp, sp, device);
  // This rank's stage of the pipeline, with activations for every micro-batch the
  // schedule keeps in flight.
  const PipeSchedule schedule = gpipe_schedule(pp.size(), pp.rank(), accum);
  const LayerRange layers = stage_layers(cfg.model.n_layer, pp.size(), pp.rank());
  GPT2<A> model(cfg.model, B, T, device, precision, /*own_weights=*/cfg.zero <= 1,
                ModelSlice<A>{tp.size(), tp.rank(), sp, &hooks, /*positions=*/{}, layers,
                              max_in_flight(schedule, 0)});
  const ParamLayout& layout = model.layout();  // the local buffer's tensors and units
  const ParamLayout global(cfg.model);
  const RankLayout slices = RankLayout::pipeline_stage(RankLayout::tensor_parallel(global, tp.size(), tp.rank()),
                                                       layers.begin, layers.end, model.first_stage(), model.last_stage());
  const int64_t n_local = layout.total();
  // The ZeRO stage of `zero` over dp, on this rank's local buffer (stage 06's local_zero.h).
  LocalZero<A> zero(cfg, model, slices, dp, device);
  const RunCheckpoints ckpt{layout, zero.checkpoint_buffers(), /*sharded=*/true, &zero.range(),
                            [&] { zero.checkpoint_to_host(); }};

  CheckpointState state;
  const std::string resume = resolve_resume(cfg);
  if (resume.empty()) {
    slices.init(cfg.seed, zero.master_host(), zero.shard().begin, zero.shard().end);  // the single-device values there
  } else {
    std::vector<LocalBuffer> buffers;
    for (const CheckpointBuffer& b : ckpt.buffers) buffers.push_back({b.kind, b.data});
    state = load_checkpoint_local(run.world, resume, zero.range(), buffers);  // any layout's checkpoint
    if (lead) std::printf("resumed from %s at step %lld\n", resume.c_str(), static_cast<long long>(state.step));
  }
  zero.weights_from_master();
  SequenceParallelGrads<A> sp_grads(layout, tp, zero.store(), device);
  CountingCommunicator pp_counted(pp);  // the technique's traffic, counted per step
  const std::unique_ptr<Communicator> ends = tied_embedding_group(pp_counted);  // the first and the last stage
  TiedEmbeddingGrads<A> tied(layout, ends.get(), sp ? static_cast<WeightStore<A>&>(sp_grads) : zero.store(),
                             device, zero.reduces_every_backward());
  model.set_store(&tied);
  PipelineExecutor<A> pipeline({&model}, pp_counted);

  if (lead) {
    std::printf("stage 07 | GPipe | pp %d x tp %d x dp %d (%s)%s, zero=%d | device %s | %s | %d threads per rank | %.2fM parameters, %.2fM in this rank's part\n",
                pp.size(), tp.size(), dp.size(), run.world.backend(), sp ? ", sequence parallel" : "", cfg.zero,
                device_name(device), precision_name(precision), omp_get_max_threads(), double(global.total()) / 1e6,
                double(n_local) / 1e6);
    std::printf("batch %d sequences x %d tokens = micro-batch %d x %d micro-batches x dp %d | train %lld tokens, val %lld tokens\n",
                cfg.batch_size, T, B, accum, dp.size(), static_cast<long long>(train_data.num_tokens()),
                static_cast<long long>(val_data.num_tokens()));
    std::printf("%s", stage_table(cfg.model, pp.size()).c_str());
  }

  MetricsLog log(lead ? cfg.metrics_path() : "");
  // The whole model, for the lead rank's sample and every rank's share of the
  // multiple-choice eval.
  const GatherWhole<A> whole = [&](WholeOn on) {
    return WholeWeights<A>::copy(
        on_device(device, gather_whole_model(run.world, slices, zero.local_weights(), dp.rank() == 0, on)));
  };
  BubbleMeter bubble(pp);
  state.layout_json = mesh_json(run.mesh.shape());  // checkpoints record the layout that wrote them
  const Validation validate = [&] { return pipeline_validation_loss(pipeline, val_data, cfg.val_batches, B, dp); };
  const int64_t first_step = state.step;
  for (int64_t step = state.step; step < cfg.steps; ++step) {
    const int64_t first_sequence = state.sequences(cfg.batch_size);  // the data position: the sequences read so far
    const auto t0 = std::chrono::steady_clock::now();
    const CommTally pp_before = pp_counted.tally(), tp_before = tp.tally();
    zero.zero_grads();
    bubble.start();
    const auto batch = [&](int micro, int32_t* inputs, int32_t* targets) {
      train_data.batch(first_sequence, micro, dp.rank(), dp.size(), B, cfg.batch_size, inputs, targets);
    };
    const auto before_backward = [&](int /*chunk*/, int micro) {
      const bool last = micro == accum - 1;  // backwards run in micro-batch order
      zero.set_last_micro(last);
      sp_grads.set_sum(zero.reduces_every_backward() || last);
      tied.set_last(last);
    };
    const std::vector<double> losses =
        pipeline.run(schedule, accum, batch, 1.0f / float(accum * dp.size()), before_backward);
    bubble.stop(pipeline.last_busy_s());
    tied.finish();
    const CommTally pp_step = pp_counted.tally() - pp_before, tp_step = tp.tally() - tp_before;
    zero.wait();
    double loss = 0;  // the mean over the global batch, added in micro-batch order as stage 01 does
    for (double l : losses) loss += l / (accum * dp.size());
    pp.all_reduce(&loss, 1, DType::F64);  // from the last stage (the others add 0)
    dp.all_reduce(&loss, 1, DType::F64);

    // The norm of the gradients, the same bits for any schedule.
    const double norm = grad_norm_by_tensor<A>(run.world, {&zero}, global.tensors().size());
    const double lr = learning_rate(cfg, step);
    zero.step(lr, norm, int(step + 1));
    device_synchronize(device);  // the step ends when the GPU has run its kernels
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.step = step + 1;

    const MemoryLedger mem = MemoryTracker::global().peaks();
    if (step == first_step) {  // after the first step: memory and micro-batches in flight, per rank
      const int bound = gpipe_max_in_flight(accum);
      const std::string line = in_flight_line<A>(run.world.rank(), pp.rank(), pp.size(), bound,
                                                 pipeline.measured_in_flight(), {&model}, mem) +
                               memory_line(mem, with_activations<A>(zero.memory_formula(), {&model}));
      print_from_every_rank(run.world, line);
      const CommTally formula = pipeline_traffic(pp.size(), 1, accum, pp.rank(), pipeline.message_size(), dtype_of<A>(),
                                                 tied.summed_elements(), dtype_of<GradOf<A>>());
      if (pp.size() > 1) print_traffic_by_rank(run.world, "pipeline", state.step, pp_step, formula);
      if (tp.size() > 1)
        print_traffic_by_rank(run.world, "tensor-parallel", state.step, tp_step,
                              tp_step_traffic(tp_step_of(cfg, tp.size(), int64_t(B) * T, accum), model.layout()));
      if (dp.size() > 1)
        print_traffic_by_rank(run.world, "data-parallel", state.step, zero.step_counted(),
                              zero.step_traffic(accum, chunk_passes(schedule, 0), tied.summed_elements() > 0));
    }
    log_step(run, log, state.step, loss, lr, norm, ms, mem);

    // true after a stop signal: this step is checkpointed, and the run ends
    if (after_step(run, validate, dp, log, ckpt, state, whole)) break;
  }
  const std::string bubbles =  // the theory does not depend on the costs
      bubble.report([&](const PipeCosts&) { return pipeline_bubble(pp.size(), accum); }, pipeline.measured_costs());
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
}

}  // namespace

int main(int argc, char** argv) {
  StageSpec spec{"07_pipeline_gpipe"};
  spec.tp = true, spec.pp = true, spec.zero_key = true;
  spec.checks = check_stage;
  return stage_main(argc, argv, spec, train_ranks);
}
