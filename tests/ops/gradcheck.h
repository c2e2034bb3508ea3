// Shared helpers of the op tests: seeded random tensors, a central-difference
// gradient check in double, and an independent bf16 rounding reference.
//
// The gradient check. Every op is checked through a scalar objective
//     L(x) = sum_i out_i(x) * R_i
// with a fixed random R, so the upstream gradient fed to the backward op is R and the
// analytic gradient is what the backward op accumulates into a zeroed buffer. The
// finite difference for input element x_j is the central difference
//     fd_j = (L(x + h e_j) - L(x - h e_j)) / (2h),   h = 1e-6 * max(1, |x_j|).
// Error of fd_j (Taylor / standard round-off analysis):
//   truncation  h^2/6 * |d^3L/dx_j^3|                          ~ 1e-12 * |L'''|
//   round-off   eps_double * |L| / h, where only the outputs that x_j feeds count:
//               noise_j = eps * sum_{i: out_i changed} |R_i| (|out_i(x+h)| + |out_i(x-h)|)
//                         / ((x+h) - (x-h))                    ~ 1e-10 * |L_affected|
// We compute the difference of L as sum_i (out_i(x+h) - out_i(x-h)) * R_i in long
// double: outputs that do not depend on x_j cancel exactly and the summation adds no
// error of its own, so only the forward's own rounding of the affected outputs is
// left (about one rounding of each, which noise_j bounds). We also divide by the step
// actually taken, (x+h) - (x-h) as represented. With h ~ 1e-6 both error terms are
// ~1e-10 relative, so the check
//     |analytic - fd| <= 1e-7 * (|fd| + 1e-3 * scale) + noise_j,
//     scale = max_j |fd_j| of the tensor,
// leaves three orders of magnitude of margin on the relative term; the floor
// 1e-10 * scale covers gradients that are zero or tiny compared with the rest of the
// tensor, where the relative term alone would demand more than double can give.
// noise_j is the round-off term itself, |L|/h restricted to the outputs x_j feeds:
// it matters only where one input feeds many outputs (a layernorm input feeds its
// whole row of C outputs, so its round-off is ~C times one output's, which the floor
// 1e-10 * max|fd| does not cover: measured at 85% of that floor at C = 70).
// Negative control, on every check: the analytic gradient scaled by 1 + 1e-5 (a
// hundred times the relative term) must fail the same tolerance on some element.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace gpt::test {

using Vec = std::vector<double>;

// Seeded generator: every test draws the same numbers on every machine that has the
// same libstdc++ (mt19937_64 itself is fully specified; only the distributions are
// implementation-defined, and we avoid them for that reason).
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  // Uniform in [lo, hi): 53 random bits scaled, no std::uniform_real_distribution.
  double uniform(double lo, double hi) {
    const double u = double(g_() >> 11) * 0x1p-53;
    return lo + (hi - lo) * u;
  }
  // Standard normal by Box-Muller.
  double normal() {
    const double u1 = (double(g_() >> 11) + 0.5) * 0x1p-53;
    const double u2 = double(g_() >> 11) * 0x1p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Uniform integer in [0, n).
  int32_t below(int32_t n) { return int32_t(g_() % uint64_t(n)); }
  uint64_t bits() { return g_(); }

 private:
  std::mt19937_64 g_;
};

inline Vec uniform_vec(size_t n, Rng& rng, double lo, double hi) {
  Vec v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}
inline Vec normal_vec(size_t n, Rng& rng, double sigma = 1.0) {
  Vec v(n);
  for (auto& x : v) x = sigma * rng.normal();
  return v;
}

// Checks `analytic` (the backward op's gradient of L with respect to x) against the
// central difference of L. `forward(out)` recomputes the op's output into `out` from
// the current contents of `x` (the check perturbs x in place and restores it).
template <class Forward>
void check_gradient(const std::string& name, Vec& x, const Vec& analytic, const Vec& R,
                    Forward&& forward) {
  REQUIRE(analytic.size() == x.size());
  Vec out_p(R.size()), out_m(R.size()), fd(x.size()), noise(x.size());
  constexpr double eps = std::numeric_limits<double>::epsilon();
  for (size_t j = 0; j < x.size(); ++j) {
    const double xj = x[j];
    const double h = 1e-6 * std::max(1.0, std::fabs(xj));
    x[j] = xj + h;
    const double xp = x[j];
    forward(out_p);
    x[j] = xj - h;
    const double xm = x[j];
    forward(out_m);
    x[j] = xj;
    long double dL = 0, affected = 0;
    for (size_t i = 0; i < R.size(); ++i) {
      dL += (long double)(out_p[i] - out_m[i]) * (long double)R[i];
      if (out_p[i] != out_m[i])
        affected += std::fabs((long double)R[i]) * (std::fabs(out_p[i]) + std::fabs(out_m[i]));
    }
    fd[j] = double(dL / (long double)(xp - xm));
    noise[j] = eps * double(affected) / (xp - xm);
  }
  double scale = 0;
  for (double f : fd) scale = std::max(scale, std::fabs(f));

  // Tolerance (derivation in the header comment): truncation O(h^2 f''') and
  // round-off ~eps_double*|L|/h are both ~1e-10 relative with h ~ 1e-6, so we require
  // |analytic - fd| <= 1e-7 * (|fd| + 1e-3 * scale) + noise_j (round-off of the
  // outputs x_j feeds).
  size_t failures = 0, worst = 0, control_failures = 0;
  double worst_ratio = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    const double tol = 1e-7 * (std::fabs(fd[j]) + 1e-3 * scale) + noise[j];
    const double err = std::fabs(analytic[j] - fd[j]);
    const double ratio = err / tol;
    if (!(err <= tol)) ++failures;  // also counts NaN
    if (!(std::fabs(analytic[j] * (1 + 1e-5) - fd[j]) <= tol)) ++control_failures;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = j;
    }
  }
  std::ostringstream msg;
  msg.precision(17);
  msg << name << ": " << x.size() << " elements, scale (max |fd|) " << scale << ", "
      << failures << " outside tolerance; worst element " << worst << ": analytic "
      << analytic[worst] << " fd " << fd[worst] << " noise " << noise[worst] << " |diff|/tol "
      << worst_ratio;
  INFO(msg.str());
  CHECK(scale > 0);  // a tensor whose gradient is all zero would check nothing
  CHECK(failures == 0);
  CHECK(control_failures > 0);  // the gradient 1e-5 off must be seen
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Independent bf16 reference: the two bf16 neighbours of x (its upper 16 bits, and
// the next one away from zero), the nearer one chosen by exact arithmetic in double,
// ties to the one with an even last bit. NaN stays NaN (quiet); inf stays inf; a
// finite value at or beyond half an ulp above the largest bf16 becomes inf (the
// neighbour 0x7F80 is inf, and IEEE rounding to nearest treats it as 2^128).
inline float bf16_reference(float x) {
  const uint32_t u = float_bits(x);
  if (std::isnan(x)) return bits_float(u | 0x00400000u);
  if (std::isinf(x)) return x;
  const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x00010000u;  // same sign, larger magnitude
  const double ax = std::fabs(double(x));
  const double alo = std::fabs(double(bits_float(lo)));
  const double ahi = (hi & 0x7FFFFFFFu) == 0x7F800000u ? 0x1p128 : std::fabs(double(bits_float(hi)));
  const double dlo = ax - alo, dhi = ahi - ax;  // exact: both operands are close floats
  if (dlo < dhi) return bits_float(lo);
  if (dhi < dlo) return bits_float(hi);
  return bits_float((lo & 0x00010000u) == 0 ? lo : hi);
}

}  // namespace gpt::test
