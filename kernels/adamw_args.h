/// @file
/// Hyper-parameters of one optimizer update (see adamw_update in kernels/ops.h).
#pragma once

namespace gpt::ops {
/// The scalars of one update of a range of parameters.
struct AdamWArgs {
  /// @var lr
  /// the step's learning rate (the schedule's value)
  /// @var beta1
  /// decay rate b1 of the first moment m
  /// @var beta2
  /// decay rate b2 of the second moment v
  /// @var eps
  /// added to the root of the bias-corrected v in the denominator
  /// @var weight_decay
  /// decoupled weight decay wd, also scaled by lr; 0 for tensors that do not decay
  /// @var grad_scale
  /// factor every gradient is multiplied by first (the global-norm clip factor)
  double lr, beta1, beta2, eps, weight_decay, grad_scale;  ///< rounded to T where used
  int step;  ///< t, counted from 1
  /// Plain SGD instead (optimizer=sgd): p -= lr * grad_scale * grad, with no moments (m
  /// and v are left as they are) and no weight decay. Its update is the gradient itself,
  /// so a gradient off by a constant factor shows in the weights, which AdamW's
  /// normalisation by sqrt(v) would hide.
  bool sgd = false;
};
}  // namespace gpt::ops
