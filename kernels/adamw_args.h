/// @file
/// Hyper-parameters of one optimizer update (see adamw_update in kernels/ops.h).
#pragma once

namespace gpt::ops {
struct AdamWArgs {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;  ///< rounded to T where used
  int step;  ///< t, counted from 1
  /// Plain SGD instead (optimizer=sgd): p -= lr * grad_scale * grad, with no moments (m
  /// and v are left as they are) and no weight decay. Its update is the gradient itself,
  /// so a gradient off by a constant factor shows in the weights, which AdamW's
  /// normalisation by sqrt(v) would hide.
  bool sgd = false;
};
}  // namespace gpt::ops
