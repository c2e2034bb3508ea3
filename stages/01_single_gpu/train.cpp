// Stage 01: GPT-2 training on one device — the baseline every later stage is proven
// equal to. The loop is the whole technique of this stage:
//   for each step:  zero grads
//                   for each of grad_accum micro-batches: forward, backward(1/grad_accum)
//                   clip by the global gradient norm, AdamW update, log
//                   now and then: validation loss, checkpoint
//   at the end:     validation loss, checkpoint, a generated sample
// The same loop runs on the CPU and on the GPU (device=cuda): the model's and the
// optimizer's buffers live on the device, only tokens, losses and checkpoints cross
// to the host. In bf16 mode weights and activations are stored as bf16 (GPT2<bf16>) on
// both devices (the CPU's ops widen to fp32 and round back: kernels/cpu/bf16_ops.h).
// See README.md beside this file for the lesson.
#include <omp.h>

#include <optional>
#include <type_traits>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/checkpoint.h"
#include "common/choices_in_training.h"
#include "common/config.h"
#include "common/data.h"
#include "common/device.h"
#include "common/driver.h"
#include "common/error.h"
#include "common/gpt2.h"
#include "common/launcher.h"
#include "common/memory.h"
#include "common/metrics.h"
#include "common/mfu.h"
#include "common/optimizer.h"
#include "common/run_lock.h"
#include "common/sampler.h"
#include "common/stop_request.h"
#include "common/trace.h"
#include "kernels/ops.h"

using namespace gpt;

namespace {

// Mean loss over val_batches fixed validation batches.
template <class A>
double validation_loss(GPT2<A>& model, const DataLoader& val, int batches) {
  const size_t n = size_t(model.batch()) * model.seq_len();
  std::vector<int32_t> inputs(n), targets(n);
  double sum = 0;
  for (int k = 0; k < batches; ++k) {
    val.sequential_batch(k, model.batch(), inputs.data(), targets.data());
    sum += model.evaluate(inputs.data(), targets.data());
  }
  return batches > 0 ? sum / batches : 0.0;
}

template <class A>
int train_on(const Config& cfg, Device device, Precision precision) {
  const bool bf16 = precision == Precision::BF16;
  const int accum = cfg.grad_accum(1);
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(cfg);
  const DataLoader val_data = validation_data(cfg);  // empty when the run never validates
  GPT2<A> model(cfg.model, B, T, device, precision);
  const ParamLayout& layout = model.layout();
  const int64_t n_params = layout.total();
  // In fp32 (and fp64) the model's weights are the master weights; in bf16 the optimizer
  // keeps the fp32 master copy and the model holds the bf16-rounded compute copy.
  using M = GradOf<A>;  // master weights and optimizer state: double in fp64, else float
  AdamW<M> optimizer(layout, 0, n_params, /*keep_master=*/bf16, device);
  DeviceArray<M>* master = &optimizer.master();
  if constexpr (!std::is_same_v<A, gpt::bf16>)
    if (!bf16) master = &model.params();
  // Checkpoints are read and written from host memory (staged on the GPU), in the type
  // of the arrays: fp64 runs write fp64 files, so that a resumed one continues bit for bit.
  CheckpointMirror mirror = [&] {
    if constexpr (std::is_same_v<M, double>)
      return CheckpointMirror({{"param", nullptr, master}, {"adam_m", nullptr, &optimizer.m()},
                               {"adam_v", nullptr, &optimizer.v()}});
    else
      return CheckpointMirror({{"param", master}, {"adam_m", &optimizer.m()}, {"adam_v", &optimizer.v()}});
  }();

  CheckpointState state;
  bool set_aside = false;  // whether the first save has set another run's later checkpoints aside
  const std::string resume = resolve_resume(cfg);
  if (resume.empty()) {
    layout.init_range(cfg.seed, 0, n_params, mirror.host<M>("param"));  // fp32 values (fp64: widened)
  } else {
    state = load_checkpoint(resume, layout, mirror.buffers());
    std::printf("resumed from %s at step %lld\n", resume.c_str(), static_cast<long long>(state.step));
  }
  mirror.to_device();
  model.set_params(master->data());

  std::printf("stage 01 | device %s | %s | %d threads | %.2fM parameters | layers %d, width %d, heads %d\n",
              device_description(device).c_str(), precision_name(precision), omp_get_max_threads(),
              double(n_params) / 1e6, cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head);
  std::printf("batch %d sequences x %d tokens = micro-batch %d x grad_accum %d | train %lld tokens, val %lld tokens\n",
              cfg.batch_size, T, B, accum, static_cast<long long>(train_data.num_tokens()),
              static_cast<long long>(val_data.num_tokens()));
  // Model FLOPs utilisation: 6 N + 12 L C T flops per token (common/mfu.h).
  const double flops_per_token = training_flops_per_token(n_params, cfg.model, T);
  const std::optional<double> peak = device_peak_flops(device, precision);
  if (peak) std::printf("device peak %.0f TFLOP/s (%s): mfu is reported against it\n", *peak / 1e12, precision_name(precision));
  if (device == Device::CUDA) {
    std::printf("gemm %s\n", ops::gemm_in_use(device, bf16));
    // The tensor-core GEMMs move 16-byte pieces: every row stride (C, 3C, 4C, Vp) and
    // every weight's offset must be a multiple of 8 elements, which C % 8 == 0 ensures.
    if (bf16 && cfg.model.n_embd % 8 != 0)
      std::printf("note: n_embd %d is not a multiple of 8: the matmuls cannot use the tensor-core GEMMs "
                  "(v4, v5) and run on v3\n", cfg.model.n_embd);
  }

  MetricsLog log(cfg.metrics_path());
  // The multiple-choice eval (eval_choices), scored with the model's compute weights at
  // every validation: one rank, every example.
  const ChoicesInTraining choices(cfg, /*rank=*/0, /*ranks=*/1);
  auto log_choices = [&] {
    log.choices(state.step, choices.score(model.params().data(), cfg.model, device, precision, nullptr),
                choices.file());
  };
  // A checkpoint of the state after state.step steps (the weights copied to the host first).
  auto save = [&] {
    mirror.to_host();
    check_saveable(&layout, mirror.buffers(), state.step);  // before the run directory is touched
    set_aside_before_first_save(cfg, /*lead=*/true, set_aside);
    const std::string path = save_checkpoint(cfg.run_dir, cfg, layout, state, mirror.buffers());
    prune_checkpoints(cfg.run_dir, cfg.keep_checkpoints);
    return path;
  };
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  const int64_t first_step = state.step;
  for (int64_t step = state.step; step < cfg.steps; ++step) {
    const int64_t first_sequence = state.sequences(cfg.batch_size);  // the data position: the sequences read so far
    const auto t0 = std::chrono::steady_clock::now();
    {
      Span span("zero_grads");
      model.zero_grads();
    }
    double loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      // One rank of one (the data-parallel stages pass their rank and their count).
      train_data.batch(first_sequence, micro, /*dp_rank=*/0, /*dp=*/1, B, cfg.batch_size, inputs.data(),
                       targets.data());
      loss += double(model.forward(inputs.data(), targets.data())) / accum;
      model.backward(M(cfg.test_grad_scale) / M(accum));  // test_grad_scale: 1 outside tests
    }
    double norm = 0;
    {
      Span span("grad_norm");
      norm = std::sqrt(ops::sum_of_squares(device, model.grads().data(), size_t(n_params)));
    }
    const double lr = learning_rate(cfg, step);
    {
      Span span("adamw");
      const double scale = clip_scale(norm, cfg.grad_clip, step + 1);
      // bf16: the fp32 master weights, then their bf16 copy; fp32 and fp64: the weights.
      optimizer.step(device, model.params().data(), model.grads().data(), lr, scale, cfg, int(step + 1));
    }
    device_synchronize(device);  // GPU: the step ends when its last kernel has run
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.step = step + 1;

    // What the arrays hold, by kind: the tracker's peaks so far (common/memory.h), printed
    // once the first step has run (and made its buffers).
    const MemoryLedger mem = MemoryTracker::global().peaks();
    if (step == first_step)
      std::printf("memory by kind, peaks of step %lld:\n%s", static_cast<long long>(state.step),
                  mem.table().c_str());
    log_step(cfg, log, /*lead=*/true, flops_per_token, peak, state.step, loss, lr, norm, ms, mem);

    std::string saved;  // this step's checkpoint, if written
    if (stop_signal() == 0) {  // a stop signal goes straight to its checkpoint, below
      if (cfg.val_every > 0 && state.step % cfg.val_every == 0 && state.step < cfg.steps) {
        if (cfg.val_batches > 0)
          log_validation(log, /*lead=*/true, state.step, validation_loss(model, val_data, cfg.val_batches));
        if (choices.enabled()) log_choices();
      }
      if (cfg.checkpoint_every > 0 && state.step % cfg.checkpoint_every == 0 && state.step < cfg.steps) saved = save();
    }
    if (stop_signal() != 0 && state.step < cfg.steps) {  // common/stop_request.h: checkpointed once, the run ends
      const std::string path = saved.empty() ? save() : saved, signal = stop_signal_name(stop_signal());
      std::printf("stopped after step %lld by %s: checkpoint %s; --set resume=latest continues the run\n",
                  static_cast<long long>(state.step), signal.c_str(), path.c_str());
      log.stopped(state.step, signal, path);
      Trace::global().write();
      return kStoppedExit;
    }
  }

  // A stop signal after the last step: its checkpoint is still written, but not the
  // evaluation and the sample, which it would wait for.
  const bool cut_short = stop_signal() != 0;
  if (cut_short) std::printf("a stop signal came after the last step: the end-of-run validation, eval and sample "
                             "are skipped\n");
  if (cfg.val_batches > 0 && !cut_short)
    log_validation(log, /*lead=*/true, state.step, validation_loss(model, val_data, cfg.val_batches));
  if (choices.enabled() && !cut_short) log_choices();
  if (saves_at_end(cfg, state)) {
    const std::string path = save();
    std::printf("checkpoint: %s\n", path.c_str());
  }
  if (cfg.sample_tokens > 0 && !cut_short) {
    const MemScope eval(MemKind::Eval);  // the sampler's model, counted apart from the training's
    CachedDecoder<A> sampler(cfg.model, sample_window(cfg, T), device, precision);
    sampler.model().set_params(master->data());
    // A stop signal ends the sample where it is.
    const Sample drawn = sample_text(sampler, cfg, state.sample_counter, [] { return stop_signal() == 0; });
    print_sample(stdout, cfg, drawn.text, drawn.cut_short);
    log.sample(state.step, drawn.text, drawn.log_prob, drawn.tokens, drawn.cut_short);
  }
  device_synchronize(device);  // a failure in the last queued kernel is reported, not lost
  Trace::global().write();
  return 0;
}

int train(int argc, char** argv) {
  Config cfg;
  if (!parse_args(argc, argv, cfg, "train")) return 0;
  // One process: Ctrl-C and SIGTERM too; once the config is read, so that a signal ends a
  // wait on a --config pipe that no one writes, as it would cat's, at once.
  install_stop_handlers(/*announce=*/true, /*terminal_signals=*/true);
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  std::printf("%s", thread_notes_here().c_str());  // threads beyond the CPUs this process may use
  require_axes(cfg, StageSpec{"01_single_gpu"});  // one device: no tp, pp, cp
  require(cfg.dp <= 1, "dp=" + std::to_string(cfg.dp) + ": stage 01 trains on one device (dp must be 0 or 1)");
  // Every process of such a job finds this alike, and has no MPI to agree by: the first
  // says it, the others end with the same status in silence, a moment later (mpirun ends
  // the job at the first non-zero exit, which must not cut the first's message off).
  if (launcher_world_size() > 1 && launcher_rank() > 0) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return 2;
  }
  require(launcher_world_size() <= 1, "stage 01 trains in one process, but mpirun started it as one of " +
                                          std::to_string(launcher_world_size()) + " ranks: run it alone, or "
                                          "run a multi-rank stage (02-11) under mpirun");
  const Device device = resolve_device(cfg.device);
  const Precision precision = parse_precision(cfg.precision);
  ops::set_gemm(device, cfg.gemm);
  const RunDirLock lock(cfg.run_dir);  // one job per run directory, taken before anything is written
  if (const std::string note = start_notes(cfg); !note.empty()) std::printf("%s\n", note.c_str());
  Trace::global().enable(cfg.trace_file);
  if (precision == Precision::BF16) return train_on<gpt::bf16>(cfg, device, precision);
  if (precision == Precision::FP64) {
    require(device == Device::CPU, "precision=fp64 runs on the CPU only (device=cpu)");
    return train_on<double>(cfg, device, precision);
  }
  return train_on<float>(cfg, device, precision);
}

}  // namespace

int main(int argc, char** argv) { return run_main("train", [&] { return train(argc, argv); }); }
