#include "stages/03_zero1/zero1.h"

#include <cmath>

#include "common/trace.h"
#include "kernels/ops.h"

namespace gpt {

double sharded_grad_norm(Communicator& dp, Device d, const float* shard_grads, int64_t n) {
  double sum = ops::sum_of_squares(d, shard_grads, size_t(n));
  dp.all_reduce(&sum, 1, DType::F64);  // the shards tile the model: their sums add up
  return std::sqrt(sum);
}

void sharded_adamw_step(Communicator& dp, Device d, AdamW<float>& opt, const Shard& shard,
                        float* params, const float* shard_grads, int64_t total, double norm,
                        double lr, const Config& cfg, int step_number, bool bf16) {
  {
    Span span("adamw_shard");
    opt.step(d, params + shard.begin, shard_grads, lr, clip_scale(norm, cfg.grad_clip), cfg,
             step_number, bf16);
  }
  Span span("allgather_params", "comm");
  ring_all_gather(dp, params, size_t(total), DType::F32);
}

CheckpointMirror shard_checkpoint(AdamW<float>& opt, DeviceArray<float>& weights, size_t offset, bool bf16,
                                  int64_t begin) {
  const size_t n = opt.m().size();
  return CheckpointMirror({bf16 ? CheckpointMirror::Entry{"param", &opt.master()}
                                : CheckpointMirror::Entry::slice("param", &weights, offset, n),
                           {"adam_m", &opt.m()},
                           {"adam_v", &opt.v()}},
                          begin);
}

}  // namespace gpt
