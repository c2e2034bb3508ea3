// Bucketed gradient all-reduce, overlapped with the backward pass.
//
// The backward pass finishes the gradients unit by unit from the last layer to the
// first. Waiting for the whole backward before communicating would leave the network
// idle during compute and the cores idle during communication. Instead the units are
// grouped, in backward order, into buckets of about bucket_mb MiB; as soon as every
// unit of a bucket is done, the bucket is handed to a communication thread, which
// all-reduces it while the main thread computes the earlier layers:
//
//   compute: [ final | block L | block L-1 | ... | block 1 | embeddings ]
//   comm:              [bucket 0 ]  [bucket 1 ]  ...          [bucket k ]
//
// Only the exposed tail (the last bucket, started when backward ends) costs time.
// Because the layout is layer-contiguous and buckets follow the reverse layout order,
// a bucket is one contiguous range of the flat gradient buffer.
// With gradient accumulation only the last micro-step synchronises: the earlier ones
// just accumulate locally (set_sync(false)).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "common/comm.h"
#include "common/comm_counter.h"
#include "common/gpt2.h"
#include "stages/02_ddp/comm_thread.h"

namespace gpt {

// A bucket: consecutive units in the order backward finishes them (final layernorm,
// blocks last to first, embeddings), closed once it holds bucket_mb MiB. Because the
// layout is layer-contiguous, a bucket is one range [begin, end) of the flat buffer.
struct GradBucket {
  int64_t begin, end;
  std::vector<int> units;
};
// With embeddings_alone the embeddings' unit gets a bucket of its own: used from stage 07
// on, where a pipeline stage reduces the tied wte once a step, after the two stages
// holding it have summed it; stages 02-06 pass false.
std::vector<GradBucket> make_buckets(const ParamLayout& layout, double bucket_mb, bool embeddings_alone = false);

// One step's gradient traffic on rank `rank` of n, as a CountingCommunicator counts it:
// each bucket all-reduced once, by the ring (ring_all_reduce_traffic: 2(n-1) sendrecv
// steps, about 2(n-1)/n of its bytes each way) or by the backend (one all_reduce call
// of the bucket's fp32 bytes). Stage 02 prints it beside the traffic it counts.
CommTally gradient_traffic(const std::vector<GradBucket>& buckets, bool ring, int n, int rank);

// The model's weights (storage A: float, or bf16 in stage 02's bf16 mode) are read in
// place; the gradients are fp32 in either case, and they are what travels.
template <class A>
class GradSync : public WeightStore<A> {
 public:
  // reduce_bucket(ptr, count): a finished bucket's reduction over the data-parallel
  // group, an all-reduce here (stage 02) or a reduce-scatter into the shards (stage 03,
  // ZeRO-1). `span` names it in the trace: "allreduce_bucket" or "reduce_scatter_bucket".
  using ReduceBucket = std::function<void(float* data, size_t count)>;

  GradSync(const ParamLayout& layout, A* params, float* grads, ReduceBucket reduce_bucket,
           const char* span, double bucket_mb);
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Whether the coming backward ends the step (then its buckets are reduced).
  void set_sync(bool sync) { sync_ = sync; }
  // Blocks until every bucket handed out in this backward has been reduced; rethrows
  // an error raised on the communication thread.
  void wait();

  const A* acquire(int unit, Pass) override { return params_ + layout_.unit(unit).begin; }
  float* grads(int unit) override { return grads_ + layout_.unit(unit).begin; }
  void grads_done(int unit) override;

  const std::vector<GradBucket>& buckets() const { return buckets_; }

 private:
  const ParamLayout& layout_;
  A* params_;
  float* grads_;
  ReduceBucket reduce_bucket_;
  const char* span_;
  std::vector<GradBucket> buckets_;
  std::vector<int> bucket_of_unit_;
  std::vector<int> pending_units_;  // per bucket, units not yet done in this backward
  bool sync_ = true;
  CommThread comm_;  // reduces the buckets handed to it, in order
};

}  // namespace gpt
