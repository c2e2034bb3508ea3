// Stage 04: ZeRO-2. ZeRO-1's sharded optimizer state, plus sharded gradients: no rank
// keeps a full gradient; each bucket is reduce-scattered as soon as backward finishes it.
//   for each step:  zero this rank's shard gradient
//                   for each of grad_accum micro-batches (this rank's sequences):
//                       forward, backward(1/(grad_accum*dp)); every finished bucket is
//                       reduce-scattered into the shard gradients and freed
//                   clip by the global norm, AdamW on shard r, all-gather the weights
// See zero2.h for the technique and README.md beside this file for the lesson.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/comm.h"
#include "common/comm_counter.h"
#include "common/config.h"
#include "common/data.h"
#include "common/device.h"
#include "common/device_array.h"
#include "common/driver.h"
#include "common/error.h"
#include "common/gpt2.h"
#include "common/memory.h"
#include "common/mesh.h"
#include "common/metrics.h"
#include "common/optimizer.h"
#include "common/trace.h"
#include "stages/02_ddp/ring_allreduce.h"
#include "stages/03_zero1/zero1.h"
#include "stages/04_zero2/zero2.h"

using namespace gpt;

namespace {

// A is the storage of weights and activations: float, or bf16 in bf16 mode.
template <class A>
int train_on(Run& run) {
  Config& cfg = run.cfg;
  const Device device = run.device;
  const Precision precision = run.precision;
  const bool bf16 = precision == Precision::BF16;
  Communicator& dp = run.mesh.dp();  // stage 04: data parallelism only (StageSpec below)
  const bool lead = run.lead();  // rank 0 logs, prunes checkpoints and samples
  const int accum = cfg.grad_accum(dp.size());
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(run);  // every rank checks the same tokens: a refusal is said once
  const DataLoader val_data = validation_data(run);  // empty when the run never validates
  // The model allocates no weights or gradients: the stage keeps the whole weights
  // (every rank needs them for forward) and the store keeps the shard gradient.
  GPT2<A> model(cfg.model, B, T, device, precision, /*own_weights=*/false);
  const ParamLayout& layout = model.layout();
  const int64_t n_params = layout.total();
  DeviceArray<A> weights = [&] {
    const MemScope scope(MemKind::Params);
    return DeviceArray<A>(device, size_t(n_params));
  }();
  // This rank's shard of the optimizer state. In fp32 the master weights of the shard
  // are the stage's own weights there; in bf16 the optimizer keeps them in fp32.
  const Shard shard = shard_of(n_params, dp.size(), dp.rank());
  AdamW<float> optimizer(layout, shard.begin, shard.end, /*keep_master=*/bf16, device);
  A* params = weights.data();
  // Checkpoints are read and written from host memory (staged on the GPU): this rank's
  // shard of the master weights and of the moments.
  CheckpointMirror mirror = shard_checkpoint(optimizer, weights, size_t(shard.begin), shard.begin);
  RunCheckpoints ckpt{layout, mirror.buffers(), /*sharded=*/true};
  ckpt.before_write = [&] { mirror.to_host(); };

  CheckpointState state;
  const std::string resume = resolve_resume(cfg);
  if (resume.empty()) {
    layout.init_range(cfg.seed, shard.begin, shard.end, mirror.host("param"));
  } else {
    state = load_checkpoint_sharded(dp, resume, layout, ckpt.buffers);  // this rank's shard; any rank's error on all
    if (lead) std::printf("resumed from %s at step %lld\n", resume.c_str(), static_cast<long long>(state.step));
  }
  mirror.to_device();
  // Every rank starts from its shard of the master weights (in fp32 they are the stage's
  // own weights there; in bf16 their rounding) and gathers the rest.
  optimizer.weights_from_master(device, params + shard.begin);
  ring_all_gather(dp, params, size_t(n_params), dtype_of<A>());
  CountingCommunicator dp_counted(dp);  // the technique's traffic, counted per step
  Zero2Store<A> store(layout, dp_counted, params, cfg.bucket_mb, /*embeddings_alone=*/false, device);
  model.set_store(&store);

  if (lead) {
    std::printf("stage 04 | dp %d (%s), optimizer state and gradients sharded: %lld of %lld elements per rank, %zu bucket%s | device %s | %s | %d threads per rank | %.2fM parameters\n",
                dp.size(), dp.backend(), static_cast<long long>(shard.size()), static_cast<long long>(n_params),
                store.buckets().size(), store.buckets().size() == 1 ? "" : "s", device_name(device),
                precision_name(precision), omp_get_max_threads(),
                double(n_params) / 1e6);
    std::printf("batch %d sequences x %d tokens = micro-batch %d x grad_accum %d x dp %d | train %lld tokens, val %lld tokens\n",
                cfg.batch_size, T, B, accum, dp.size(), static_cast<long long>(train_data.num_tokens()),
                static_cast<long long>(val_data.num_tokens()));
  }

  MetricsLog log(lead ? cfg.metrics_path() : "");
  // Every rank holds the whole weights, gathered after each step: read in place.
  const GatherWhole<A> whole = [&](WholeOn) { return WholeWeights<A>::held(params); };
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  state.layout_json = mesh_json({dp.size(), 1, 1, 1});  // checkpoints record the layout that wrote them
  const int64_t first_step = state.step;
  for (int64_t step = state.step; step < cfg.steps; ++step) {
    const int64_t first_sequence = state.sequences(cfg.batch_size);  // the data position: the sequences read so far
    const auto t0 = std::chrono::steady_clock::now();
    const CommTally dp_before = dp_counted.tally();
    {
      Span span("zero_grads");
      store.zero_shard_grads();
    }
    double loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      train_data.batch(first_sequence, micro, dp.rank(), dp.size(), B, cfg.batch_size, inputs.data(), targets.data());
      loss += double(model.forward(inputs.data(), targets.data())) / (accum * dp.size());
      model.backward(1.0f / float(accum * dp.size()));  // buckets reduce-scatter as they finish
    }
    {
      Span span("wait_buckets", "comm");
      store.wait();  // the last buckets' reductions, on the communication thread
    }
    dp.all_reduce(&loss, 1, DType::F64);  // the mean over the global batch
    const float* shard_grads = store.shard_grads().data();
    const double norm = sharded_grad_norm(dp, device, shard_grads, shard.size());
    const double lr = learning_rate(cfg, step);
    sharded_adamw_step(dp_counted, device, optimizer, shard, params, shard_grads, n_params, norm, lr, cfg,
                       int(step + 1));
    const CommTally dp_step = dp_counted.tally() - dp_before;
    device_synchronize(device);  // GPU: the step ends when its last kernel has run
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.step = step + 1;

    // What the arrays hold, by kind: the tracker's peaks so far (common/memory.h), printed
    // once the first step has run (and made its buffers).
    const MemoryLedger mem = MemoryTracker::global().peaks();
    if (lead && step == first_step) {
      std::printf("memory by kind, per rank, peaks of step %lld:\n%s", static_cast<long long>(state.step),
                  mem.table().c_str());
      const CommTally formula =
          sharded_step_traffic(store.buckets(), n_params, dp.size(), dp.rank(), dtype_of<A>(), accum);
      std::printf("data-parallel communication in step %lld, rank 0 (counted | formula, README):\n%s",
                  static_cast<long long>(state.step), comm_table(dp_step, formula).c_str());
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

}  // namespace

int main(int argc, char** argv) {
  StageSpec spec{"04_zero2"};
  return stage_main(argc, argv, spec, train_ranks);
}
