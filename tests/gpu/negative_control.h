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

}  // namespace gpt::gpu_test
