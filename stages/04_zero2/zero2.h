// ZeRO stage 2: shard the gradients too.
//
// ZeRO-1 still materialises the full gradient on every rank (4 P bytes) only to
// reduce-scatter its buckets in place and read 1/N of it. ZeRO-2 reduce-scatters each bucket as soon as
// backward has finished it and keeps only this rank's part:
//
//   backward finishes bucket b  ->  reduce-scatter b over the ranks, chunk r being the
//   part of b inside shard r    ->  add chunk r into this rank's shard gradient
//                               ->  the bucket's buffer is free for the next bucket
//
// The reduce-scatters run on a communication thread (stage 02's CommThread, with a
// communicator of its own), so backward goes on computing earlier layers meanwhile; wait()
// before the optimizer reads the shard gradient.
// So a rank holds its shard gradient (4 P / N bytes) plus bucket buffers instead of
// 4 P. One bucket is special: the embeddings' gradient is written by the LM head at the
// very start of backward and by the embedding at its very end (tied weights), so that
// bucket has a buffer of its own for the whole backward. The others take turns in two
// buffers of the largest bucket's size: bucket k fills one while bucket k-1 is reduced
// from the other (double buffering), and bucket k+1 waits, if it must, for bucket k-1.
// With gradient accumulation every micro-step reduce-scatters (there is no full
// gradient left to accumulate into); the shard gradient sums the micro-steps. The
// optimizer step is ZeRO-1's (zero1.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/comm.h"
#include "common/device.h"
#include "common/device_array.h"
#include "common/gpt2.h"
#include "stages/02_ddp/comm_thread.h"
#include "stages/02_ddp/grad_sync.h"
#include "stages/03_zero1/shard.h"

namespace gpt {

// What the bucket buffers are sized by, in elements: the embeddings' bucket (a buffer of
// its own), and the largest of the others with how many there are (they take turns in two
// buffers of that size, or one when there is one). The memory formulas read it too.
struct BucketSizes {
  int64_t embedding = 0, largest_other = 0;
  int others = 0;
};
BucketSizes bucket_sizes(const std::vector<GradBucket>& buckets);

// A is the weights' storage: float, or bf16 (the gradients are fp32 either way).
template <class A>
class Zero2Store : public WeightStore<A> {
 public:
  // params: the whole model (every rank keeps all weights in ZeRO-1 and -2), or nullptr
  // for a subclass that keeps its weights itself (Zero3Store: the shard, gathered unit by
  // unit).
  // embeddings_alone: the embeddings' unit in a bucket of its own (make_buckets; pipeline
  // stages, from stage 07 on).
  // device: where params are and where the bucket buffers and the shard gradient go.
  Zero2Store(const ParamLayout& layout, Communicator& dp, A* params, double bucket_mb,
             bool embeddings_alone, Device device);

  const A* acquire(int unit, Pass) override { return params_ + layout_.unit(unit).begin; }
  float* grads(int unit) override;
  void grads_done(int unit) override;

  // Blocks until every bucket handed to the communication thread has been reduced into
  // the shard gradient; rethrows its error.
  void wait() { comm_.wait(); }
  // This rank's summed gradient, shard().size() elements (complete after wait()); zero
  // it before each step.
  DeviceArray<float>& shard_grads() { return shard_grads_; }
  void zero_shard_grads();
  const Shard& shard() const { return shard_; }
  Device device() const { return device_; }
  // The buckets, for the lesson.
  const std::vector<GradBucket>& buckets() const { return buckets_; }

 protected:  // stage 05's store gathers through the same layout and group
  const ParamLayout& layout_;
  Communicator& dp_;

 private:
  A* params_;
  Device device_;
  Shard shard_;
  std::vector<GradBucket> buckets_;
  std::vector<int> bucket_of_unit_, pending_;
  // Gradient buffers: [0] the embeddings' bucket, [1] and [2] the other buckets in turn.
  std::vector<int> buffer_of_bucket_;
  DeviceArray<float> buffers_[3];
  long ticket_of_buffer_[3] = {0, 0, 0};  // the communication thread's last task on a buffer
  DeviceArray<float> shard_grads_;
  // The communication thread's own channel. Collectives are matched by their order on a
  // communicator, so two threads must not interleave them on one: stage 04's main thread
  // makes none while buckets are in flight, but stage 05's store, built on this one,
  // gathers weights on dp during backward while the buckets are reduce-scattered.
  std::unique_ptr<Communicator> reduce_comm_;
  CommThread comm_;                           // last: its tasks use the members above
};

}  // namespace gpt
