// Hyper-parameters of one AdamW update (see adamw_update in kernels/ops.h).
#pragma once

namespace gpt::ops {
struct AdamWArgs {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;  // rounded to T where used
  int step;  // t, counted from 1
};
}  // namespace gpt::ops
