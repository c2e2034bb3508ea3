// ZeRO stage 1: the optimizer state sharded over the data-parallel ranks; see zero1.h.
#include "stages/03_zero1/zero1.h"

#include <cmath>
#include <type_traits>

#include "common/trace.h"
#include "kernels/ops.h"
#include "stages/02_ddp/ring_allreduce.h"

namespace gpt {

double sharded_grad_norm(Communicator& dp, Device d, const float* shard_grads, int64_t n) {
  Span span("grad_norm");
  double sum = ops::sum_of_squares(d, shard_grads, size_t(n));
  dp.all_reduce(&sum, 1, DType::F64);  // the shards tile the model: their sums add up
  return std::sqrt(sum);
}

CommTally bucket_reduce_scatter_traffic(const std::vector<GradBucket>& buckets, int64_t total, int n, int rank,
                                        const std::function<int(const GradBucket&)>& times) {
  CommTally traffic;
  for (const GradBucket& b : buckets) {
    const CommTally once = ring_reduce_scatter_traffic(shard_bounds_within(b.begin, b.end, total, n), rank, DType::F32);
    for (int i = 0; i < times(b); ++i) traffic += once;
  }
  return traffic;
}

CommTally sharded_step_traffic(const std::vector<GradBucket>& buckets, int64_t total, int n, int rank, DType weights,
                               int reductions) {
  CommTally traffic =
      bucket_reduce_scatter_traffic(buckets, total, n, rank, [&](const GradBucket&) { return reductions; });
  traffic += ring_all_gather_traffic(ring_chunk_bounds(size_t(total), n), rank, weights);
  return traffic;
}

template <class A>
void sharded_adamw_step(Communicator& dp, Device d, AdamW<float>& opt, const Shard& shard, A* params,
                        const float* shard_grads, int64_t total, double norm, double lr, const Config& cfg,
                        int step_number) {
  {
    Span span("adamw_shard");
    opt.step(d, params + shard.begin, shard_grads, lr, clip_scale(norm, cfg.grad_clip, step_number), cfg, step_number);
  }
  Span span("allgather_params", "comm");
  ring_all_gather(dp, params, size_t(total), dtype_of<A>());
}

template <class A>
CheckpointMirror shard_checkpoint(AdamW<float>& opt, DeviceArray<A>& weights, size_t offset, int64_t begin) {
  const size_t n = opt.m().size();
  auto param = [&] {
    if constexpr (std::is_same_v<A, float>) {
      return CheckpointMirror::Entry::slice("param", &weights, offset, n);
    } else {
      (void)weights, (void)offset;
      return CheckpointMirror::Entry{"param", &opt.master()};
    }
  };
  return CheckpointMirror({param(), {"adam_m", &opt.m()}, {"adam_v", &opt.v()}}, begin);
}

template void sharded_adamw_step<float>(Communicator&, Device, AdamW<float>&, const Shard&, float*, const float*,
                                        int64_t, double, double, const Config&, int);
template void sharded_adamw_step<bf16>(Communicator&, Device, AdamW<float>&, const Shard&, bf16*, const float*,
                                       int64_t, double, double, const Config&, int);
template CheckpointMirror shard_checkpoint<float>(AdamW<float>&, DeviceArray<float>&, size_t, int64_t);
template CheckpointMirror shard_checkpoint<bf16>(AdamW<float>&, DeviceArray<bf16>&, size_t, int64_t);

}  // namespace gpt
