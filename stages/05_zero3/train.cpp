// Stage 05: ZeRO-3. ZeRO-2's sharded optimizer state and gradients, plus sharded
// weights: each unit's weights are gathered right before use and freed right after,
// the next unit's gather prefetched while the current one computes.
//   for each step:  zero this rank's shard gradient
//                   for each of grad_accum micro-batches (this rank's sequences):
//                       forward (gathering unit by unit), backward (gathering again;
//                       every finished bucket reduce-scattered into the shard gradients)
//                   clip by the global norm, AdamW on shard r — the weights stay sharded
// See zero3.h for the technique and README.md beside this file for the lesson.
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
#include "stages/03_zero1/zero1.h"
#include "stages/05_zero3/zero3.h"

using namespace gpt;

namespace {

// A is the storage of weights and activations: float, or bf16 in bf16 mode.
template <class A>
int train_on(Run& run) {
  Config& cfg = run.cfg;
  const Device device = run.device;
  const Precision precision = run.precision;
  const bool bf16 = precision == Precision::BF16;
  Communicator& dp = run.mesh.dp();  // stage 05: data parallelism only (StageSpec below)
  const bool lead = run.lead();  // rank 0 logs, prunes checkpoints and samples
  const int accum = cfg.grad_accum(dp.size());
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(run);  // every rank checks the same tokens: a refusal is said once
  const DataLoader val_data = validation_data(run);  // empty when the run never validates
  // The model allocates no weights or gradients: the stage keeps this rank's shard of
  // the weights and the store gathers units from all shards when the model asks.
  GPT2<A> model(cfg.model, B, T, device, precision, /*own_weights=*/false);
  const ParamLayout& layout = model.layout();
  const int64_t n_params = layout.total();
  // This rank's shard of the optimizer state. In fp32 the master weights of the shard
  // are the stage's own weights there; in bf16 the optimizer keeps them in fp32.
  const Shard shard = shard_of(n_params, dp.size(), dp.rank());
  DeviceArray<A> weights = [&] {  // this rank's shard of the compute weights
    const MemScope scope(MemKind::Params);
    return DeviceArray<A>(device, size_t(shard.size()));
  }();
  AdamW<float> optimizer(layout, shard.begin, shard.end, /*keep_master=*/bf16, device);
  A* shard_params = weights.data();
  // Checkpoints are read and written from host memory (staged on the GPU): this rank's
  // shard of the master weights and of the moments.
  CheckpointMirror mirror = shard_checkpoint(optimizer, weights, /*offset=*/0, shard.begin);
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
  // Every rank starts from its shard of the master weights (in fp32 they are the shard's
  // weights themselves; in bf16 their rounding); the rest is gathered unit by unit.
  optimizer.weights_from_master(device, shard_params);
  CountingCommunicator dp_counted(dp);  // the technique's traffic, counted per step
  Zero3Store<A> store(layout, dp_counted, shard_params, cfg.bucket_mb, cfg.zero3_prefetch, /*embeddings_alone=*/false,
                      device);
  model.set_store(&store);

  if (lead) {
    std::printf("stage 05 | dp %d (%s), optimizer state, gradients and weights sharded: %lld of %lld elements per rank, %zu bucket%s | device %s | %s | %d threads per rank | %.2fM parameters\n",
                dp.size(), dp.backend(), static_cast<long long>(shard.size()), static_cast<long long>(n_params),
                store.buckets().size(), store.buckets().size() == 1 ? "" : "s", device_name(device),
                precision_name(precision), omp_get_max_threads(),
                double(n_params) / 1e6);
    std::printf("batch %d sequences x %d tokens = micro-batch %d x grad_accum %d x dp %d | train %lld tokens, val %lld tokens\n",
                cfg.batch_size, T, B, accum, dp.size(), static_cast<long long>(train_data.num_tokens()),
                static_cast<long long>(val_data.num_tokens()));
  }

  MetricsLog log(lead ? cfg.metrics_path() : "");
  // The whole model, for the sample and the multiple-choice eval: an all-gather of the
  // shards, so every rank receives it whichever asked.
  const GatherWhole<A> whole = [&](WholeOn) {
    // Through host memory (gather_all), in a DeviceArray so that the memory ledger counts
    // it; on the CPU it is the copy handed on, not copied again.
    DeviceArray<A> gathered(Device::CPU, static_cast<size_t>(n_params));
    store.gather_all(gathered.data());  // collective: every rank takes part
    if (device == Device::CPU) return WholeWeights<A>::copy(std::move(gathered));
    DeviceArray<A> on_gpu(device, gathered.size());
    on_gpu.copy_from_host(gathered.data(), gathered.size());
    return WholeWeights<A>::copy(std::move(on_gpu));
  };
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
    const CommTally dp_step = dp_counted.tally() - dp_before;  // before the update starts the next step's gather
    dp.all_reduce(&loss, 1, DType::F64);  // the mean over the global batch
    const float* shard_grads = store.shard_grads().data();
    const double norm = sharded_grad_norm(dp, device, shard_grads, shard.size());
    const double lr = learning_rate(cfg, step);
    {
      Span span("adamw_shard");  // updates the shard in place: the next forward gathers it
      const double scale = clip_scale(norm, cfg.grad_clip, step + 1);
      // bf16: the fp32 master shard, then its bf16 copy; fp32: the shard's weights.
      optimizer.step(device, shard_params, shard_grads, lr, scale, cfg, int(step + 1));
      store.weights_updated();  // units kept gathered between passes are stale now
    }
    device_synchronize(device);  // GPU: the step ends when its last kernel has run
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.step = step + 1;

    // What the arrays hold, by kind: the tracker's peaks so far (common/memory.h), printed
    // once the first step has run (and made its buffers).
    const MemoryLedger mem = MemoryTracker::global().peaks();
    if (lead && step == first_step) {
      std::printf("memory by kind, per rank, peaks of step %lld:\n%s", static_cast<long long>(state.step),
                  mem.table().c_str());
      const CommTally formula = zero3_step_traffic(layout, store.buckets(), dp.size(), dp.rank(), dtype_of<A>(), accum);
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
  StageSpec spec{"05_zero3"};
  spec.zero3 = true;
  return stage_main(argc, argv, spec, train_ranks);
}
