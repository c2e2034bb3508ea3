// Stage 10: context parallelism. The cp ranks of a group split every sequence: each
// runs some chunks of it (context_split.h: zigzag, for equal causal work) through the
// whole model, and the attention brings the other chunks' keys and values around a
// ring (ring_attention.h). Composed with tensor parallelism (stage 06) and with data
// parallelism and a ZeRO stage: the mesh is dp x cp x tp. For the weights the cp ranks
// are data-parallel: each computes gradients from its own tokens, so gradients are
// reduced (and ZeRO shards kept) over the dp x cp ranks that hold the same slices.
//   for each step:  zero grads
//                   for each of grad_accum micro-batches (the same sequences on every cp and
//                   tp rank of a dp group, each cp rank its chunks of them):
//                       forward, backward(1/(grad_accum*dp*cp)): the ring passes keys and
//                       values (and, backward, their gradients) between the cp ranks
//                       the store reduces the local gradients over dp x cp (zero 0-3)
//                   the global norm, AdamW on this rank's range, all-gather unless zero=3
// See ring_attention.h and context_split.h for the technique and README.md for the lesson.
#include <omp.h>

#include <chrono>
#include <cmath>
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
#include "stages/02_ddp/grad_sync.h"
#include "stages/02_ddp/ring_allreduce.h"
#include "stages/03_zero1/zero1.h"
#include "stages/04_zero2/zero2.h"
#include "stages/05_zero3/zero3.h"
#include "stages/06_tensor_parallel/sequence_parallel_grads.h"
#include "stages/06_tensor_parallel/tp_budget.h"
#include "stages/06_tensor_parallel/tp_hooks.h"
#include "stages/10_context_parallel/context_split.h"
#include "stages/10_context_parallel/ring_attention.h"

using namespace gpt;

namespace {

int train_ranks(Run& run) {
  Config& cfg = run.cfg;
  const Device device = run.device;
  const Precision precision = run.precision;
  const bool bf16 = precision == Precision::BF16;
  check_tensor_parallel(cfg);
  check_context_parallel(cfg);
  Communicator& tp = run.mesh.tp();
  CountingCommunicator cp(run.mesh.cp());  // the technique's traffic, counted per step
  // The ranks holding the same weight slices: dp x cp, the data-parallel group of the
  // weights (every rank of it computes gradients from tokens of its own).
  const MeshCoord at = run.mesh.coord();
  const std::unique_ptr<Communicator> dp_owner = run.world.split(at.tp * run.mesh.shape().pp + at.pp,
                                                                 at.dp * run.mesh.shape().cp + at.cp);
  Communicator& dp = *dp_owner;
  const int data_rank = at.dp, data_ranks = run.mesh.shape().dp;  // which sequences this rank reads
  const bool sp = cfg.sequence_parallel, lead = run.lead();
  const int zero = cfg.zero;
  const int accum = cfg.grad_accum(data_ranks);
  const int B = cfg.micro_batch_size, T = cfg.seq_len;
  Trace::global().enable(cfg.trace_file.empty() ? "" : cfg.trace_file + ".rank" + std::to_string(run.world.rank()) + ".json",
                         run.world.rank());

  DataLoader train_data(cfg.train_data, cfg.model.vocab_size, T, cfg.seed);
  DataLoader val_data(cfg.val_data, cfg.model.vocab_size, T, cfg.seed);
  ContextSplit split(cp.size(), cp.rank(), cfg.cp_split == "zigzag", T);
  split.group = &cp;
  run.part = &split;  // validation runs the same chunks
  const int Tl = split.local_len(T);  // tokens of each sequence on this rank
  RingAttentionHooks<float> hooks(tp, sp, cp, split);
  // The model holds this rank's slices; with zero >= 2 the stage keeps the weights and
  // the store the gradients.
  GPT2<float> model(cfg.model, B, Tl, device, precision, /*own_weights=*/zero <= 1,
                    ModelSlice<float>{tp.size(), tp.rank(), sp, &hooks, split.positions()});
  const ParamLayout& layout = model.layout();  // the local buffer's tensors and units
  const ParamLayout global(cfg.model);
  const RankLayout slices = RankLayout::tensor_parallel(global, tp.size(), tp.rank());
  const int64_t n_local = layout.total();
  // This rank's range of the local buffer: everything with zero=0, else its dp shard.
  const Shard shard = zero == 0 ? Shard{0, n_local} : shard_of(n_local, dp.size(), dp.rank());
  AdamW<float> optimizer(slices, shard.begin, shard.end, /*keep_master=*/bf16);
  DeviceArray<float> weights = [&] {  // zero 2: all local weights; zero 3: the shard's
    const MemScope scope(MemKind::Params);
    return DeviceArray<float>(device, size_t(zero == 2 ? n_local : zero == 3 ? shard.size() : 0));
  }();
  float* params = zero <= 1 ? model.params().data() : weights.data();  // the whole local buffer (not zero 3)
  float* shard_params = zero == 3 ? weights.data() : params + shard.begin;
  float* master = bf16 ? optimizer.master().data() : shard_params;
  // Checkpoints: the elements of this rank's range, counted once across the world (with
  // zero=0 every dp rank holds everything and dp rank 0 writes it).
  const RankLayout mine = slices.range(shard.begin, shard.end, /*counted=*/zero > 0 || dp.rank() == 0);
  const RunCheckpoints ckpt{layout,
                            {{"param", master, 0, 0}, {"adam_m", optimizer.m().data(), 0, 0}, {"adam_v", optimizer.v().data(), 0, 0}},
                            /*sharded=*/true,
                            &mine};

  CheckpointState state;
  const std::string resume = resolve_resume(cfg.resume, cfg.run_dir);
  if (resume.empty()) {
    slices.init(cfg.seed, master, shard.begin, shard.end);  // the single-device values of these slices
  } else {
    std::vector<LocalBuffer> buffers;
    for (const CheckpointBuffer& b : ckpt.buffers) buffers.push_back({b.kind, b.data});
    state = load_checkpoint_local(run.world, resume, mine, buffers);  // any layout's checkpoint
    if (lead) std::printf("resumed from %s at step %lld\n", resume.c_str(), static_cast<long long>(state.step));
  }
  if (bf16) std::copy(master, master + shard.size(), shard_params);
  model.store(shard_params, size_t(shard.size()));
  if (zero == 1 || zero == 2) ring_all_gather(dp, params, size_t(n_local), DType::F32);

  // The data-parallel store over the local buffer, as in stages 02-05.
  std::unique_ptr<GradSync> sync;      // zero 0, 1
  std::unique_ptr<Zero2Store> sharded;  // zero 2, 3 (Zero3Store is one)
  WeightStore<float>* store = nullptr;
  if (zero <= 1) {
    float* grads = model.grads().data();
    sync = std::make_unique<GradSync>(
        layout, params, grads,
        [&, grads, zero](float* data, size_t count) {
          if (zero == 0) {
            ring_all_reduce(dp, data, count, DType::F32);
            return;
          }
          const int64_t begin = data - grads, end = begin + int64_t(count);
          ring_reduce_scatter_v(dp, data, shard_bounds_within(begin, end, n_local, dp.size()), DType::F32);
        },
        cfg.bucket_mb);
    store = sync.get();
  } else if (zero == 2) {
    sharded = std::make_unique<Zero2Store>(layout, dp, params, cfg.bucket_mb);
    store = sharded.get();
  } else {
    sharded = std::make_unique<Zero3Store>(layout, dp, shard_params, cfg.bucket_mb, /*prefetch=*/true);
    store = sharded.get();
  }
  SequenceParallelGrads<float> sp_grads(layout, tp, *store);
  model.set_store(sp ? static_cast<WeightStore<float>*>(&sp_grads) : store);

  MemoryLedger mem = MemoryTracker::global().peaks();
  if (lead) {
    std::printf("stage 10 | cp %d (%s split, %d tokens of %d per rank) x tp %d x dp %d (%s)%s, zero=%d | device %s | %s | %d threads per rank | %.2fM parameters\n",
                cp.size(), cfg.cp_split.c_str(), Tl, T, tp.size(), data_ranks, run.world.backend(),
                sp ? ", sequence parallel" : "", zero, device_name(device), precision_name(precision),
                omp_get_max_threads(), double(global.total()) / 1e6);
    std::printf("batch %d sequences x %d tokens = micro-batch %d x grad_accum %d x dp %d | train %lld tokens, val %lld tokens\n",
                cfg.batch_size, T, B, accum, data_ranks, static_cast<long long>(train_data.num_tokens()),
                static_cast<long long>(val_data.num_tokens()));
    std::printf("attention work per sequence and head (visible query-key pairs), by cp rank:");
    int64_t most = 0, sum = 0;
    for (int r = 0; r < cp.size(); ++r) {
      const int64_t w = split.work(r);
      most = std::max(most, w), sum += w;
      std::printf(" %lld", static_cast<long long>(w));
    }
    std::printf(" | slowest / mean %.3f\n", double(most) * cp.size() / double(sum));
  }

  MetricsLog log(lead ? cfg.metrics_path() : "");
  std::vector<int32_t> whole_in(size_t(B) * T), whole_tg(size_t(B) * T);
  std::vector<int32_t> inputs(size_t(B) * Tl), targets(size_t(B) * Tl);
  state.layout_json = mesh_json(run.mesh.shape());  // checkpoints record the layout that wrote them
  const int64_t first_step = state.step;
  for (int64_t step = state.step; step < cfg.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const CommTally cp_before = cp.tally();
    {
      Span span("zero_grads");
      if (sharded) sharded->zero_shard_grads();
      else model.zero_grads();
    }
    double loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      train_data.batch(step, micro, data_rank, data_ranks, B, cfg.batch_size, whole_in.data(), whole_tg.data());
      split.take(whole_in.data(), inputs.data(), B, T);
      split.take(whole_tg.data(), targets.data(), B, T);
      loss += double(model.forward(inputs.data(), targets.data())) / (accum * dp.size());  // dp: dp x cp ranks
      const bool last = micro == accum - 1;
      if (sync) sync->set_sync(last);    // zero 0, 1: only the last micro-step communicates over dp
      sp_grads.set_sum(sharded || last);  // zero 2, 3 reduce every backward's gradients
      model.backward(1.0f / float(accum * dp.size()));
    }
    {
      Span span("wait_buckets", "comm");
      if (sync) sync->wait();
      else sharded->wait();
    }
    const CommTally cp_step = cp.tally() - cp_before;
    dp.all_reduce(&loss, 1, DType::F64);  // the mean over the global batch: every part has as many tokens

    // The global norm: each rank the counted elements of its range (a tp replica or a
    // zero=0 dp replica counted once), summed over the world.
    const float* range_grads = sharded ? sharded->shard_grads().data() : model.grads().data() + shard.begin;
    double norm = 0;
    {
      Span span("grad_norm");
      double sum = mine.counted_sum_of_squares(range_grads);
      run.world.all_reduce(&sum, 1, DType::F64);
      norm = std::sqrt(sum);
    }
    const double lr = learning_rate(cfg, step);
    if (zero == 0) {
      Span span("adamw");
      optimizer.step(device, params, range_grads, lr, clip_scale(norm, cfg.grad_clip), cfg, int(step + 1), bf16);
    } else if (zero <= 2) {
      sharded_adamw_step(dp, device, optimizer, shard, params, range_grads, n_local, norm, lr, cfg, int(step + 1),
                         bf16);
    } else {
      Span span("adamw_shard");  // updates the shard in place: the next forward gathers it
      optimizer.step(device, shard_params, range_grads, lr, clip_scale(norm, cfg.grad_clip), cfg, int(step + 1), bf16);
      static_cast<Zero3Store&>(*sharded).weights_updated();
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.step = step + 1;

    mem = MemoryTracker::global().peaks();
    if (lead && step == first_step) {  // after the first step of this run: what a rank holds and sends
      std::printf("memory by kind, rank 0, peaks of step %lld:\n%s", static_cast<long long>(state.step),
                  mem.table().c_str());
      std::printf("context-parallel communication in step %lld, rank 0:\n%s", static_cast<long long>(state.step),
                  cp_step.table().c_str());
    }
    StepMetrics m;
    m.step = state.step, m.steps = cfg.steps, m.loss = loss, m.lr = lr, m.grad_norm = norm, m.ms = ms;
    m.tokens_per_s = double(cfg.tokens_per_step()) / (ms / 1000.0);
    if (lead) log.train_step(m, mem, state.step % cfg.log_every == 0 || state.step == cfg.steps);
    if (!std::isfinite(loss)) fail("the loss is " + std::to_string(loss) + " at step " + std::to_string(state.step) + " (lower lr?)");

    after_step(run, model, val_data, run.mesh.dp(), log, ckpt, state);  // the sequences split over dp only
  }

  // The whole model on the lead rank, for the sample: every rank writes its counted
  // elements into zeros and the world sums them (x + 0 = x exactly).
  std::vector<float> whole;
  if (cfg.sample_tokens > 0) {
    std::vector<float> local(static_cast<size_t>(n_local));
    if (zero == 3) static_cast<Zero3Store&>(*sharded).gather_all(local.data());
    else std::copy(params, params + n_local, local.begin());
    whole.assign(size_t(global.total()), 0.0f);
    slices.range(0, n_local, dp.rank() == 0).gather(local.data(), whole.data(), /*counted_only=*/true);
    run.world.all_reduce(whole.data(), whole.size(), DType::F32);
  }
  end_of_run(run, model, val_data, run.mesh.dp(), log, ckpt, state, whole.data());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  StageSpec spec{"10_context_parallel"};
  spec.tp = true, spec.cp = true, spec.zero_key = true;
  return stage_main(argc, argv, spec, train_ranks);
}
