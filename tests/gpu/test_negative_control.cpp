// The GPU tests' negative control, counted where it tells (negative_control.h), checked on
// the CPU in every build: the rule the GPU comparisons apply must reject a bound that only
// a tensor's zeros or masked -inf entries reject, and keep the constant's test for a
// tensor that has nothing else.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tests/gpu/negative_control.h"

using gpt::gpu_test::ControlCount;

namespace {

// The count over a tensor of truths `want`, each element's bound `bound(want)`.
template <class Bound>
ControlCount count(const std::vector<double>& want, Bound&& bound) {
  ControlCount c;
  for (double w : want) c.add(w, bound(w));
  return c;
}

}  // namespace

TEST_CASE("a bound loose on every finite, non-zero element is caught even beside a zero", "[negative_control]") {
  const std::vector<double> want = {0.0, 1.5, -2.0, 40.0};
  // 2 % of each value: the truth 1 % off passes everywhere it tells; the zero's tight
  // bound rejects the constant 1e-3, which a rule of "some element" would have accepted.
  const ControlCount loose = count(want, [](double w) { return w == 0.0 ? 1e-6 : 0.02 * std::fabs(w); });
  CHECK(loose.telling == 3);
  CHECK(loose.rejected_other == 1);
  CHECK_FALSE(loose.rejected());
  // Half a percent at one element: the control is rejected there.
  const ControlCount tight = count(want, [](double w) { return w == 40.0 ? 0.005 * 40.0 : 0.02 * std::fabs(w); });
  CHECK(tight.rejected_telling == 1);
  CHECK(tight.rejected());
  CHECK(tight.describe() == "rejected at 1 of 3 elements of finite, non-zero truth");
}

TEST_CASE("a tensor of zeros and -inf keeps the constant's test", "[negative_control]") {
  // A key block no query sees: output 0, logsumexp -inf; each judged alone, as the tests do.
  const std::vector<double> output = {0.0, 0.0}, logsumexp = {-INFINITY, -INFINITY};
  CHECK(count(output, [](double) { return 1e-6; }).rejected());      // the constant 1e-3 is outside
  CHECK_FALSE(count(output, [](double) { return 1e-2; }).rejected());  // and inside a bound of 1e-2
  CHECK(count(logsumexp, [](double) { return 1e-6; }).rejected());   // a finite 0 against -inf
  const ControlCount loose = count(logsumexp, [](double) { return INFINITY; });
  CHECK(loose.telling == 0);
  CHECK_FALSE(loose.rejected());
  CHECK(loose.describe() == "no element of finite, non-zero truth; the constant rejected at 0");
}
