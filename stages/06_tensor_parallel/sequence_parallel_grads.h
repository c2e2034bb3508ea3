// Gradients of the weights a tensor-parallel rank holds whole but applies to part of
// the data. Under sequence parallelism a layernorm runs on this rank's 1/tp of the rows,
// so its weight and bias gradients are partial sums over those rows:
//
//   d ln_w = sum over all rows i of (d y_i * xhat_i) = sum_r (sum over rank r's rows)
//
// and must be summed over the tp group before the optimizer (or the data-parallel
// reduction) sees them; afterwards they are identical on every tp rank, so the replicas
// stay equal. Without sequence parallelism every rank sees every row and its layernorm
// gradient is already the whole one: nothing to do. (wpe and the row-parallel biases
// need no sum either way: every rank computes their gradient from the whole gradient it
// holds there, GPT2's ModelSlice.)
//
// SequenceParallelGrads wraps the store the model uses (the data-parallel one) and sums
// a unit's layernorm gradients over tp when the unit's gradient is done, before the
// wrapped store reduces it over dp: packed into one buffer, one all-reduce per unit.
#pragma once
#include <vector>

#include "common/comm.h"
#include "common/device_array.h"
#include "common/gpt2.h"

namespace gpt {

template <class A>
class SequenceParallelGrads : public WeightStore<A> {
 public:
  using G = GradOf<A>;
  // layout: the rank's local layout (ParamLayout(model, tp, rank)); inner: the store
  // whose grads() these are, in the memory of `device`.
  SequenceParallelGrads(const ParamLayout& layout, Communicator& tp, WeightStore<A>& inner, Device device)
      : layout_(layout), tp_(tp), inner_(inner), device_(device) {}

  // Whether the coming backward's gradients are summed: every backward when the inner
  // store reduces each backward's gradients (ZeRO-2, -3), else only the last micro-step
  // of an accumulation (the sum is linear: the accumulated partials are summed once).
  void set_sum(bool sum) { sum_ = sum; }

  const A* acquire(int unit, Pass pass) override { return inner_.acquire(unit, pass); }
  void release(int unit, Pass pass) override { inner_.release(unit, pass); }
  G* grads(int unit) override { return inner_.grads(unit); }
  void grads_done(int unit) override;

 private:
  // The unit's layernorm tensors: (offset, count) pairs of the local buffer.
  std::vector<std::pair<int64_t, int64_t>> layernorms(int unit) const;

  const ParamLayout& layout_;
  Communicator& tp_;
  WeightStore<A>& inner_;
  Device device_;
  bool sum_ = true;
  DeviceArray<G> packed_;  // the unit's layernorm gradients side by side: one all-reduce
};

}  // namespace gpt
