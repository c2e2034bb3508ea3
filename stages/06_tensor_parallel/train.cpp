// Stage 06: tensor parallelism (with sequence parallelism, a vocabulary-parallel
// embedding and cross-entropy) composed with data parallelism and a chosen ZeRO stage.
// The ranks form a tp x dp mesh: the tp ranks of a group hold slices of one model
// replica (their heads, hidden units and vocabulary rows) and run every micro-batch
// together; the dp groups split the batch as in stages 02-05, over the local buffers.
//   for each step:  zero grads
//                   for each of grad_accum micro-batches (the same sequences on every tp rank):
//                       forward, backward(1/(grad_accum*dp)): the tp hooks all-reduce (or
//                       reduce-scatter and all-gather) inside every sub-block;
//                       under sequence parallelism the layernorm gradients are summed over tp
//                       the data-parallel store reduces the local gradients over dp (zero=0
//                       all-reduce, 1 reduce-scatter, 2 and 3 per bucket into shards)
//                   the global norm (each element counted once across tp x dp), AdamW on this
//                   rank's range of its local buffer, all-gather over dp for zero=1 and 2
// See tp_hooks.h and vocab_parallel.cpp for the technique and README.md for the lesson.
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

using namespace gpt;

namespace {

// A is the storage of weights and activations: float, or bf16 in bf16 mode (the tp
// hooks then move bf16 activations and their gradients, as Megatron-LM's do).
template <class A>
int train_on(Run& run) {
  Config& cfg = run.cfg;
  const Device device = run.device;
  const Precision precision = run.precision;
  Communicator& dp = run.mesh.dp();
  CountingCommunicator tp(run.mesh.tp());  // the technique's traffic, counted per step
  const bool sp = cfg.sequence_parallel, lead = run.lead();
  const int accum = cfg.grad_accum(dp.size());
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(run);  // every rank checks the same tokens: a refusal is said once
  const DataLoader val_data = validation_data(run);  // empty when the run never validates
  TensorParallelHooks<A> hooks(tp, sp, device);
  // The model holds this rank's slices; with zero >= 2 the stage keeps the weights and
  // the store the gradients.
  GPT2<A> model(cfg.model, B, T, device, precision, /*own_weights=*/cfg.zero <= 1,
                ModelSlice<A>{tp.size(), tp.rank(), sp, &hooks, /*positions=*/{}});
  const ParamLayout& layout = model.layout();  // the local buffer's tensors and units
  const ParamLayout global(cfg.model);
  const RankLayout slices = RankLayout::tensor_parallel(global, tp.size(), tp.rank());
  const int64_t n_local = layout.total();
  // The ZeRO stage of `zero` over dp, on this rank's local buffer (local_zero.h).
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
  model.set_store(sp ? static_cast<WeightStore<A>*>(&sp_grads) : &zero.store());

  const TpBudget budget = tp_budget(cfg, tp.size(), dp.size(), tp.rank(), dp.rank());
  if (lead) {
    std::printf("stage 06 | tp %d x dp %d (%s)%s, zero=%d | device %s | %s | %d threads per rank | %.2fM parameters, %.2fM in this rank's part\n",
                tp.size(), dp.size(), run.world.backend(), sp ? ", sequence parallel" : "", cfg.zero, device_name(device),
                precision_name(precision), omp_get_max_threads(), double(global.total()) / 1e6, double(n_local) / 1e6);
    std::printf("batch %d sequences x %d tokens = micro-batch %d x grad_accum %d x dp %d | train %lld tokens, val %lld tokens\n",
                cfg.batch_size, T, B, accum, dp.size(), static_cast<long long>(train_data.num_tokens()),
                static_cast<long long>(val_data.num_tokens()));
  }

  MetricsLog log(lead ? cfg.metrics_path() : "");
  // The whole model, for the lead rank's sample and every rank's share of the
  // multiple-choice eval.
  const GatherWhole<A> whole = [&](WholeOn on) {
    return WholeWeights<A>::copy(
        on_device(device, gather_whole_model(run.world, slices, zero.local_weights(), dp.rank() == 0, on)));
  };
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  state.layout_json = mesh_json(run.mesh.shape());  // checkpoints record the layout that wrote them
  const int64_t first_step = state.step;
  for (int64_t step = state.step; step < cfg.steps; ++step) {
    const int64_t first_sequence = state.sequences(cfg.batch_size);  // the data position: the sequences read so far
    const auto t0 = std::chrono::steady_clock::now();
    const CommTally tp_before = tp.tally();
    zero.zero_grads();
    double loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      train_data.batch(first_sequence, micro, dp.rank(), dp.size(), B, cfg.batch_size, inputs.data(), targets.data());
      loss += double(model.forward(inputs.data(), targets.data())) / (accum * dp.size());
      const bool last = micro == accum - 1;
      zero.set_last_micro(last);
      sp_grads.set_sum(zero.reduces_every_backward() || last);
      model.backward(1.0f / float(accum * dp.size()));
    }
    zero.wait();
    const CommTally tp_step = tp.tally() - tp_before;
    dp.all_reduce(&loss, 1, DType::F64);  // the mean over the global batch (the same on every tp rank)

    // The global norm: each rank the counted elements of its range (a tp replica or a
    // zero=0 dp replica counted once), summed over the world.
    const double norm = zero.grad_norm(run.world);
    const double lr = learning_rate(cfg, step);
    zero.step(lr, norm, int(step + 1));
    device_synchronize(device);  // the step ends when the GPU has run its kernels
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.step = step + 1;

    const MemoryLedger mem = MemoryTracker::global().peaks();
    if (lead && step == first_step) {  // after the first step of this run: measured and formula side by side
      std::printf("memory by kind, rank 0, peaks of step %lld (allocated | formula, README):\n%s",
                  static_cast<long long>(state.step), budget.memory_table(mem).c_str());
      std::printf("tensor-parallel communication in step %lld, rank 0 (counted | formula, README):\n%s",
                  static_cast<long long>(state.step), budget.comm_table(tp_step).c_str());
      if (dp.size() > 1)
        std::printf("data-parallel communication in step %lld, rank 0 (counted | formula, README):\n%s",
                    static_cast<long long>(state.step),
                    comm_table(zero.step_counted(), zero.step_traffic(accum)).c_str());
    }
    log_step(run, log, state.step, loss, lr, norm, ms, mem);

    // true after a stop signal: this step is checkpointed, and the run ends
    if (after_step(run, model, val_data, dp, log, ckpt, state, whole)) break;
  }

  end_of_run(run, model, val_data, dp, log, ckpt, state, whole);
  return 0;
}

int train_ranks(Run& run) {
  return run.precision == Precision::BF16 ? train_on<gpt::bf16>(run) : train_on<float>(run);
}

// This stage's own limits on a configuration: stage_main checks them with the shared ones
// before the run starts, the ranks comparing their refusals.
void check_stage(const Config& cfg, const MeshShape& /*mesh*/) {
  check_tensor_parallel(cfg);
}

}  // namespace

int main(int argc, char** argv) {
  StageSpec spec{"06_tensor_parallel"};
  spec.tp = true, spec.zero_key = true;
  spec.checks = check_stage;
  return stage_main(argc, argv, spec, train_ranks);
}
