// ZeRO stage 2: the gradients sharded too, each bucket reduce-scattered; see zero2.h.
#include "stages/04_zero2/zero2.h"

#include <algorithm>

#include "common/trace.h"
#include "kernels/ops.h"
#include "stages/02_ddp/ring_allreduce.h"

namespace gpt {

BucketSizes bucket_sizes(const std::vector<GradBucket>& buckets) {
  BucketSizes sizes;
  for (const GradBucket& b : buckets) {
    const bool embeddings = std::find(b.units.begin(), b.units.end(), ParamLayout::kEmbeddingUnit) != b.units.end();
    if (embeddings) sizes.embedding = b.end - b.begin;
    else sizes.largest_other = std::max(sizes.largest_other, b.end - b.begin), ++sizes.others;
  }
  return sizes;
}

template <class A>
Zero2Store<A>::Zero2Store(const ParamLayout& layout, Communicator& dp, A* params, double bucket_mb,
                          bool embeddings_alone, Device device)
    : layout_(layout), dp_(dp), params_(params), device_(device),
      shard_(shard_of(layout.total(), dp.size(), dp.rank())),
      buckets_(make_buckets(layout, bucket_mb, embeddings_alone)), reduce_comm_(dp.split(0, dp.rank())) {
  bucket_of_unit_.assign(layout.num_units(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int u : buckets_[b].units) bucket_of_unit_[u] = int(b);
  pending_.assign(buckets_.size(), 0);
  // Buffers: the embeddings' bucket has its own (it lives through backward); the other
  // buckets alternate between two, so that one fills while the other is reduced.
  int turn = 0;  // the other buckets' turns, in backward order
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const bool embeddings = bucket_of_unit_[ParamLayout::kEmbeddingUnit] == int(b);
    buffer_of_bucket_.push_back(embeddings ? 0 : 1 + turn++ % 2);
  }
  const BucketSizes sizes = bucket_sizes(buckets_);
  const MemScope scope(MemKind::Grads);
  buffers_[0] = DeviceArray<float>(device, size_t(sizes.embedding));
  for (int s = 1; s <= std::min(sizes.others, 2); ++s)
    buffers_[s] = DeviceArray<float>(device, size_t(sizes.largest_other));
  shard_grads_ = DeviceArray<float>(device, size_t(shard_.size()));
}

template <class A>
void Zero2Store<A>::zero_shard_grads() {
  shard_grads_.zero();
}

template <class A>
float* Zero2Store<A>::grads(int unit) {
  const int b = bucket_of_unit_[unit];
  const GradBucket& bucket = buckets_[b];
  const int which = buffer_of_bucket_[b];
  if (pending_[b] == 0) {  // first unit of this bucket in this backward: claim its buffer
    if (ticket_of_buffer_[which] > 0) {  // its last bucket may still be reducing
      Span span("wait_buckets", "comm");
      comm_.wait_for(ticket_of_buffer_[which]);
    }
    device_zero(device_, buffers_[which].data(), size_t(bucket.end - bucket.begin) * sizeof(float));
    pending_[b] = int(bucket.units.size());
  }
  return buffers_[which].data() + (layout_.unit(unit).begin - bucket.begin);
}

template <class A>
void Zero2Store<A>::grads_done(int unit) {
  const int b = bucket_of_unit_[unit];
  if (--pending_[b] > 0) return;
  const int which = buffer_of_bucket_[b];
  ticket_of_buffer_[which] = comm_.submit([this, b, which] {
    const GradBucket& bucket = buckets_[b];
    float* buf = buffers_[which].data();
    Span span("reduce_scatter_bucket", "comm", /*lane=*/1);
    const std::vector<size_t> bounds = shard_bounds_within(bucket.begin, bucket.end, layout_.total(), dp_.size());
    ring_reduce_scatter_v(*reduce_comm_, device_, buf, bounds, DType::F32);
    // Chunk r of the bucket now holds the sum over ranks of the part in shard r.
    const int64_t lo = std::max(bucket.begin, shard_.begin), hi = std::min(bucket.end, shard_.end);
    if (lo < hi) {  // shard gradient += the reduced part (the residual add: its out may alias a)
      float* sum = shard_grads_.data() + (lo - shard_.begin);
      ops::residual_forward(device_, sum, sum, buf + (lo - bucket.begin), size_t(hi - lo));
    }
  });
}

template class Zero2Store<float>;
template class Zero2Store<bf16>;

}  // namespace gpt
