#include "stages/04_zero2/zero2.h"

#include <algorithm>

#include "common/trace.h"
#include "stages/02_ddp/ring_allreduce.h"

namespace gpt {

Zero2Store::Zero2Store(const ParamLayout& layout, Communicator& dp, float* params, double bucket_mb)
    : layout_(layout), dp_(dp), params_(params),
      shard_(shard_of(layout.total(), dp.size(), dp.rank())),
      buckets_(make_buckets(layout, bucket_mb)) {
  bucket_of_unit_.assign(layout.num_units(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int u : buckets_[b].units) bucket_of_unit_[u] = int(b);
  pending_.assign(buckets_.size(), 0);
  live_.resize(buckets_.size());
  const MemScope scope(MemKind::Grads);
  shard_grads_ = DeviceArray<float>(Device::CPU, size_t(shard_.size()));
  held_ = peak_ = shard_.size();
}

void Zero2Store::zero_shard_grads() { shard_grads_.zero(); }

float* Zero2Store::grads(int unit) {
  const int b = bucket_of_unit_[unit];
  DeviceArray<float>& buf = live_[b];
  if (buf.empty()) {  // first unit of this bucket in this backward: a zeroed buffer
    const GradBucket& bucket = buckets_[b];
    const MemScope scope(MemKind::Grads);
    buf = DeviceArray<float>(Device::CPU, size_t(bucket.end - bucket.begin));
    pending_[b] = int(bucket.units.size());
    held_ += bucket.end - bucket.begin;
    peak_ = std::max(peak_, held_);
  }
  return buf.data() + (layout_.unit(unit).begin - buckets_[b].begin);
}

void Zero2Store::grads_done(int unit) {
  const int b = bucket_of_unit_[unit];
  if (--pending_[b] > 0) return;
  const GradBucket& bucket = buckets_[b];
  DeviceArray<float>& buf = live_[b];
  {
    Span span("reduce_scatter_bucket", "comm");
    const std::vector<size_t> bounds = shard_bounds_within(bucket.begin, bucket.end, layout_.total(), dp_.size());
    ring_reduce_scatter_v(dp_, buf.data(), bounds, DType::F32);
    // Chunk r of the bucket now holds the sum over ranks of the part in shard r.
    const int64_t lo = std::max(bucket.begin, shard_.begin), hi = std::min(bucket.end, shard_.end);
    for (int64_t i = lo; i < hi; ++i) shard_grads_[size_t(i - shard_.begin)] += buf[size_t(i - bucket.begin)];
  }
  held_ -= bucket.end - bucket.begin;
  buf = DeviceArray<float>();  // free the bucket's memory
}

}  // namespace gpt
