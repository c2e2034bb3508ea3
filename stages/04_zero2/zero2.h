// ZeRO stage 2: shard the gradients too.
//
// ZeRO-1 still materialises the full gradient on every rank (4 P bytes) only to
// reduce-scatter it after backward. ZeRO-2 reduce-scatters each bucket as soon as
// backward has finished it and keeps only this rank's part:
//
//   backward finishes bucket b  ->  reduce-scatter b over the ranks, chunk r being the
//   part of b inside shard r    ->  add chunk r into this rank's shard gradient
//                               ->  the bucket's buffer is free for the next bucket
//
// So a rank holds its shard gradient (4 P / N bytes) plus the buckets in flight
// instead of 4 P. One bucket is special: the embeddings' gradient is written by the
// LM head at the very start of backward and by the embedding at its very end (tied
// weights), so that bucket lives through the whole backward.
// With gradient accumulation every micro-step reduce-scatters (there is no full
// gradient left to accumulate into); the shard gradient sums the micro-steps. The
// optimizer step is ZeRO-1's (zero1.h).
#pragma once
#include <cstdint>
#include <vector>

#include "common/comm.h"
#include "common/device_array.h"
#include "common/gpt2.h"
#include "stages/02_ddp/grad_sync.h"
#include "stages/03_zero1/shard.h"

namespace gpt {

class Zero2Store : public WeightStore<float> {
 public:
  // params: the whole model (every rank keeps all weights in ZeRO-1 and -2).
  Zero2Store(const ParamLayout& layout, Communicator& dp, float* params, double bucket_mb);

  const float* acquire(int unit, Pass) override { return params_ + layout_.unit(unit).begin; }
  float* grads(int unit) override;
  void grads_done(int unit) override;

  // This rank's summed gradient, shard().size() elements; zero it before each step.
  DeviceArray<float>& shard_grads() { return shard_grads_; }
  void zero_shard_grads();
  const Shard& shard() const { return shard_; }
  // Largest number of gradient elements held at once (shard + live buckets), and the
  // buckets, for the memory ledger and the lesson.
  int64_t peak_grad_elements() const { return peak_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }

 private:
  const ParamLayout& layout_;
  Communicator& dp_;
  float* params_;
  Shard shard_;
  std::vector<GradBucket> buckets_;
  std::vector<int> bucket_of_unit_, pending_;
  std::vector<DeviceArray<float>> live_;  // per bucket: its gradient buffer while in use
  DeviceArray<float> shard_grads_;
  int64_t held_ = 0, peak_ = 0;
};

}  // namespace gpt
