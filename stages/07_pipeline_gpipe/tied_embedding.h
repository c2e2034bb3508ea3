// The tied embedding across a pipeline. GPT-2 uses one matrix wte twice: the embedding
// (x0 = wte[tokens] + ...) on the first stage and the LM head (logits = ln_f(x) wte^T)
// on the last. Split into stages, each holds its own copy, started identical (the
// counter-based initialisation) and kept identical by giving both the same gradient,
// the sum of the two uses:
//
//   d wte = d wte|embedding (first stage) + d wte|head (last stage)
//
// all-reduced between the two stages every step, before the data-parallel reduction;
// both then take the same optimizer step. The norm and checkpoints count the first
// stage's copy only (RankLayout::pipeline_stage).
//
// TiedEmbeddingGrads wraps the store a stage's model uses: at the step's last backward
// it holds back the embedding unit's "gradient done" until finish(), which the driver
// calls after the schedule has run. Summing inside the backward would hang: the last
// stage would wait for the first in the all-reduce before sending the gradient the first
// stage is waiting for.
#pragma once
#include <memory>

#include "common/comm.h"
#include "common/gpt2.h"

namespace gpt {

class TiedEmbeddingGrads : public WeightStore<float> {
 public:
  // layout: the stage's local layout; pp: the pipeline group (the first stage is rank 0,
  // the last rank size - 1); inner: the store whose grads() these are. Collective over pp.
  TiedEmbeddingGrads(const ParamLayout& layout, Communicator& pp, WeightStore<float>& inner);

  // Whether the coming backward ends the step's accumulation (its embedding unit is
  // then held back until finish()).
  void set_last(bool last) { last_ = last; }
  // After the step's backwards: sums wte's gradient between the first and the last stage
  // and hands the embedding unit to the inner store.
  void finish();

  const float* acquire(int unit, Pass pass) override { return inner_.acquire(unit, pass); }
  void release(int unit, Pass pass) override { inner_.release(unit, pass); }
  float* grads(int unit) override { return inner_.grads(unit); }
  void grads_done(int unit) override;

 private:
  const ParamLayout& layout_;
  WeightStore<float>& inner_;
  std::unique_ptr<Communicator> ends_;  // the first and the last stage (null elsewhere, and when they are one rank)
  bool last_ = true, held_ = false;
};

}  // namespace gpt
