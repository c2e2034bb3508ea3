// The negative control of the GPU tests' element-wise comparisons: the truth 1 % off, as
// a kernel with a wrong constant (a scale, a step size) would return it, and as training
// would hide it (AdamW's update does not change when a gradient is scaled). A comparison
// must reject it, or its bound is too loose to tell a right kernel from a wrong one.
// Where the truth is 0 there is no 1 % to take, so the control is 1e-3 there; where it is
// infinite (a logsumexp of no visible key), the control is the finite 0.
#pragma once

#include <cmath>

namespace gpt::gpu_test {

inline double one_percent_off(double want) {
  if (!std::isfinite(want)) return 0.0;
  if (want == 0.0) return 1e-3;
  return want * 1.01;
}

// Whether a comparison's bound at one element rejects the control there, counted only
// where the truth is finite and non-zero: there the control is the truth 1 % off. Where
// it is 0 or infinite the control is a constant, and rejecting it shows only that the
// bound is below 1e-3 (or finite), so a tensor with one masked logsumexp or one exact
// zero would pass the check "some element rejects the control" whatever its bound.
inline bool rejects_control(double want, double bound) {
  return std::isfinite(want) && want != 0.0 && !(std::fabs(one_percent_off(want) - want) <= bound);
}

}  // namespace gpt::gpu_test
