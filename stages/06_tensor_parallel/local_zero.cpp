// The ZeRO stage over a rank-local buffer; see local_zero.h.
#include "stages/06_tensor_parallel/local_zero.h"

#include <cmath>
#include <type_traits>

#include "common/error.h"
#include "common/memory.h"
#include "common/trace.h"
#include "kernels/ops.h"
#include "stages/02_ddp/ring_allreduce.h"
#include "stages/03_zero1/zero1.h"
#include "stages/05_zero3/zero3.h"
#include "stages/06_tensor_parallel/tp_budget.h"

namespace gpt {

namespace {
// This rank's range of a local buffer of n elements: all of it under ZeRO-0, else its shard.
Shard range_of(int zero, int64_t n, int dp_size, int dp_rank) {
  return zero == 0 ? Shard{0, n} : shard_of(n, dp_size, dp_rank);
}
// A pipeline stage (stages 07-09) reduces its tied wte once a step, after the first and
// the last stage have summed it: its unit needs a bucket of its own.
bool is_pipeline_stage(const Config& cfg, const ParamLayout& layout) {
  return layout.layer_begin() > 0 || layout.layer_end() < cfg.model.n_layer;
}
}  // namespace

template <class A>
LocalZero<A>::LocalZero(const Config& cfg, GPT2<A>& model, const RankLayout& slices, Communicator& dp,
                        Device device)
    : cfg_(cfg),
      model_(model),
      dp_(dp),
      device_(device),
      zero_(cfg.zero),
      n_local_(model.layout().total()),
      shard_(range_of(cfg.zero, n_local_, dp.size(), dp.rank())),
      range_(slices.range(shard_.begin, shard_.end, /*counted=*/cfg.zero > 0 || dp.rank() == 0)),
      optimizer_(slices, shard_.begin, shard_.end, /*keep_master=*/std::is_same_v<A, bf16>, device) {
  {
    const MemScope scope(MemKind::Params);
    weights_ = DeviceArray<A>(device, size_t(zero_ == 2 ? n_local_ : zero_ == 3 ? shard_.size() : 0));
  }
  params_ = zero_ <= 1 ? model.params().data() : weights_.data();
  shard_params_ = zero_ == 3 ? weights_.data() : params_ + shard_.begin;
  const ParamLayout& layout = model.layout();
  if (zero_ <= 1) {
    float* grads = model.grads().data();
    const int64_t n = n_local_;
    sync_ = std::make_unique<GradSync<A>>(
        layout, params_, grads,
        [this, grads, n](float* data, size_t count) {
          if (zero_ == 0) {
            ring_all_reduce(dp_, device_, data, count, DType::F32);
            return;
          }
          const int64_t begin = data - grads, end = begin + int64_t(count);
          ring_reduce_scatter_v(dp_, device_, data, shard_bounds_within(begin, end, n, dp_.size()), DType::F32);
        },
        zero_ == 0 ? "allreduce_bucket" : "reduce_scatter_bucket", cfg.bucket_mb);
  } else {
    const bool pipeline_stage = is_pipeline_stage(cfg, layout);
    if (zero_ == 2)
      sharded_ = std::make_unique<Zero2Store<A>>(layout, dp_, params_, cfg.bucket_mb, pipeline_stage, device);
    else
      sharded_ = std::make_unique<Zero3Store<A>>(layout, dp_, shard_params_, cfg.bucket_mb, cfg.zero3_prefetch,
                                                 pipeline_stage, device);
  }
  // The range's checkpoint: its compute weights are the model's with zero <= 1, the kept
  // ones with zero 2 and 3 (the shard alone with 3). Local layouts ignore `begin`.
  DeviceArray<A>& weights = zero_ <= 1 ? model.params() : weights_;
  mirror_ = std::make_unique<CheckpointMirror>(
      shard_checkpoint(optimizer_, weights, zero_ == 3 ? 0 : size_t(shard_.begin), /*begin=*/0));
}

template <class A>
LocalZero<A>::~LocalZero() = default;

template <class A>
void LocalZero<A>::weights_from_master() {
  mirror_->to_device();
  optimizer_.weights_from_master(device_, shard_params_);  // in fp32 they are the compute weights themselves
  if (zero_ == 1 || zero_ == 2) ring_all_gather(dp_, params_, size_t(n_local_), dtype_of<A>());
}

template <class A>
WeightStore<A>& LocalZero<A>::store() {
  if (sync_) return *sync_;
  return *sharded_;
}

template <class A>
void LocalZero<A>::zero_grads() {
  Span span("zero_grads");
  window_start_ = dp_.tally();
  if (sharded_) sharded_->zero_shard_grads();
  else model_.zero_grads();
}

template <class A>
void LocalZero<A>::set_last_micro(bool last) {
  if (sync_) sync_->set_sync(last);  // zero 0, 1: only the last micro-step communicates over dp
}

template <class A>
void LocalZero<A>::wait() {
  Span span("wait_buckets", "comm");
  if (sync_) sync_->wait();
  else sharded_->wait();
}

template <class A>
double LocalZero<A>::grad_norm(Communicator& world) {
  Span span("grad_norm");
  const float* grads = sharded_ ? sharded_->shard_grads().data() : model_.grads().data() + shard_.begin;
  double sum = range_.counted_sum_of_squares(device_, grads);
  world.all_reduce(&sum, 1, DType::F64);
  return std::sqrt(sum);
}

template <class A>
void LocalZero<A>::add_squares_by_tensor(std::vector<double>& per_tensor) const {
  const float* grads = sharded_ ? sharded_->shard_grads().data() : model_.grads().data() + shard_.begin;
  range_.counted_squares_by_tensor(device_, grads, per_tensor.data());
}

template <class A>
void LocalZero<A>::step(double lr, double norm, int step_number) {
  const float* grads = sharded_ ? sharded_->shard_grads().data() : model_.grads().data() + shard_.begin;
  // In bf16 mode AdamW updates the fp32 master weights and writes their bf16 rounding.
  if (zero_ == 0) {
    Span span("adamw");
    optimizer_.step(device_, params_, grads, lr, clip_scale(norm, cfg_.grad_clip, step_number), cfg_, step_number);
  } else if (zero_ <= 2) {
    sharded_adamw_step(dp_, device_, optimizer_, shard_, params_, grads, n_local_, norm, lr, cfg_, step_number);
  } else {
    Span span("adamw_shard");  // updates the shard in place: the next forward gathers it
    optimizer_.step(device_, shard_params_, grads, lr, clip_scale(norm, cfg_.grad_clip, step_number), cfg_,
                    step_number);
  }
  step_counted_ = dp_.tally() - window_start_;
  // ZeRO-3: the units kept gathered are stale now, and the next step's first gather
  // starts, after the window has closed.
  if (zero_ == 3) static_cast<Zero3Store<A>&>(*sharded_).weights_updated();
}

template <class A>
MemoryLedger LocalZero<A>::memory_formula() const {
  return local_zero_memory(cfg_, model_.layout(), dp_.size(), dp_.rank(), std::is_same_v<A, bf16>);
}

MemoryLedger local_zero_memory(const Config& cfg, const ParamLayout& part, int dp_size, int dp_rank, bool bf16) {
  ZeroMemoryShape shape;
  shape.zero = cfg.zero, shape.P = part.total(), shape.bf16 = bf16;
  shape.S = range_of(cfg.zero, shape.P, dp_size, dp_rank).size();
  if (cfg.zero >= 2) {  // the bucket buffers (zero2.cpp) and the gathered units
    const BucketSizes buckets = bucket_sizes(make_buckets(part, cfg.bucket_mb, is_pipeline_stage(cfg, part)));
    shape.embedding_bucket = buckets.embedding, shape.largest_bucket = buckets.largest_other;
    shape.other_buckets = buckets.others;
    shape.gathered = zero3_gathered(part.unit(ParamLayout::kEmbeddingUnit).size(),
                                    part.unit(part.block_unit(part.layer_begin())).size(),
                                    part.unit(part.final_unit()).size(), part.layer_end() - part.layer_begin(),
                                    cfg.zero3_prefetch);
  }
  return zero_memory(shape);
}

template <class A>
CommTally LocalZero<A>::step_traffic(int micro_steps) const {
  const ParamLayout& layout = model_.layout();
  invariant(layout.layer_begin() == 0 && layout.layer_end() == cfg_.model.n_layer,
            "LocalZero::step_traffic: a pipeline stage's passes come in its schedule's order; give them");
  std::vector<Pass> passes;  // forward, backward, forward, backward, ...
  for (int i = 0; i < micro_steps; ++i) passes.insert(passes.end(), {Pass::Forward, Pass::Backward});
  return step_traffic(micro_steps, passes, /*tied_wte=*/false);
}

template <class A>
CommTally LocalZero<A>::step_traffic(int micro_steps, const std::vector<Pass>& passes, bool tied_wte) const {
  const int n = dp_.size(), rank = dp_.rank();
  if (zero_ == 0) return gradient_traffic(sync_->buckets(), /*ring=*/true, n, rank);
  if (zero_ == 1) return sharded_step_traffic(sync_->buckets(), n_local_, n, rank, dtype_of<A>(), /*reductions=*/1);
  // Each bucket reduce-scattered every micro-step; a tied wte's, its embedding unit alone, once a step.
  CommTally traffic = bucket_reduce_scatter_traffic(sharded_->buckets(), n_local_, n, rank, [&](const GradBucket& b) {
    return tied_wte && b.units == std::vector<int>{ParamLayout::kEmbeddingUnit} ? 1 : micro_steps;
  });
  if (zero_ == 2) traffic += ring_all_gather_traffic(ring_chunk_bounds(size_t(n_local_), n), rank, dtype_of<A>());
  else traffic += zero3_gather_traffic(model_.layout(), passes, n, rank, dtype_of<A>());
  return traffic;
}

template <class A>
std::vector<A> LocalZero<A>::local_weights() {
  std::vector<A> local(static_cast<size_t>(n_local_));
  if (zero_ == 3) static_cast<Zero3Store<A>&>(*sharded_).gather_all(local.data());
  else device_copy(Device::CPU, local.data(), device_, params_, local.size() * sizeof(A));
  return local;
}

template class LocalZero<float>;
template class LocalZero<bf16>;
}  // namespace gpt
