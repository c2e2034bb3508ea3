// The ZeRO stage of the `zero` key (0-3) over a rank-local buffer: stages 02-05's
// data-parallel machinery, unchanged, applied to the weights a rank holds (a tensor-
// parallel slice, stage 06; the same slice on every context-parallel rank, stage 10).
//
//   zero  weights (local buffer)   gradients                  optimizer state      store
//   0     whole, the model's       whole, all-reduced          whole                GradSync (stage 02)
//   1     whole, the model's       whole, reduce-scattered     this rank's shard    GradSync (stage 03)
//   2     whole, kept here         shard + live buckets        this rank's shard    Zero2Store (stage 04)
//   3     shard, kept here         shard + live buckets        this rank's shard    Zero3Store (stage 05)
//
// The shard of the local buffer is also a RankLayout of its own (RankLayout::range), so
// initialisation, the counted gradient norm and checkpoints of any layout go through it.
//
// A is the storage of the compute weights: bf16 in bf16 mode (GPT2<bf16>: weights
// gathered over dp at 2 bytes, fp32 master weights kept by the optimizer), float in fp32
// (the weights are the master weights). Gradients and moments are fp32 either way.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/checkpoint.h"
#include "common/comm.h"
#include "common/comm_counter.h"
#include "common/config.h"
#include "common/gpt2.h"
#include "common/memory.h"
#include "common/optimizer.h"
#include "common/rank_layout.h"
#include "stages/02_ddp/grad_sync.h"
#include "stages/03_zero1/shard.h"
#include "stages/04_zero2/zero2.h"

namespace gpt {

template <class A>
class LocalZero {
 public:
  // model: made with own_weights = (zero <= 1); slices: the rank's part of the global
  // tensors (model.layout() is their local layout); dp: the ranks holding the same slices.
  // Everything this object sends over dp passes through a counter of its own (step_counted).
  LocalZero(const Config& cfg, GPT2<A>& model, const RankLayout& slices, Communicator& dp, Device device);
  ~LocalZero();
  LocalZero(const LocalZero&) = delete;  // the stores hold references to its members
  LocalZero& operator=(const LocalZero&) = delete;

  const Shard& shard() const { return shard_; }
  // The elements of this rank's range, counted once across the world (with zero = 0
  // every dp rank holds everything and dp rank 0 counts it).
  const RankLayout& range() const { return range_; }
  // Checkpoints and initialisation work on host memory: the fp32 master weights of the
  // range (shard().size() elements) and the moments, on the GPU mirrors of the device
  // arrays (common/checkpoint.h, CheckpointMirror).
  float* master_host() { return mirror_->host("param"); }
  std::vector<CheckpointBuffer> checkpoint_buffers() { return mirror_->buffers(); }
  // Before a checkpoint is written: the device arrays copied into the host buffers.
  void checkpoint_to_host() { mirror_->to_host(); }
  // After the master weights (and moments) were initialised or loaded into the host
  // buffers: the device arrays from them, then the compute weights from the master
  // (their bf16 rounding in bf16 mode), gathered over dp where every rank keeps all of them.
  void weights_from_master();
  // The store the model runs through.
  WeightStore<A>& store();

  // The start of a step: the gradients zeroed, and the window of step_counted opened.
  void zero_grads();
  // Before each backward: whether it is the step's last micro-batch (zero 0 and 1
  // communicate only then). Whether every backward's gradients are reduced (zero 2, 3).
  void set_last_micro(bool last);
  bool reduces_every_backward() const { return zero_ >= 2; }
  int zero_level() const { return zero_; }  // the key zero: 0 to 3
  void wait();  // the gradients' reductions of this step, done
  // The global gradient norm: the counted elements of every rank's range, summed over `world`.
  double grad_norm(Communicator& world);
  // This rank's share of the squared norm per tensor (counted_squares_by_tensor), added
  // into per_tensor (global().tensors().size() values): for a norm that does not depend
  // on which rank holds which layers (stage 07's grad_norm_by_tensor.h).
  void add_squares_by_tensor(std::vector<double>& per_tensor) const;
  // AdamW on the range (clipped by norm), the compute weights updated: gathered over dp
  // for zero = 1 and 2 (zero = 0 updates the whole local buffer on every dp rank, zero = 3
  // keeps only the shard). It closes the window of step_counted; with zero = 3 just
  // before the update starts gathering the next step's embeddings.
  void step(double lr, double norm, int step_number);
  // What this object sent over dp in the last step's window, from zero_grads() to the end
  // of step(): the count that step_traffic's formula is. On a run's first step the two are
  // equal. Later, with zero = 3, the gathered units a step starts with depend on what ran
  // before it (the update's prefetch of the embeddings, counted by its thread as it runs;
  // an evaluation's forward, which leaves them gathered), which the formula does not follow.
  CommTally step_counted() const { return step_counted_; }
  // This rank's whole local buffer of compute weights, in host memory (collective over
  // dp with zero = 3).
  std::vector<A> local_weights();
  // One step's traffic over dp, as step_counted counts it, by the formula of the stage
  // this zero level is (its README): zero 0 stage 02's ring all-reduce of each bucket, 1
  // and 2 a reduce-scatter of each bucket (once, or each of `micro_steps` micro-batches)
  // and the weights' all-gather, 3 stage 05's gathers and reductions, on this rank's local
  // buffer. For a whole model (stages 06 and 10).
  CommTally step_traffic(int micro_steps) const;
  // The same for a pipeline stage (stages 07-11), whose passes come in the schedule's
  // order: `passes`, this chunk's forwards and backwards as the model runs them (with
  // ZeRO-3 they decide which units a pass finds still gathered, zero3_gather_traffic), and
  // `tied_wte`: the chunk holds an end of a tied wte, whose bucket ZeRO-2 and -3 reduce
  // once a step after the two ends have summed it (tied_embedding.h), not once a micro-step.
  CommTally step_traffic(int micro_steps, const std::vector<Pass>& passes, bool tied_wte) const;
  // The peak bytes of the weights, gradients and optimizer state of this part (its model's
  // and this object's arrays), by the formula of the stage each zero level is, with P the
  // local buffer, S this rank's shard of it and a the bytes of a compute weight:
  //   zero  params        grads                   optimizer
  //   0     a P           4 P                     (8|12) P    (m, v; and the fp32 master in bf16)
  //   1     a P           4 P                     (8|12) S
  //   2     a P           4 (S + live buckets)    (8|12) S    (live: the embeddings' bucket,
  //   3     a (S + g)     4 (S + live buckets)    (8|12) S     and two of the largest other)
  // g, the units gathered at the peak (stage 05): the embeddings and two blocks, a block
  // and its prefetched successor; with one block, the embeddings, the block and ln_f;
  // without the prefetch (zero3_prefetch=false), the embeddings and one block. The table
  // is tp_budget.h's zero_memory, which stage 06's budget uses on the whole model's shape;
  // here it takes this part's layout, shard and buckets (local_zero_memory below, on this
  // object's part). Activations are the model's: tp_budget.h's activation_memory.
  MemoryLedger memory_formula() const;

 private:
  const Config& cfg_;
  GPT2<A>& model_;
  CountingCommunicator dp_;  // dp, counted: every collective of this object and its stores
  CommTally window_start_, step_counted_;  // dp_'s tally at zero_grads(); the last step's count
  Device device_;
  int zero_;
  int64_t n_local_;
  Shard shard_;
  RankLayout range_;
  AdamW<float> optimizer_;
  DeviceArray<A> weights_;  // zero 2: all local weights; zero 3: the shard's
  A* params_;               // the whole local buffer of compute weights (not with zero 3)
  A* shard_params_;
  std::unique_ptr<GradSync<A>> sync_;       // zero 0, 1
  std::unique_ptr<Zero2Store<A>> sharded_;  // zero 2, 3 (a Zero3Store for 3)
  std::unique_ptr<CheckpointMirror> mirror_;  // master weights and moments, for checkpoints
};

// LocalZero::memory_formula of a part before anything is made: `part` its local layout,
// held alike by dp_size ranks of which this is dp_rank, with cfg's zero, bucket_mb and
// zero3_prefetch, and 2-byte compute weights when bf16. The buckets and the shard are the
// ones LocalZero would make (stage 11's memory plan).
MemoryLedger local_zero_memory(const Config& cfg, const ParamLayout& part, int dp_size, int dp_rank, bool bf16);

}  // namespace gpt
