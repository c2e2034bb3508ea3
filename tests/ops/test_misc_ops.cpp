// The ops that are not a forward/backward pair: bf16 rounding, the AdamW update, the
// sum of squares of the gradient norm; and the numerical properties of the fused
// softmax + cross-entropy (shift invariance, stability at large logits, linearity in
// dloss).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/lanes.h"
#include "kernels/ops.h"
#include "tests/ops/gradcheck.h"

using gpt::Device;
using gpt::ops::AdamWArgs;
using gpt::test::bf16_reference;
using gpt::test::bits_float;
using gpt::test::float_bits;
using gpt::test::Rng;
namespace ops = gpt::ops;

namespace {

constexpr Device kCPU = Device::CPU;

uint32_t rounded_bits(uint32_t in) {
  float x = bits_float(in);
  ops::round_to_bf16(kCPU, &x, 1);
  return float_bits(x);
}

std::string hex(uint32_t u) {
  std::ostringstream s;
  s << "0x" << std::hex << std::uppercase << u;
  return s.str();
}

}  // namespace

// ---------------------------------------------------------------------------- bf16

TEST_CASE("ops: round_to_bf16 on chosen bit patterns", "[ops][bf16]") {
  struct Case {
    uint32_t in, out;
    const char* what;
  };
  const Case cases[] = {
      {0x3F800000u, 0x3F800000u, "1.0 is already bf16"},
      {0x3F808000u, 0x3F800000u, "tie between 0x3F80 and 0x3F81: to even, down"},
      {0x3F818000u, 0x3F820000u, "tie between 0x3F81 and 0x3F82: to even, up"},
      {0x3F808001u, 0x3F810000u, "just above half-way: up"},
      {0x3F807FFFu, 0x3F800000u, "just below half-way: down"},
      {0x3F81FFFFu, 0x3F820000u, "far above half-way: up"},
      {0x3F7FFFFFu, 0x3F800000u, "round up carries into the exponent"},
      {0xBF808000u, 0xBF800000u, "negative tie: to even (toward zero here)"},
      {0xBF818000u, 0xBF820000u, "negative tie: to even (away from zero here)"},
      {0xBF808001u, 0xBF810000u, "negative, above half-way in magnitude"},
      {0xBF807FFFu, 0xBF800000u, "negative, below half-way in magnitude"},
      {0x7F800000u, 0x7F800000u, "+inf unchanged"},
      {0xFF800000u, 0xFF800000u, "-inf unchanged"},
      {0x7F7F0000u, 0x7F7F0000u, "largest finite bf16 unchanged"},
      {0x7F7F7FFFu, 0x7F7F0000u, "largest float that stays finite"},
      {0x7F7F8000u, 0x7F800000u, "smallest float that rounds to +inf (tie, 0x7F80 is even)"},
      {0x7F7FFFFFu, 0x7F800000u, "FLT_MAX rounds to +inf"},
      {0xFF7FFFFFu, 0xFF800000u, "-FLT_MAX rounds to -inf"},
      {0x00000000u, 0x00000000u, "+0"},
      {0x80000000u, 0x80000000u, "-0 keeps its sign"},
      {0x00008000u, 0x00000000u, "subnormal tie: to even (zero)"},
      {0x00018000u, 0x00020000u, "subnormal tie: to even (up)"},
      {0x00008001u, 0x00010000u, "subnormal above half-way"},
      {0x80008000u, 0x80000000u, "negative subnormal tie rounds to -0"},
      {0x007FFFFFu, 0x00800000u, "largest subnormal rounds up to the smallest normal"},
  };
  for (const Case& c : cases) {
    INFO(c.what << ": " << hex(c.in) << " expected " << hex(c.out) << " got "
                << hex(rounded_bits(c.in)));
    CHECK(rounded_bits(c.in) == c.out);
    CHECK(float_bits(bf16_reference(bits_float(c.in))) == c.out);  // the reference agrees
  }
}

TEST_CASE("ops: round_to_bf16 keeps NaN a quiet NaN", "[ops][bf16]") {
  // 0x7F800001 and 0xFF800001: signalling NaNs whose payload is only in the low 16
  // bits (truncation alone turns them into inf); 0x7FFFFFFF: adding the rounding bias
  // overflows into the sign bit.
  for (uint32_t in : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FBFFFFFu,
                      0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FC08000u, 0x7F808000u}) {
    const uint32_t out = rounded_bits(in);
    INFO("NaN " << hex(in) << " became " << hex(out));
    CHECK(std::isnan(bits_float(out)));
    CHECK((out & 0x00400000u) != 0);  // quiet bit
  }
}

TEST_CASE("ops: round_to_bf16 matches an independent reference and is idempotent",
          "[ops][bf16]") {
  // Every upper half with the low halves that matter (exact, below, at and above the
  // half-way point, the top), then random bit patterns.
  std::vector<uint32_t> patterns;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
      patterns.push_back((hi << 16) | lo);
  Rng rng(2001);
  for (int i = 0; i < (1 << 20); ++i) patterns.push_back(uint32_t(rng.bits() >> 32));

  std::vector<float> x(patterns.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = bits_float(patterns[i]);
  std::vector<float> once = x;
  ops::round_to_bf16(kCPU, once.data(), once.size());
  std::vector<float> twice = once;
  ops::round_to_bf16(kCPU, twice.data(), twice.size());

  size_t bad = 0, not_bf16 = 0, not_idempotent = 0;
  std::string first;
  for (size_t i = 0; i < x.size(); ++i) {
    const float ref = bf16_reference(x[i]);
    const uint32_t got = float_bits(once[i]);
    const bool ok = std::isnan(ref) ? (std::isnan(once[i]) && (got & 0x00400000u))
                                    : got == float_bits(ref);
    if (!ok) {
      if (bad == 0) first = hex(patterns[i]) + " -> " + hex(got) + ", expected " + hex(float_bits(ref));
      ++bad;
    }
    if (!std::isnan(once[i]) && (got & 0xFFFFu) != 0) ++not_bf16;
    const bool same = std::isnan(once[i]) ? std::isnan(twice[i]) : float_bits(twice[i]) == got;
    not_idempotent += !same;
  }
  INFO(x.size() << " patterns; first mismatch: " << first);
  CHECK(bad == 0);
  CHECK(not_bf16 == 0);  // every non-NaN result is a bf16 value (low 16 bits zero)
  CHECK(not_idempotent == 0);
}

TEST_CASE("ops: round_to_bf16 on double is the identity", "[ops][bf16]") {
  std::vector<double> x = {1.0 + 1e-9, -3.14159, 1e300, 0.1};
  const std::vector<double> before = x;
  ops::round_to_bf16(kCPU, x.data(), x.size());
  CHECK(x == before);
}

// --------------------------------------------------------------------------- AdamW

namespace {

// Scalar transcription of the formula in kernels/ops.h, in double.
struct AdamWRef {
  double p, m, v;
};
AdamWRef adamw_reference(double p, double grad, double m, double v, const AdamWArgs& a) {
  const double b1 = a.beta1, b2 = a.beta2;
  const double g = grad * double(a.grad_scale);
  m = b1 * m + (1 - b1) * g;
  v = b2 * v + (1 - b2) * g * g;
  const double mhat = m / (1 - std::pow(b1, a.step));
  const double vhat = v / (1 - std::pow(b2, a.step));
  p -= double(a.lr) * (mhat / (std::sqrt(vhat) + double(a.eps)) + double(a.weight_decay) * p);
  return {p, m, v};
}

// First-order rounding-error bounds of one AdamW step computed in a type with
// machine epsilon `e` (an upper bound on each operation's relative error, u = e/2
// would do), doubled for the second-order terms. The inputs p0, g, m0, v0 and the
// hyper-parameters are exact in both types.
//   g' = g s                       relative error e
//   m  = b1 m0 + (1-b1) g'         absolute Em = 3e (|b1 m0| + |(1-b1) g'|)   (may cancel)
//   v  = b2 v0 + (1-b2) g'^2       relative Ev = 5e                          (no cancellation)
//   c_i = 1 - b_i^t                relative (t+2)e * b_i^t / c_i + e   (pow, then cancellation)
//   mhat = m / c1                  absolute (Em + |m| (e + rel c1)) / c1
//   sqrt(vhat)                     relative (Ev + rel c2 + e) / 2 + e
//   q = mhat / (sqrt(vhat) + eps)  absolute |dmhat| / den + |q| (rel sqrt + 2e)
//   p  = p0 - lr (q + wd p0)       absolute lr |dq| + e (|p0| + 2 lr (|q| + |wd p0|))
struct AdamWBound {
  double p, m, v;
};
AdamWBound adamw_bound(double p0, double grad, double m0, double v0, const AdamWArgs& a,
                       double e) {
  const double b1 = a.beta1, b2 = a.beta2, lr = a.lr, wd = a.weight_decay;
  const double g = grad * double(a.grad_scale);
  const double m = b1 * m0 + (1 - b1) * g, v = b2 * v0 + (1 - b2) * g * g;
  const double Em = 3 * e * (std::fabs(b1 * m0) + std::fabs((1 - b1) * g));
  const double Ev = 5 * e * v;
  const double c1 = 1 - std::pow(b1, a.step), c2 = 1 - std::pow(b2, a.step);
  const double rc1 = (a.step + 2) * e * std::pow(b1, a.step) / c1 + e;
  const double rc2 = (a.step + 2) * e * std::pow(b2, a.step) / c2 + e;
  const double mhat = m / c1, dmhat = (Em + std::fabs(m) * (e + rc1)) / c1;
  const double rsqrt = (5 * e + rc2 + e) / 2 + e;
  const double den = std::sqrt(v / c2) + double(a.eps);
  const double q = mhat / den;
  const double dq = dmhat / den + std::fabs(q) * (rsqrt + 2 * e);
  const double dp = lr * dq + e * (std::fabs(p0) + 2 * lr * (std::fabs(q) + std::fabs(wd * p0)));
  return {2 * dp, 2 * Em, 2 * Ev};
}

template <class T>
void check_adamw(const AdamWArgs& a, const std::vector<T>& p0, const std::vector<T>& g,
                 const std::vector<T>& m0, const std::vector<T>& v0, bool copy_bf16) {
  const size_t n = p0.size();
  std::vector<T> p = p0, m = m0, v = v0, copy(n, T(-777));
  ops::adamw_update(kCPU, p.data(), g.data(), m.data(), v.data(), n, a, copy.data(), copy_bf16);
  const double e = std::numeric_limits<T>::epsilon();
  size_t bad_p = 0, bad_m = 0, bad_v = 0, bad_copy = 0, control_rejected = 0;
  // Negative control: the reference with the bias correction of the next step (an
  // off-by-one step count) must miss the parameters' bound somewhere, wherever the
  // correction still matters (it fades as b^step goes to 0: not at step 1000).
  AdamWArgs next = a;
  next.step = a.step + 1;
  std::ostringstream first;
  first.precision(17);
  for (size_t i = 0; i < n; ++i) {
    const AdamWRef r = adamw_reference(p0[i], g[i], m0[i], v0[i], a);
    const AdamWBound bd = adamw_bound(p0[i], g[i], m0[i], v0[i], a, e);
    const bool okp = std::fabs(double(p[i]) - r.p) <= bd.p;
    const bool okm = std::fabs(double(m[i]) - r.m) <= bd.m;
    const bool okv = std::fabs(double(v[i]) - r.v) <= bd.v;
    if ((!okp || !okm || !okv) && first.str().empty())
      first << "element " << i << ": p " << double(p[i]) << " (ref " << r.p << ", bound " << bd.p
            << ") m " << double(m[i]) << " (ref " << r.m << ") v " << double(v[i]) << " (ref "
            << r.v << ")";
    bad_p += !okp, bad_m += !okm, bad_v += !okv;
    control_rejected += !(std::fabs(double(p[i]) - adamw_reference(p0[i], g[i], m0[i], v0[i], next).p) <= bd.p);
    T expect_copy = p[i];
    if constexpr (sizeof(T) == 4)
      if (copy_bf16) expect_copy = bf16_reference(p[i]);
    bad_copy += std::memcmp(&copy[i], &expect_copy, sizeof(T)) != 0;
  }
  INFO((sizeof(T) == 4 ? "float" : "double")
       << " step " << a.step << " lr " << a.lr << " wd " << a.weight_decay << " grad_scale "
       << a.grad_scale << " copy_bf16 " << copy_bf16 << " | first mismatch: " << first.str());
  CHECK(bad_p == 0);
  CHECK(bad_m == 0);
  CHECK(bad_v == 0);
  CHECK(bad_copy == 0);
  if (a.step <= 100) CHECK(control_rejected > 0);
}

// Random state for n elements: gradients over several orders of magnitude, some of
// them tiny so that sqrt(vhat) is comparable with eps (where eps placement matters).
template <class T>
void random_state(size_t n, Rng& rng, bool fresh, std::vector<T>& p, std::vector<T>& g,
                  std::vector<T>& m, std::vector<T>& v) {
  p.resize(n), g.resize(n), m.resize(n), v.resize(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = T(rng.normal());
    const double mag = std::pow(10.0, rng.uniform(-9, 1));
    g[i] = T(mag * rng.normal());
    m[i] = fresh ? T(0) : T(0.1 * mag * rng.normal());
    v[i] = fresh ? T(0) : T(mag * mag * rng.uniform(0, 1));
  }
  g[0] = 0;  // zero gradient: pure decay
}

}  // namespace

TEMPLATE_TEST_CASE("ops: adamw_update matches the formula", "[ops][adamw]", float, double) {
  Rng rng(3001);
  const size_t n = 1031;  // odd: covers any vector tail
  std::vector<TestType> p, g, m, v;

  SECTION("step 1 from zero moments, weight decay, grad_scale != 1") {
    random_state(n, rng, true, p, g, m, v);
    const AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 1};
    check_adamw(a, p, g, m, v, false);
  }
  SECTION("step 10 bias correction from given moments") {
    random_state(n, rng, false, p, g, m, v);
    const AdamWArgs a{6e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.8f, 10};
    check_adamw(a, p, g, m, v, false);
  }
  SECTION("no weight decay, grad_scale 1, large step") {
    random_state(n, rng, false, p, g, m, v);
    const AdamWArgs a{1e-2f, 0.8f, 0.99f, 1e-6f, 0.0f, 1.0f, 1000};
    check_adamw(a, p, g, m, v, false);
  }
  SECTION("steps 1 to 10 in sequence, each checked from the kernel's own state") {
    random_state(n, rng, true, p, g, m, v);
    for (int step = 1; step <= 10; ++step) {
      for (auto& x : g) x = TestType(rng.normal() * std::pow(10.0, rng.uniform(-6, 0)));
      const AdamWArgs a{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, step};
      check_adamw(a, p, g, m, v, false);
      ops::adamw_update(kCPU, p.data(), g.data(), m.data(), v.data(), n, a);  // advance
    }
  }
  SECTION("the compute copy: equal to the params, or rounded to bf16") {
    random_state(n, rng, false, p, g, m, v);
    const AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 3};
    check_adamw(a, p, g, m, v, false);
    if constexpr (sizeof(TestType) == 4) check_adamw(a, p, g, m, v, true);
  }
}

// optimizer=sgd: p <- p - lr * (g * grad_scale), the moments untouched. grad_scale is the
// clip factor, which the SGD runs of the stage comparisons never exercise (they run
// without clipping). Bound: three roundings (g * scale, the product with lr, the
// subtraction), each at most e times the magnitudes involved. Control: the update
// without grad_scale must miss it.
TEMPLATE_TEST_CASE("ops: adamw_update with sgd moves p by lr * g * grad_scale", "[ops][adamw]", float, double) {
  Rng rng(3003);
  const size_t n = 1031;
  std::vector<TestType> p, g, m, v;
  random_state(n, rng, false, p, g, m, v);
  const std::vector<TestType> p0 = p, m0 = m, v0 = v;
  const AdamWArgs a{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3, /*sgd=*/true};
  ops::adamw_update(kCPU, p.data(), g.data(), m.data(), v.data(), n, a);
  const double e = std::numeric_limits<TestType>::epsilon();
  size_t bad = 0, control_rejected = 0;
  for (size_t i = 0; i < n; ++i) {
    const double step = double(a.lr) * double(g[i]), want = double(p0[i]) - step * double(a.grad_scale);
    const double bound = 3 * e * (std::fabs(double(p0[i])) + std::fabs(step));
    bad += !(std::fabs(double(p[i]) - want) <= bound);
    control_rejected += !(std::fabs(double(p[i]) - (double(p0[i]) - step)) <= bound);
  }
  CHECK(bad == 0);
  CHECK(control_rejected > 0);
  CHECK(m == m0);
  CHECK(v == v0);
}

TEST_CASE("ops: adamw_update without a copy leaves the copy untouched", "[ops][adamw]") {
  Rng rng(3002);
  std::vector<float> p, g, m, v;
  random_state(257, rng, false, p, g, m, v);
  const AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 2};
  std::vector<float> p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v, copy(p.size(), 0.f);
  ops::adamw_update(kCPU, p1.data(), g.data(), m1.data(), v1.data(), p.size(), a);
  ops::adamw_update(kCPU, p2.data(), g.data(), m2.data(), v2.data(), p.size(), a, copy.data(),
                    true);
  // The copy is an extra output: the update itself is the same with or without it.
  CHECK(p1 == p2);
  CHECK(m1 == m2);
  CHECK(v1 == v2);
}

// ------------------------------------------------------------------ sum of squares

TEST_CASE("ops: sum_of_squares vs a direct loop", "[ops][norm]") {
  // The sum of n non-negative terms in any order: |error| <= gamma_(n-1) * sum, and a
  // double square of a float is exact (24-bit mantissas, 48-bit product); for double
  // inputs each square adds one more rounding: bound (n + 1) eps_double * sum.
  const double e = std::numeric_limits<double>::epsilon();
  Rng rng(4001);
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(1000003)}) {
    std::vector<float> f(n);
    std::vector<double> d(n);
    for (size_t i = 0; i < n; ++i) {
      d[i] = rng.normal() * std::pow(10.0, rng.uniform(-3, 3));
      f[i] = float(d[i]);
    }
    long double sf = 0, sd = 0;
    for (size_t i = 0; i < n; ++i) {
      sf += (long double)f[i] * f[i];
      sd += (long double)d[i] * d[i];
    }
    const double gf = ops::sum_of_squares(kCPU, f.data(), n);
    const double gd = ops::sum_of_squares(kCPU, d.data(), n);
    INFO("n " << n << " float: " << gf << " vs " << double(sf) << "; double: " << gd << " vs "
              << double(sd));
    CHECK(std::fabs(gf - double(sf)) <= double(n + 1) * e * double(sf));
    CHECK(std::fabs(gd - double(sd)) <= double(n + 1) * e * double(sd));
  }
}

TEST_CASE("ops: sum_of_squares of float accumulates in double", "[ops][norm]") {
  // 1e20^2 overflows float, 1e-30^2 underflows it; both are ordinary doubles.
  const std::vector<float> big = {1e20f, -2e20f, 3e-30f};
  const double expect = double(1e20f) * double(1e20f) + double(-2e20f) * double(-2e20f) +
                        double(3e-30f) * double(3e-30f);
  const double got = ops::sum_of_squares(kCPU, big.data(), big.size());
  INFO("got " << got << " expected " << expect);
  CHECK(std::isfinite(got));
  CHECK(std::fabs(got - expect) <= 4 * std::numeric_limits<double>::epsilon() * expect);
  const std::vector<float> tiny = {3e-30f, 4e-30f};
  const double t = ops::sum_of_squares(kCPU, tiny.data(), tiny.size());
  const double texp = double(3e-30f) * double(3e-30f) + double(4e-30f) * double(4e-30f);
  INFO("tiny: got " << t << " expected " << texp);
  CHECK(std::fabs(t - texp) <= 4 * std::numeric_limits<double>::epsilon() * texp);
}

// ------------------------------------------------------------ softmax cross-entropy

namespace {

template <class T>
struct CE {
  std::vector<T> losses, dlogits;
};
template <class T>
CE<T> run_ce(const std::vector<T>& logits, const std::vector<int32_t>& targets, T dloss, int N,
             int V, int Vp) {
  CE<T> r{std::vector<T>(size_t(N)), std::vector<T>(logits.size())};
  ops::softmax_crossentropy(kCPU, r.losses.data(), r.dlogits.data(), logits.data(), targets.data(),
                            dloss, N, V, Vp);
  return r;
}

}  // namespace

TEMPLATE_TEST_CASE("ops: softmax_crossentropy is invariant to a shift of a row's logits",
                   "[ops][crossentropy]", float, double) {
  using T = TestType;
  const int N = 8, V = 50, Vp = 64;
  Rng rng(5001);
  std::vector<T> logits(size_t(N) * Vp, T(0));
  double max_abs_x = 0;
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < V; ++j) {
      logits[size_t(i) * Vp + j] = T(2 * rng.normal());
      max_abs_x = std::max(max_abs_x, std::fabs(double(logits[size_t(i) * Vp + j])));
    }
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = rng.below(V);
  const CE<T> base = run_ce(logits, targets, T(1), N, V, Vp);
  const double e = std::numeric_limits<T>::epsilon();

  for (double c : {37.5, 1e3, -1e3, 1e4}) {
    std::vector<T> shifted = logits;
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < V; ++j) shifted[size_t(i) * Vp + j] = T(double(logits[size_t(i) * Vp + j]) + c);
    const CE<T> s = run_ce(shifted, targets, T(1), N, V, Vp);
    // Rounding the shifted logits moves each by <= e/2 (|x| + |c|), which moves the
    // loss by <= e (|x| + |c|) and each probability by as much; a stable kernel
    // (subtract the row max) then adds ~V e for the sum of exponentials, a few e for
    // exp and log, and e |loss| for the final subtraction; the bound doubles that
    // first-order estimate, for the two runs compared.
    const double mag = std::fabs(c) + max_abs_x;
    for (int i = 0; i < N; ++i) {
      const double loss = double(base.losses[size_t(i)]);
      const double tol = 2 * e * (2 * mag + V + 8 + 2 * std::fabs(loss));
      INFO("shift " << c << " row " << i << ": loss " << loss << " shifted "
                    << double(s.losses[size_t(i)]) << " tol " << tol);
      CHECK(std::isfinite(double(s.losses[size_t(i)])));
      CHECK(std::fabs(double(s.losses[size_t(i)]) - loss) <= tol);
      for (int j = 0; j < V; ++j) {
        const size_t k = size_t(i) * Vp + j;
        INFO("dlogits column " << j << ": " << double(base.dlogits[k]) << " shifted "
                               << double(s.dlogits[k]));
        CHECK(std::isfinite(double(s.dlogits[k])));
        CHECK(std::fabs(double(s.dlogits[k]) - double(base.dlogits[k])) <= 2 * e * (2 * mag + V + 8));
      }
    }
  }
}

TEMPLATE_TEST_CASE("ops: softmax_crossentropy is finite for logits of order 1e3",
                   "[ops][crossentropy]", float, double) {
  using T = TestType;
  const int N = 4, V = 10, Vp = 16;
  std::vector<T> logits(size_t(N) * Vp, T(0));
  std::vector<int32_t> targets(N);
  // row 0: one logit at 1000, target elsewhere -> loss ~ 1000
  logits[3] = T(1000), targets[0] = 0;
  // row 1: one logit at 1000, target on it -> loss ~ (V-1) e^-1000 ~ 0
  logits[size_t(Vp) + 3] = T(1000), targets[1] = 3;
  // row 2: all logits -1e4: uniform -> log V
  for (int j = 0; j < V; ++j) logits[size_t(2) * Vp + j] = T(-1e4);
  targets[2] = 5;
  // row 3: all logits 1e3 apart from one 1e3 - 2: the target
  for (int j = 0; j < V; ++j) logits[size_t(3) * Vp + j] = T(1000);
  logits[size_t(3) * Vp + 7] = T(998), targets[3] = 7;
  const CE<T> r = run_ce(logits, targets, T(1), N, V, Vp);
  const double e = std::numeric_limits<T>::epsilon();
  const double expect[] = {1000.0, 0.0, std::log(double(V)),
                           2.0 + std::log(double(V - 1) + std::exp(-2.0))};
  for (int i = 0; i < N; ++i) {
    INFO("row " << i << " loss " << double(r.losses[size_t(i)]) << " expected " << expect[i]);
    CHECK(std::isfinite(double(r.losses[size_t(i)])));
    // the same first-order bound as the shift test, with |x| up to 1e4 in row 2
    CHECK(std::fabs(double(r.losses[size_t(i)]) - expect[i]) <= 2 * e * (2 * 1e4 + V + 8 + 2 * 1000));
    for (int j = 0; j < V; ++j) CHECK(std::isfinite(double(r.dlogits[size_t(i) * Vp + j])));
  }
}

TEMPLATE_TEST_CASE("ops: softmax_crossentropy dlogits are linear in dloss", "[ops][crossentropy]",
                   float, double) {
  using T = TestType;
  const int N = 6, V = 11, Vp = 16;
  Rng rng(5002);
  std::vector<T> logits(size_t(N) * Vp, T(0));
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < V; ++j) logits[size_t(i) * Vp + j] = T(3 * rng.normal());
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = rng.below(V);
  const CE<T> one = run_ce(logits, targets, T(1), N, V, Vp);
  const double e = std::numeric_limits<T>::epsilon();
  for (double a : {0.25, 1.0 / 6.0, -2.5, 0.0, 1e3}) {
    const CE<T> r = run_ce(logits, targets, T(a), N, V, Vp);
    for (int i = 0; i < N; ++i) {
      // The loss does not depend on dloss at all.
      CHECK(r.losses[size_t(i)] == one.losses[size_t(i)]);
      for (int j = 0; j < Vp; ++j) {
        const size_t k = size_t(i) * Vp + j;
        // dloss * (p - y) against a * (dloss=1 result): |p|, |y| <= 1, so however
        // the kernel orders the product it rounds values of magnitude <= 2|a|, each
        // by at most e/2 per operation (a few operations): 4 e |a|.
        INFO("dloss " << a << " row " << i << " column " << j << ": " << double(r.dlogits[k])
                      << " vs " << a * double(one.dlogits[k]));
        CHECK(std::fabs(double(r.dlogits[k]) - a * double(one.dlogits[k])) <= 4 * e * std::fabs(a));
      }
    }
  }
}

TEMPLATE_TEST_CASE("ops: softmax_crossentropy ignores the padded columns", "[ops][crossentropy]",
                   float, double) {
  using T = TestType;
  const int N = 5, V = 13, Vp = 16;
  Rng rng(5003);
  std::vector<T> logits(size_t(N) * Vp, T(0));
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < V; ++j) logits[size_t(i) * Vp + j] = T(2 * rng.normal());
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = rng.below(V);
  const CE<T> base = run_ce(logits, targets, T(0.5), N, V, Vp);
  for (T pad : {T(1e30), std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
    std::vector<T> padded = logits;
    for (int i = 0; i < N; ++i)
      for (int j = V; j < Vp; ++j) padded[size_t(i) * Vp + j] = pad;
    CE<T> r{std::vector<T>(size_t(N)), std::vector<T>(logits.size(), std::numeric_limits<T>::quiet_NaN())};
    ops::softmax_crossentropy(kCPU, r.losses.data(), r.dlogits.data(), padded.data(),
                              targets.data(), T(0.5), N, V, Vp);
    INFO("padding value " << double(pad));
    CHECK(r.losses == base.losses);
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < Vp; ++j) {
        const size_t k = size_t(i) * Vp + j;
        INFO("row " << i << " column " << j);
        if (j < V)
          CHECK(r.dlogits[k] == base.dlogits[k]);
        else
          CHECK(r.dlogits[k] == T(0));
      }
  }
}

// A rank of a vocabulary-parallel head holds columns [v0, v0 + Vl) of each row. A row whose
// target is the next rank's first column (v0 + Vl) has no one-hot here: its gradient is p
// on every column of the range, and nothing past the range may be written (a stray 1
// there lands in the next row's first column, or past the buffer on the last row). The
// last row has that target, and a sentinel follows the buffer. Bound: the kernel's p is
// fp32 arithmetic on O(1) values through an exp within 2 ulp: 16 e (1 + p).
TEST_CASE("ops: vocabulary-range cross-entropy backward writes its own columns only", "[ops][crossentropy]") {
  const int N = 3, Vl = 8, v0 = 8, V = 20;
  Rng rng(5004);
  std::vector<float> logits(size_t(N) * Vl), row_max(N), row_sum(N), target_logit(N), losses(N);
  std::vector<float> dlogits(size_t(N) * Vl + 1, 42.0f);  // the last element: the sentinel
  for (float& x : logits) x = float(rng.normal());
  const std::vector<int32_t> targets{v0 + Vl, v0 + 1, v0 + Vl};
  ops::crossentropy_stats(kCPU, row_max.data(), row_sum.data(), target_logit.data(), logits.data(), targets.data(),
                          v0, V, N, Vl);
  ops::crossentropy_from_stats(kCPU, losses.data(), dlogits.data(), logits.data(), row_max.data(), row_sum.data(),
                               target_logit.data(), targets.data(), 1.0, v0, V, N, Vl);
  CHECK(dlogits[size_t(N) * Vl] == 42.0f);
  const double e = std::numeric_limits<float>::epsilon();
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < Vl; ++j) {
      const double p = std::exp(double(logits[size_t(i) * Vl + j]) - row_max[size_t(i)]) / row_sum[size_t(i)];
      const double want = p - (targets[size_t(i)] - v0 == j ? 1.0 : 0.0);
      INFO("row " << i << " column " << j);
      CHECK(std::fabs(double(dlogits[size_t(i) * Vl + j]) - want) <= 16 * e * (1 + p));
    }
}

TEST_CASE("ops: layernorm_backward computes dw and db together, and refuses one without the other",
          "[ops][layernorm]") {
  const int N = 3, C = 8;
  std::vector<float> dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f), dout(N * C, 0.5f), inp(N * C), w(C, 1.0f);
  std::vector<float> mean(N, 0.0f), rstd(N, 1.0f);
  for (int i = 0; i < N * C; ++i) inp[size_t(i)] = float(i % 5);
  const Device cpu = Device::CPU;
  REQUIRE_THROWS_WITH(ops::layernorm_backward(cpu, dinp.data(), dw.data(), static_cast<float*>(nullptr), dout.data(),
                                              inp.data(), w.data(), mean.data(), rstd.data(), N, C),
                      Catch::Contains("dw and db go together"));
  REQUIRE_THROWS_WITH(ops::layernorm_backward(cpu, dinp.data(), static_cast<float*>(nullptr), db.data(), dout.data(),
                                              inp.data(), w.data(), mean.data(), rstd.data(), N, C),
                      Catch::Contains("dw and db go together"));
  REQUIRE_THROWS_WITH(ops::layernorm_backward(cpu, static_cast<float*>(nullptr), static_cast<float*>(nullptr),
                                              static_cast<float*>(nullptr), dout.data(), inp.data(), w.data(),
                                              mean.data(), rstd.data(), N, C),
                      Catch::Contains("nothing to compute"));
  // A refused call wrote nothing; the weight half alone fills db with the column sums.
  for (float x : db) REQUIRE(x == 0.0f);
  ops::layernorm_backward(cpu, static_cast<float*>(nullptr), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  for (float x : db) REQUIRE(x == 0.5f * N);
  for (float x : dinp) REQUIRE(x == 0.0f);
}

TEST_CASE("ops: the CPU's fast float exp is within 2 ulp of exp, and NaN stays NaN", "[ops][exp]") {
  // Every 997th float bit pattern in [-87, 88] (the range where exp is a normal float),
  // against double's exp rounded to float; 2 ulp is fast_exp.h's bound (truncation below
  // half an ulp, plus the roundings of the polynomial's few operations).
  int checked = 0;
  for (uint32_t bits = 0; bits < 0xFF800000u; bits += 997) {
    const float x = gpt::test::bits_float(bits);
    if (!(x >= -87.0f && x <= 88.0f)) continue;
    const float got = gpt::cpu::exp_fast(x), want = float(std::exp(double(x)));
    const float ulp = std::nextafter(want, INFINITY) - want;
    REQUIRE(std::fabs(got - want) <= 2 * ulp);
    ++checked;
  }
  CHECK(checked > 1000000);
  CHECK(std::isnan(gpt::cpu::exp_fast(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(gpt::cpu::exp_fast(-std::numeric_limits<float>::quiet_NaN())));
  // Outside the range the input is clamped: tiny or huge, never 0 nor infinite.
  CHECK(gpt::cpu::exp_fast(-1000.0f) > 0.0f);
  CHECK(std::isfinite(gpt::cpu::exp_fast(1000.0f)));
}

TEST_CASE("ops: fixed-lane sums give the same bits wherever the data lies", "[ops][lanes]") {
  // 1000 values of mixed sign and size, copied to every offset 0..15 floats into a
  // buffer (every alignment a 64-byte vector can meet), for every length 0..1000 in steps.
  Rng rng(11);
  std::vector<float> a(1000), b(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(rng.normal() * std::exp(3 * rng.normal())), b[i] = float(rng.normal());
  std::vector<float> shifted_a(a.size() + 16), shifted_b(b.size() + 16);
  for (int n : {0, 1, 15, 16, 17, 31, 64, 100, 999, 1000}) {
    INFO("n " << n);
    const float at_zero = gpt::cpu::dot_lanes(a.data(), b.data(), n);
    for (int offset = 0; offset < 16; ++offset) {
      std::copy(a.begin(), a.end(), shifted_a.begin() + offset);
      std::copy(b.begin(), b.end(), shifted_b.begin() + offset);
      const float here = gpt::cpu::dot_lanes(shifted_a.data() + offset, shifted_b.data() + offset, n);
      REQUIRE(float_bits(here) == float_bits(at_zero));
    }
    // Against double, within the bound of a sum of n products in float: n * 2^-24 of
    // sum |a_i b_i| (each term is rounded once in the product and once per addition).
    double exact = 0, magnitude = 0;
    for (int i = 0; i < n; ++i) exact += double(a[size_t(i)]) * b[size_t(i)], magnitude += std::fabs(double(a[size_t(i)]) * b[size_t(i)]);
    REQUIRE(std::fabs(at_zero - exact) <= (n + 1) * 0x1p-24 * magnitude);
  }
  // The control: these values are sensitive to the order of addition (summed backwards,
  // the bits change), so equal bits at every offset above mean the same order.
  float forwards = 0, backwards = 0;
  for (size_t i = 0; i < a.size(); ++i) forwards += a[i] * b[i];
  for (size_t i = a.size(); i-- > 0;) backwards += a[i] * b[i];
  CHECK(float_bits(forwards) != float_bits(backwards));
  CHECK(float_bits(gpt::cpu::dot_lanes(a.data(), b.data(), 1000)) != float_bits(forwards));
}
