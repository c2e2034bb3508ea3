// The negative control of the GPU tests' element-wise comparisons: the truth 1 % off, as
// a kernel with a wrong constant (a scale, a step size) would return it, and as training
// would hide it (AdamW's update does not change when a gradient is scaled). A comparison
// must reject it, or its bound is too loose to tell a right kernel from a wrong one.
// Where the truth is 0 there is no 1 % to take, so the control is 1e-3 there; where it is
// infinite (a logsumexp of no visible key), the control is the finite 0.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

namespace gpt::gpu_test {

inline double one_percent_off(double want) {
  if (!std::isfinite(want)) return 0.0;
  if (want == 0.0) return 1e-3;
  return want * 1.01;
}

// Where a comparison's bounds reject the control, over the elements of one tensor. Where
// the truth is finite and non-zero the control is the truth 1 % off; where it is 0 or
// infinite the control is a constant, and rejecting it shows only that the bound is below
// 1e-3 (or finite). So the control must be rejected at some element of finite, non-zero
// truth when the tensor has one: a tensor with one masked logsumexp or one exact zero
// would otherwise pass "some element rejects the control" whatever its bound. A tensor
// with none (a block no query sees: output 0, logsumexp -inf) keeps the constant's test.
struct ControlCount {
  size_t telling = 0;           // elements of finite, non-zero truth
  size_t rejected_telling = 0;  // of them, those whose bound rejects the control
  size_t rejected_other = 0;    // elements of 0 or infinite truth that reject the constant

  void add(double want, double bound) {
    const bool rejected = !(std::fabs(one_percent_off(want) - want) <= bound);
    if (std::isfinite(want) && want != 0.0) {
      ++telling;
      rejected_telling += rejected;
    } else {
      rejected_other += rejected;
    }
  }
  // Whether the bounds reject the control where it tells (see above).
  bool rejected() const { return telling > 0 ? rejected_telling > 0 : rejected_other > 0; }
  // "rejected at K of N elements of finite, non-zero truth" (or of the constant's).
  std::string describe() const {
    return telling > 0 ? "rejected at " + std::to_string(rejected_telling) + " of " + std::to_string(telling) +
                             " elements of finite, non-zero truth"
                       : "no element of finite, non-zero truth; the constant rejected at " +
                             std::to_string(rejected_other);
  }
};

}  // namespace gpt::gpu_test
