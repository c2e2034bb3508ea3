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
//                   the global norm, AdamW on this rank's range, all-gather for zero=1 and 2
// See ring_attention.h and context_split.h for the technique and README.md for the lesson.
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
#include "stages/10_context_parallel/context_split.h"
#include "stages/10_context_parallel/ring_attention.h"

using namespace gpt;

namespace {

// A is the storage of weights and activations: float, or bf16 in bf16 mode (the ring's
// key and value blocks then travel as bf16, its arithmetic in fp32: ring_attention.h).
template <class A>
int train_on(Run& run) {
  Config& cfg = run.cfg;
  const Device device = run.device;
  const Precision precision = run.precision;
  CountingCommunicator tp(run.mesh.tp());  // tensor parallelism's traffic, counted per step
  CountingCommunicator cp(run.mesh.cp());  // the technique's traffic, counted per step
  // The ranks holding the same weight slices: dp x cp, the data-parallel group of the
  // weights (every rank of it computes gradients from tokens of its own).
  const std::unique_ptr<Communicator> grad_group_owner = split_dp_cp(run.mesh);
  Communicator& grad_group = *grad_group_owner;
  const int data_rank = run.mesh.coord().dp, data_ranks = run.mesh.shape().dp;  // which sequences this rank reads
  const bool sp = cfg.sequence_parallel, lead = run.lead();
  const int accum = cfg.grad_accum(data_ranks);
  const int B = cfg.micro_batch_size, T = cfg.seq_len;

  DataLoader train_data = training_data(run);  // every rank checks the same tokens: a refusal is said once
  const DataLoader val_data = validation_data(run);  // empty when the run never validates
  ContextSplit split(cp.size(), cp.rank(), cfg.cp_split == "zigzag", T);
  split.group = &cp;
  run.part = &split;  // validation runs the same chunks
  const int Tl = split.local_len(T);  // tokens of each sequence on this rank
  RingAttentionHooks<A> hooks(tp, sp, cp, split, device);
  // The model holds this rank's slices; with zero >= 2 the stage keeps the weights and
  // the store the gradients.
  GPT2<A> model(cfg.model, B, Tl, device, precision, /*own_weights=*/cfg.zero <= 1,
                ModelSlice<A>{tp.size(), tp.rank(), sp, &hooks, split.positions()});
  const ParamLayout& layout = model.layout();  // the local buffer's tensors and units
  const ParamLayout global(cfg.model);
  const RankLayout slices = RankLayout::tensor_parallel(global, tp.size(), tp.rank());
  // The ZeRO stage of `zero` over dp x cp, on this rank's local buffer (stage 06's local_zero.h).
  LocalZero<A> zero(cfg, model, slices, grad_group, device);
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

  if (lead) {
    std::printf("stage 10 | cp %d (%s split, %d tokens of %d per rank) x tp %d x dp %d (%s)%s, zero=%d | device %s | %s | %d threads per rank | %.2fM parameters\n",
                cp.size(), cfg.cp_split.c_str(), Tl, T, tp.size(), data_ranks, run.world.backend(),
                sp ? ", sequence parallel" : "", cfg.zero, device_name(device), precision_name(precision),
                omp_get_max_threads(), double(global.total()) / 1e6);
    std::printf("batch %d sequences x %d tokens = micro-batch %d x grad_accum %d x dp %d | train %lld tokens, val %lld tokens\n",
                cfg.batch_size, T, B, accum, data_ranks, static_cast<long long>(train_data.num_tokens()),
                static_cast<long long>(val_data.num_tokens()));
    std::printf("%s", split.work_line().c_str());
  }

  MetricsLog log(lead ? cfg.metrics_path() : "");
  // The whole model, for the lead rank's sample and every rank's share of the
  // multiple-choice eval.
  const GatherWhole<A> whole = [&](WholeOn on) {
    return WholeWeights<A>::copy(
        on_device(device, gather_whole_model(run.world, slices, zero.local_weights(), grad_group.rank() == 0, on)));
  };
  std::vector<int32_t> whole_in(size_t(B) * T), whole_tg(size_t(B) * T);
  std::vector<int32_t> inputs(size_t(B) * Tl), targets(size_t(B) * Tl);
  state.layout_json = mesh_json(run.mesh.shape());  // checkpoints record the layout that wrote them
  const int64_t first_step = state.step;
  for (int64_t step = state.step; step < cfg.steps; ++step) {
    const int64_t first_sequence = state.sequences(cfg.batch_size);  // the data position: the sequences read so far
    const auto t0 = std::chrono::steady_clock::now();
    const CommTally cp_before = cp.tally(), tp_before = tp.tally();
    zero.zero_grads();
    double loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      train_data.batch(first_sequence, micro, data_rank, data_ranks, B, cfg.batch_size, whole_in.data(),
                       whole_tg.data());
      split.take(whole_in.data(), inputs.data(), B, T);
      split.take(whole_tg.data(), targets.data(), B, T);
      loss += double(model.forward(inputs.data(), targets.data())) / (accum * grad_group.size());  // dp x cp ranks
      const bool last = micro == accum - 1;
      zero.set_last_micro(last);
      sp_grads.set_sum(zero.reduces_every_backward() || last);
      model.backward(1.0f / float(accum * grad_group.size()));
    }
    zero.wait();
    const CommTally cp_step = cp.tally() - cp_before, tp_step = tp.tally() - tp_before;
    grad_group.all_reduce(&loss, 1, DType::F64);  // the mean over the global batch: every part has as many tokens

    // The global norm: each rank the counted elements of its range (a tp replica or a
    // zero=0 dp replica counted once), summed over the world.
    const double norm = zero.grad_norm(run.world);
    const double lr = learning_rate(cfg, step);
    zero.step(lr, norm, int(step + 1));
    device_synchronize(device);  // the step ends when the GPU has run its kernels
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.step = step + 1;

    const MemoryLedger mem = MemoryTracker::global().peaks();
    if (lead && step == first_step) {  // after the first step of this run: what a rank holds and sends
      // Stage 06's formulas on this rank's B x T/cp rows, ZeRO sharding over dp x cp.
      const TpBudget budget = tp_budget(cfg, tp.size(), grad_group.size(), tp.rank(), grad_group.rank(), Tl);
      std::printf("memory by kind, rank 0, peaks of step %lld (allocated | formula, README):\n%s",
                  static_cast<long long>(state.step), budget.memory_table(mem).c_str());
      const CommTally formula = ring_attention_traffic(cp.size(), cfg.model.n_layer, accum,
                                                       cfg.model.n_embd / tp.size(), int64_t(B) * Tl, dtype_of<A>());
      std::printf("context-parallel communication in step %lld, rank 0 (counted | formula, README):\n%s",
                  static_cast<long long>(state.step), comm_table(cp_step, formula).c_str());
      if (tp.size() > 1)  // stage 06's, on this rank's B x T/cp rows
        std::printf("tensor-parallel communication in step %lld, rank 0 (counted | formula, README):\n%s",
                    static_cast<long long>(state.step),
                    comm_table(tp_step, tp_step_traffic(tp_step_of(cfg, tp.size(), int64_t(B) * Tl, accum),
                                                        model.layout())).c_str());
      if (grad_group.size() > 1)
        std::printf("data-parallel%s communication in step %lld, rank 0 (counted | formula, README):\n%s",
                    cp.size() > 1 ? " (dp x cp)" : "", static_cast<long long>(state.step),
                    comm_table(zero.step_counted(), zero.step_traffic(accum)).c_str());
    }
    log_step(run, log, state.step, loss, lr, norm, ms, mem);

    // The sequences split over dp only; true after a stop signal: this step is checkpointed, and the run ends.
    if (after_step(run, model, val_data, run.mesh.dp(), log, ckpt, state, whole)) break;
  }

  end_of_run(run, model, val_data, run.mesh.dp(), log, ckpt, state, whole);
  return 0;
}

int train_ranks(Run& run) {
  return run.precision == Precision::BF16 ? train_on<gpt::bf16>(run) : train_on<float>(run);
}

// This stage's own limits on a configuration: stage_main checks them with the shared ones
// before the run starts, the ranks comparing their refusals.
void check_stage(const Config& cfg, const MeshShape& /*mesh*/) {
  check_tensor_parallel(cfg);
  check_context_parallel(cfg);
}

}  // namespace

int main(int argc, char** argv) {
  StageSpec spec{"10_context_parallel"};
  spec.tp = true, spec.cp = true, spec.zero_key = true;
  spec.checks = check_stage;
  return stage_main(argc, argv, spec, train_ranks);
}
