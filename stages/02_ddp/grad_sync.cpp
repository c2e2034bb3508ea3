// Bucketed gradient all-reduce overlapped with the backward; see grad_sync.h.
#include "stages/02_ddp/grad_sync.h"

#include <algorithm>

#include "common/error.h"
#include "common/trace.h"
#include "stages/02_ddp/ring_allreduce.h"

namespace gpt {

std::vector<GradBucket> make_buckets(const ParamLayout& layout, double bucket_mb, bool embeddings_alone) {
  const int64_t bucket_elems = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024 / sizeof(float)));
  std::vector<int> order = {layout.final_unit()};
  for (int l = layout.layer_end() - 1; l >= layout.layer_begin(); --l) order.push_back(layout.block_unit(l));
  order.push_back(ParamLayout::kEmbeddingUnit);
  std::vector<GradBucket> buckets;
  for (int u : order) {
    const Unit& unit = layout.unit(u);
    const bool alone = embeddings_alone && u == ParamLayout::kEmbeddingUnit;
    if (buckets.empty() || buckets.back().end - buckets.back().begin >= bucket_elems || alone)
      buckets.push_back({unit.begin, unit.end, {}});
    GradBucket& b = buckets.back();
    b.begin = std::min(b.begin, unit.begin);  // reverse layout order: the range grows downwards
    b.end = std::max(b.end, unit.end);
    b.units.push_back(u);
  }
  return buckets;
}

CommTally gradient_traffic(const std::vector<GradBucket>& buckets, bool ring, int n, int rank) {
  CommTally total;
  for (const GradBucket& b : buckets) {
    const size_t count = size_t(b.end - b.begin);
    if (ring) {
      total += ring_all_reduce_traffic(count, n, rank, DType::F32);
    } else {
      total.calls[size_t(CommOp::AllReduce)] += 1;
      total.bytes[size_t(CommOp::AllReduce)] += int64_t(count * sizeof(float));
    }
  }
  return total;
}

template <class A>
GradSync<A>::GradSync(const ParamLayout& layout, A* params, float* grads, ReduceBucket reduce_bucket,
                   const char* span, double bucket_mb)
    : layout_(layout), params_(params), grads_(grads), reduce_bucket_(std::move(reduce_bucket)), span_(span),
      buckets_(make_buckets(layout, bucket_mb)) {
  bucket_of_unit_.assign(layout.num_units(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int u : buckets_[b].units) bucket_of_unit_[u] = int(b);
  pending_units_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) pending_units_[b] = int(buckets_[b].units.size());
}

template <class A>
void GradSync<A>::grads_done(int unit) {
  const int b = bucket_of_unit_[unit];
  if (--pending_units_[b] > 0) return;
  pending_units_[b] = int(buckets_[b].units.size());  // ready for the next backward
  if (!sync_) return;
  comm_.submit([this, b] {
    Span span(span_, "comm", /*lane=*/1);
    reduce_bucket_(grads_ + buckets_[b].begin, size_t(buckets_[b].end - buckets_[b].begin));
  });
}

template <class A>
void GradSync<A>::wait() {
  comm_.wait();
}

template class GradSync<float>;
template class GradSync<bf16>;

}  // namespace gpt
