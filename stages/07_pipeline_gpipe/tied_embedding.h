// The tied embedding across a pipeline. GPT-2 uses one matrix wte twice: the embedding
// (x0 = wte[tokens] + ...) on the first stage and the LM head (logits = ln_f(x) wte^T)
// on the last. Split into stages, each holds its own copy, started identical (the
// counter-based initialisation) and kept identical by giving both the same gradient,
// the sum of the two uses:
//
//   d wte = d wte|embedding (first stage) + d wte|head (last stage)
//
// all-reduced between the two stages every step, before the data-parallel reduction;
// both then take the same optimizer step. The all-reduce is stage 02's ring, as the
// data-parallel gradients' is (LocalZero): on two CPU ranks MPI's non-blocking
// all-reduce (MPI_Iallreduce, which the backend's all_reduce posts so that it can time
// out) takes about three times as long for GPT-2's 154 MB of wte. The group has two
// ranks, so every element is a + b either way: the same bits. The norm and checkpoints
// count the first stage's copy only (RankLayout::pipeline_stage).
//
// TiedEmbeddingGrads wraps the store a stage's model uses: at the step's last backward
// it holds back the embedding unit's "gradient done" until finish(), which the driver
// calls after the schedule has run. Summing inside the backward would hang: the last
// stage would wait for the first in the all-reduce before sending the gradient the first
// stage is waiting for. A store that reduces every backward's gradients (ZeRO-2 and -3) gets
// the embedding unit once a step, at finish(), with the micro-batches' wte gradients
// accumulated in its bucket meanwhile (a bucket of its own: Zero2Store's embeddings_alone).
#pragma once
#include <memory>

#include "common/comm.h"
#include "common/gpt2.h"

namespace gpt {

// The group of the first and the last rank of the pipeline group pp (the ranks holding
// the first and the last stage, whatever their chunks), on those two ranks; null on the
// others and when pp has one rank. Collective over pp.
std::unique_ptr<Communicator> tied_embedding_group(Communicator& pp);

// A: the storage of the weights (float or bf16); the gradients are GradOf<A> (fp32 for bf16).
template <class A>
class TiedEmbeddingGrads : public WeightStore<A> {
 public:
  using G = GradOf<A>;
  // layout: the local layout of a stage (a model chunk); ends: tied_embedding_group's
  // result where this chunk holds wte (the first or the last stage), else null; inner: the
  // store whose grads() these are; device: where those gradients are.
  // every_backward: the inner store reduces every backward's gradients (hold the
  // embedding unit through all of them).
  TiedEmbeddingGrads(const ParamLayout& layout, Communicator* ends, WeightStore<A>& inner, Device device,
                     bool every_backward = false);

  // Whether the coming backward ends the step's accumulation (its embedding unit is
  // then held back until finish()).
  void set_last(bool last) { last_ = last; }
  // After the step's backwards: sums wte's gradient between the first and the last stage
  // and hands the embedding unit to the inner store.
  void finish();
  // The elements of wte's gradient finish() sums with the other end: 0 on a chunk that
  // holds no wte.
  size_t summed_elements() const;

  const A* acquire(int unit, Pass pass) override { return inner_.acquire(unit, pass); }
  void release(int unit, Pass pass) override { inner_.release(unit, pass); }
  G* grads(int unit) override { return inner_.grads(unit); }
  void grads_done(int unit) override;

 private:
  const ParamLayout& layout_;
  WeightStore<A>& inner_;
  Communicator* ends_;  // the first and the last stage's ranks (null: nothing to sum here)
  Device device_;
  bool every_backward_;
  bool last_ = true, held_ = false;
};

}  // namespace gpt
