// Stage 03: ZeRO-1. Data parallelism as in stage 02, but the optimizer state (fp32
// master weights, AdamW moments) is sharded: rank r keeps and updates shard r only.
//   for each step:  zero grads
//                   for each of grad_accum micro-batches (this rank's sequences):
//                       forward, backward(1/(grad_accum*dp))
//                       on the last one, buckets of finished gradients are reduce-scattered
//                       on the communication thread while backward goes on: rank r
//                       receives the sum of the buckets' parts in shard r
//                   clip by the global norm, AdamW on shard r, all-gather the weights
// See zero1.h for the technique and README.md beside this file for the lesson.
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
#include "stages/02_ddp/grad_sync.h"
#include "stages/02_ddp/ring_allreduce.h"
#include "stages/03_zero1/zero1.h"

using namespace gpt;

namespace {

// A is the storage of weights and activations: float, or bf16 in bf16 mode.
template <class A>
int train_on(Run& run) {
  Config& cfg = run.cfg;
  const Device device = run.device;
  const Precision precision = run.precision;
  const bool bf16 = precision == Precision::BF16;
  Communicator& dp = run.mesh.dp();  // stage 03: data parallelism only (StageSpec below)
  const bool lead = run.lead();  // rank 0 logs, prunes checkpoints and samples
  const int accum = cfg.grad_accum(dp.size());
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(run);  // every rank checks the same tokens: a refusal is said once
  const DataLoader val_data = validation_data(run);  // empty when the run never validates
  GPT2<A> model(cfg.model, B, T, device, precision);
  const ParamLayout& layout = model.layout();
  const int64_t n_params = layout.total();
  // This rank's shard of the optimizer state. In fp32 the master weights of the shard
  // are the model's own weights there; in bf16 the optimizer keeps them in fp32.
  const Shard shard = shard_of(n_params, dp.size(), dp.rank());
  AdamW<float> optimizer(layout, shard.begin, shard.end, /*keep_master=*/bf16, device);
  A* params = model.params().data();
  // Checkpoints are read and written from host memory (staged on the GPU): this rank's
  // shard of the master weights and of the moments.
  CheckpointMirror mirror = shard_checkpoint(optimizer, model.params(), size_t(shard.begin), shard.begin);
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
  // Every rank starts from its shard of the master weights (in fp32 they are the model's
  // own weights there; in bf16 their rounding) and gathers the rest.
  optimizer.weights_from_master(device, params + shard.begin);
  ring_all_gather(dp, params, size_t(n_params), dtype_of<A>());

  // Gradients travel in stage 02's buckets, on its communication thread, while backward
  // continues: each bucket is reduce-scattered, so that rank r receives the sum over
  // ranks of the bucket's part inside shard r (the part its optimizer updates).
  float* grads = model.grads().data();
  CountingCommunicator dp_counted(dp);  // the technique's traffic, counted per step
  GradSync sync(layout, params, grads,
                [&](float* data, size_t count) {
                  const int64_t begin = data - grads, end = begin + int64_t(count);
                  ring_reduce_scatter_v(dp_counted, device, data, shard_bounds_within(begin, end, n_params, dp.size()), DType::F32);
                },
                "reduce_scatter_bucket", cfg.bucket_mb);
  model.set_store(&sync);

  if (lead) {
    std::printf("stage 03 | dp %d (%s), optimizer state sharded: %lld of %lld elements per rank | device %s | %s | %d threads per rank | %.2fM parameters\n",
                dp.size(), dp.backend(), static_cast<long long>(shard.size()), static_cast<long long>(n_params),
                device_name(device), precision_name(precision), omp_get_max_threads(), double(n_params) / 1e6);
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
      model.zero_grads();
    }
    double loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      train_data.batch(first_sequence, micro, dp.rank(), dp.size(), B, cfg.batch_size, inputs.data(), targets.data());
      loss += double(model.forward(inputs.data(), targets.data())) / (accum * dp.size());
      sync.set_sync(micro == accum - 1);  // only the last micro-step communicates
      model.backward(1.0f / float(accum * dp.size()));
    }
    {
      Span span("wait_buckets", "comm");
      sync.wait();
    }
    dp.all_reduce(&loss, 1, DType::F64);  // the mean over the global batch
    const float* shard_grads = model.grads().data() + shard.begin;
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
          sharded_step_traffic(sync.buckets(), n_params, dp.size(), dp.rank(), dtype_of<A>(), /*reductions=*/1);
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
  StageSpec spec{"03_zero1"};
  return stage_main(argc, argv, spec, train_ranks);
}
