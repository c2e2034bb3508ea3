// Stage 02: data parallelism (DDP). dp ranks each hold the whole model and train on
// their own share of every global batch; gradients are summed across ranks before the
// optimizer step, so every rank takes the same step stage 01 takes on the whole batch:
//   for each step:  zero grads
//                   for each of grad_accum micro-batches (this rank's sequences):
//                       forward, backward(1/(grad_accum*dp)); on the last one, buckets
//                       of finished gradients are all-reduced while backward goes on
//                   wait for the buckets; clip, AdamW (identical on every rank), log
// The all-reduce is the ring of ring_allreduce.cpp (allreduce=ring) or the backend's.
// On GPUs (device=cuda) the weights, gradients and optimizer state stay in GPU
// memory; only tokens, losses and checkpoints cross to the host.
// See README.md beside this file for the lesson.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
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
#include "kernels/ops.h"
#include "stages/02_ddp/grad_sync.h"
#include "stages/02_ddp/ring_allreduce.h"

using namespace gpt;

namespace {

// A is the storage of weights and activations: float, or bf16 in bf16 mode.
template <class A>
int train_on(Run& run) {
  Config& cfg = run.cfg;
  const Device device = run.device;
  const Precision precision = run.precision;
  const bool bf16 = precision == Precision::BF16;
  Communicator& dp = run.mesh.dp();  // stage 02: data parallelism only (StageSpec below)
  const bool lead = run.lead();  // rank 0 logs, prunes checkpoints and samples
  const int accum = cfg.grad_accum(dp.size());
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(run);  // every rank checks the same tokens: a refusal is said once
  const DataLoader val_data = validation_data(run);  // empty when the run never validates
  GPT2<A> model(cfg.model, B, T, device, precision);
  const ParamLayout& layout = model.layout();
  const int64_t n_params = layout.total();
  // In fp32 the model's weights are the master weights; in bf16 the optimizer keeps
  // the fp32 master copy and the model holds the bf16-rounded compute copy.
  AdamW<float> optimizer(layout, 0, n_params, /*keep_master=*/bf16, device);
  DeviceArray<float>& master = [&]() -> DeviceArray<float>& {
    if constexpr (std::is_same_v<A, float>) return model.params();
    else return optimizer.master();
  }();
  // Checkpoints are read and written from host memory (staged on the GPU).
  CheckpointMirror mirror({{"param", &master}, {"adam_m", &optimizer.m()}, {"adam_v", &optimizer.v()}});
  RunCheckpoints ckpt{layout, mirror.buffers(), /*sharded=*/false};
  ckpt.before_write = [&] { mirror.to_host(); };

  CheckpointState state;
  const std::string resume = resolve_resume(cfg);
  if (resume.empty()) {
    layout.init_range(cfg.seed, 0, n_params, mirror.host("param"));
  } else {
    state = load_checkpoint_sharded(dp, resume, layout, ckpt.buffers);  // whole on each rank; any rank's error on all
    if (lead) std::printf("resumed from %s at step %lld\n", resume.c_str(), static_cast<long long>(state.step));
  }
  mirror.to_device();
  model.set_params(master.data());

  // Gradients travel in buckets; summing over ranks gives the gradient of the global
  // mean loss because each rank's backward is scaled by 1/(grad_accum*dp).
  CountingCommunicator dp_counted(dp);  // the technique's traffic, counted per step
  GradSync sync(layout, model.params().data(), model.grads().data(),
                [&](float* data, size_t count) {
                  if (cfg.allreduce == "ring") ring_all_reduce(dp_counted, device, data, count, DType::F32);
                  else dp_counted.all_reduce(data, count, DType::F32);
                },
                "allreduce_bucket", cfg.bucket_mb);
  model.set_store(&sync);

  if (lead) {
    std::printf("stage 02 | dp %d (%s, allreduce=%s, %zu bucket%s) | device %s | %s | %d threads per rank | %.2fM parameters\n",
                dp.size(), dp.backend(), cfg.allreduce.c_str(), sync.buckets().size(),
                sync.buckets().size() == 1 ? "" : "s", device_name(device),
                precision_name(precision), omp_get_max_threads(), double(n_params) / 1e6);
    std::printf("batch %d sequences x %d tokens = micro-batch %d x grad_accum %d x dp %d | train %lld tokens, val %lld tokens\n",
                cfg.batch_size, T, B, accum, dp.size(), static_cast<long long>(train_data.num_tokens()),
                static_cast<long long>(val_data.num_tokens()));
  }

  MetricsLog log(lead ? cfg.metrics_path() : "");
  // Every rank holds the whole model: the sample and the multiple-choice eval read it in place.
  const GatherWhole<A> whole = [&](WholeOn) { return WholeWeights<A>::held(model.params().data()); };
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
    double norm = 0;
    {
      Span span("grad_norm");
      norm = std::sqrt(ops::sum_of_squares(device, model.grads().data(), size_t(n_params)));
    }
    const double lr = learning_rate(cfg, step);
    {
      Span span("adamw");
      const double scale = clip_scale(norm, cfg.grad_clip, step + 1);
      // bf16: the fp32 master weights, then their bf16 copy; fp32: the weights.
      optimizer.step(device, model.params().data(), model.grads().data(), lr, scale, cfg, int(step + 1));
    }
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
          gradient_traffic(sync.buckets(), /*ring=*/cfg.allreduce == "ring", dp.size(), dp.rank());
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
  StageSpec spec{"02_ddp"};
  spec.allreduce_key = true;
  return stage_main(argc, argv, spec, train_ranks);
}
