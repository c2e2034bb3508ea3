// The tiled flash-attention algorithm (kernels/cpu/flash_attention.cpp) against the
// reference attention (kernels/cpu/attention.cpp, itself checked against its definition
// and against finite differences in test_forward.cpp and test_gradcheck.cpp). This is
// the CPU proof of the online-softmax recurrence and of the backward recomputed from
// the logsumexp: the GPU kernels of kernels/cuda/attention/ implement the same loops.
//
// Shapes: T not a multiple of the tiles (17 with 8 x 8, 37 with 16 x 8), T = 1, tiles
// larger than T, one-element tiles, Br < Bc and Br > Bc, several heads of size 16 and
// 64, B = 2.
//
// Double: flash and reference compute the same sums in a different order, so they
// agree to a few hundred eps_double (2.2e-16) times the magnitudes; relative 1e-12
// (normwise: against the largest element of the tensor) leaves a wide margin and still
// catches any missing rescale, masked key or wrong tile boundary (those are O(1) errors).
//
// Float: derived as rule 8 of docs/architecture.md says, against the double reference
// as ground truth.
// Each output element is a short chain of float sums: a score is a dot product of hs
// terms; the normaliser and each output are sums of up to T terms; dV, dK, dQ are sums
// of up to T products. A float sum of n terms errs by at most n eps32 sum|terms| and,
// with rounding errors of random sign, typically by about sqrt(n) eps32 sum|terms|.
// The reference and flash perform the same operations except that flash (a) adds per
// key tile one rescale of the accumulator by e^{m - m'} (at most nk extra roundings,
// each relative eps32, of a term bounded by |output|), (b) divides by l once at the end
// instead of normalising each probability, (c) computes D = dO.O instead of sum P dP.
// None of these changes the order of the error, so we require, per tensor and
// normwise (max over elements of |x_float - x_double|):
//     err_flash <= 4 err_reference + eps32 (max|x_double| + cancelling terms, below)
// 4: the two errors are different realisations of random-walk sums (measured ratios
// err_flash / err_reference: 0.6 to 2), and (a) adds a handful of roundings. The floor,
// one rounding of the tensor's largest value, is for tensors the reference gets (nearly)
// exact: at T = 1 out = v up to the rounding of the inputs to float, in both. A real bug
// (a missed rescale, a wrong mask) gives errors of order max|x|, 10^3 times the floor
// and more.
// Cancellation. A gradient can be (near) zero while the terms that cancel to give it
// are not: at T = 1 the softmax is the constant 1, so dq = dk = 0 exactly in the
// reference, but flash's dP - D subtracts two dot products of size W = max sum_i
// |dO_ti v_ui|, computed along different paths (D from the stored O), which agree only to
// rounding. So each bound counts, besides max|x|, the size of what cancels into x:
//   dq = scale sum_u P (dP - D) k:   scale kmax W
//   dk = scale sum_t P (dP - D) q:   scale qmax colP W          (colP = max_u sum_t P_tu)
//   dv = sum_t P dO, P recomputed as e^{s - L} from a score rounded anew (hs terms of
//        size up to A = max scale sum_i |q_i k_i|, in the forward and again here):
//                                    2 sqrt(hs) A colP dOmax
// (out needs none: at T = 1 it is v itself.) The double test takes 1e-12 of the same
// sum. Both stay three orders of magnitude and more below the O(max|x|) error of a
// real bug.
// The saved logsumexp has no counterpart in the reference, so its baseline is the
// unblocked float computation (scores, max, sum of exponentials, m + log l) written out
// in the test, under the same rule.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu/flash_attention.h"
#include "kernels/ops.h"
#include "tests/ops/gradcheck.h"

using gpt::Device;
using gpt::cpu::FlashCounts;
using gpt::test::normal_vec;
using gpt::test::Rng;
using gpt::test::Vec;
namespace ops = gpt::ops;
namespace cpu = gpt::cpu;
using LD = long double;

namespace {

constexpr Device kCPU = Device::CPU;

struct Shape {
  int B, T, NH, hs, Br, Bc;
};
std::string describe(const Shape& s) {
  return "B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " NH " +
         std::to_string(s.NH) + " hs " + std::to_string(s.hs) + " Br " + std::to_string(s.Br) +
         " Bc " + std::to_string(s.Bc);
}

// Random inputs of one shape: qkv with scores of spread ~1.5 (some rows peaked, some
// flat) and an upstream gradient dout.
struct Inputs {
  Vec qkv, dout;
};
Inputs make_inputs(const Shape& s, uint64_t seed) {
  Rng rng(seed);
  const size_t C = size_t(s.NH) * s.hs;
  Inputs in;
  in.qkv = normal_vec(size_t(s.B) * s.T * 3 * C, rng, 1.2);
  in.dout = normal_vec(size_t(s.B) * s.T * C, rng);
  return in;
}

template <class T>
std::vector<T> cast(const Vec& v) {
  return std::vector<T>(v.begin(), v.end());
}
template <class T>
Vec widen(const std::vector<T>& v) {
  return Vec(v.begin(), v.end());
}

// The results of one implementation: out, the probabilities (reference) or the
// logsumexp (flash), and dqkv split into its q, k, v parts.
struct Result {
  Vec out, att, lse, dq, dk, dv;
  FlashCounts fwd, bwd;
};

void split_dqkv(const Vec& dqkv, const Shape& s, Result& r) {
  const size_t C = size_t(s.NH) * s.hs;
  for (size_t p = 0; p < size_t(s.B) * s.T; ++p)
    for (size_t c = 0; c < C; ++c) {
      r.dq.push_back(dqkv[p * 3 * C + c]);
      r.dk.push_back(dqkv[p * 3 * C + C + c]);
      r.dv.push_back(dqkv[p * 3 * C + 2 * C + c]);
    }
}

template <class T>
Result run_reference(const Shape& s, const Inputs& in) {
  const int C = s.NH * s.hs;
  const auto qkv = cast<T>(in.qkv), dout = cast<T>(in.dout);
  std::vector<T> out(size_t(s.B) * s.T * C), att(size_t(s.B) * s.NH * s.T * s.T);
  std::vector<T> dqkv(qkv.size(), T(0));
  // The readable reference of kernels/cpu/attention.cpp (the op itself runs flash).
  cpu::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, C, s.NH);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, C,
                          s.NH);
  Result r;
  r.out = widen(out);
  r.att = widen(att);
  split_dqkv(widen(dqkv), s, r);
  return r;
}

template <class T>
Result run_flash(const Shape& s, const Inputs& in) {
  const int C = s.NH * s.hs;
  const auto qkv = cast<T>(in.qkv), dout = cast<T>(in.dout);
  std::vector<T> out(size_t(s.B) * s.T * C, T(NAN)), lse(size_t(s.B) * s.NH * s.T, T(NAN));
  std::vector<T> dqkv(qkv.size(), T(0));
  Result r;
  r.fwd = cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, C, s.NH,
                                       s.Br, s.Bc);
  r.bwd = cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(),
                                        lse.data(), s.B, s.T, C, s.NH, s.Br, s.Bc);
  r.out = widen(out);
  r.lse = widen(lse);
  split_dqkv(widen(dqkv), s, r);
  return r;
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}
// The size of what cancels into each gradient (the header's "Cancellation"), from the
// inputs and the reference's probabilities: out, dq, dk, dv in this order.
struct CancellingTerms {
  double out = 0, dq = 0, dk = 0, dv = 0;
};
CancellingTerms cancelling_terms(const Shape& s, const Inputs& in, const Vec& att) {
  const size_t C = size_t(s.NH) * s.hs, row = 3 * C;
  const double scale = 1.0 / std::sqrt(double(s.hs));
  double qmax = 0, kmax = 0, dymax = 0, A = 0, W = 0, colP = 0;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const double* P = att.data() + (size_t(b) * s.NH + h) * s.T * s.T;
      for (int t = 0; t < s.T; ++t) {
        const double* q = in.qkv.data() + (size_t(b) * s.T + t) * row + size_t(h) * s.hs;
        const double* dy = in.dout.data() + (size_t(b) * s.T + t) * C + size_t(h) * s.hs;
        for (int i = 0; i < s.hs; ++i) {
          qmax = std::max(qmax, std::fabs(q[i]));
          kmax = std::max(kmax, std::fabs(q[C + size_t(i)]));
          dymax = std::max(dymax, std::fabs(dy[i]));
        }
        for (int u = 0; u <= t; ++u) {
          const double* k = in.qkv.data() + (size_t(b) * s.T + u) * row + C + size_t(h) * s.hs;
          const double* v = k + C;
          double qk = 0, dyv = 0;
          for (int i = 0; i < s.hs; ++i) {
            qk += std::fabs(q[i] * k[i]);
            dyv += std::fabs(dy[i] * v[i]);
          }
          A = std::max(A, scale * qk);
          W = std::max(W, dyv);
        }
      }
      for (int u = 0; u < s.T; ++u) {
        double col = 0;
        for (int t = u; t < s.T; ++t) col += P[size_t(t) * s.T + u];
        colP = std::max(colP, col);
      }
    }
  CancellingTerms c;
  c.dq = scale * kmax * W;
  c.dk = scale * qmax * colP * W;
  c.dv = 2 * std::sqrt(double(s.hs)) * A * colP * dymax;
  return c;
}

// max |a - b|; NaN anywhere makes it NaN, which fails every <= below.
double max_diff(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = d;
  }
  return m;
}

// Independent count of the tiles at or below the causal diagonal: a tile is needed
// when some pair (t, u) inside it has u <= t. Brute force over the pairs.
int64_t needed_tiles(int T, int Br, int Bc) {
  int64_t n = 0;
  for (int i0 = 0; i0 < T; i0 += Br)
    for (int j0 = 0; j0 < T; j0 += Bc) {
      bool any = false;
      for (int t = i0; t < std::min(i0 + Br, T) && !any; ++t)
        for (int u = j0; u < std::min(j0 + Bc, T) && !any; ++u) any = u <= t;
      n += any ? 1 : 0;
    }
  return n;
}

// Counts of one (forward or backward) pass over every (b, head) of shape s.
void check_counts(const FlashCounts& c, const Shape& s, const char* pass) {
  const int64_t heads = int64_t(s.B) * s.NH;
  const int64_t nq = (s.T + s.Br - 1) / s.Br, nk = (s.T + s.Bc - 1) / s.Bc;
  INFO(pass << ": visited " << c.tiles_visited << " skipped " << c.tiles_skipped << " scores "
            << c.scores);
  CHECK(c.tiles_visited == heads * needed_tiles(s.T, s.Br, s.Bc));
  CHECK(c.tiles_visited + c.tiles_skipped == heads * nq * nk);
  // Exactly the causal pairs: none above the diagonal, none twice.
  CHECK(c.scores == heads * int64_t(s.T) * (s.T + 1) / 2);
}

// The scores in long double, for the logsumexp check.
LD score(const Vec& qkv, const Shape& s, int b, int h, int t, int u) {
  const size_t C = size_t(s.NH) * s.hs, row = 3 * C;
  const double* q = qkv.data() + (size_t(b) * s.T + t) * row + size_t(h) * s.hs;
  const double* k = qkv.data() + (size_t(b) * s.T + u) * row + C + size_t(h) * s.hs;
  LD dot = 0;
  for (int i = 0; i < s.hs; ++i) dot += LD(q[i]) * LD(k[i]);
  return dot / std::sqrt(LD(s.hs));
}

const std::vector<Shape> kShapes = {
    {2, 17, 3, 16, 8, 8},    // T not a multiple of the tile
    {2, 37, 3, 16, 16, 8},   // Br > Bc, partial last tiles of both kinds
    {1, 37, 3, 64, 8, 16},   // Br < Bc, head size 64
    {2, 1, 3, 16, 8, 8},     // a single token
    {2, 17, 3, 16, 32, 64},  // tiles larger than T: one tile, the whole causal triangle
    {1, 23, 2, 8, 1, 1},     // one-element tiles: the online softmax one key at a time
    {1, 64, 3, 64, 16, 16},  // T a multiple of the tile
};

}  // namespace

TEST_CASE("ops: flash attention equals the reference attention in double",
          "[ops][flash_attention]") {
  for (size_t n = 0; n < kShapes.size(); ++n) {
    const Shape& s = kShapes[n];
    INFO(describe(s));
    const Inputs in = make_inputs(s, 9100 + n);
    const Result ref = run_reference<double>(s, in);
    const Result fl = run_flash<double>(s, in);

    // Forward output and gradients: normwise relative 1e-12 (header).
    // Normwise relative 1e-12 (header), of the tensor and of what cancels into it.
    const CancellingTerms terms = cancelling_terms(s, in, ref.att);
    const std::tuple<const char*, const Vec*, const Vec*, double> tensors[] = {
        {"out", &fl.out, &ref.out, terms.out},
        {"dq", &fl.dq, &ref.dq, terms.dq},
        {"dk", &fl.dk, &ref.dk, terms.dk},
        {"dv", &fl.dv, &ref.dv, terms.dv}};
    for (const auto& [name, flash, reference, cancelling] : tensors) {
      const double err = max_diff(*flash, *reference), scale = max_abs(*reference);
      INFO(name << ": max |flash - reference| " << err << ", max |reference| " << scale
                << ", cancelling terms " << cancelling);
      CHECK(err <= 1e-12 * (scale + cancelling));
      // At T = 1 the softmax is the constant 1: dq and dk are exactly 0 in both.
      if (s.T > 1 || std::string(name) == "out" || std::string(name) == "dv") CHECK(scale > 0);
      // Negative control: flash's result 1e-9 off (far below any wrong tile or rescale)
      // must be outside the bound, as it is while the cancelling terms stay under 1000
      // times the result's scale.
      if (scale > 0) {
        Vec off = *flash;
        for (double& x : off) x *= 1 + 1e-9;
        CHECK_FALSE(max_diff(off, *reference) <= 1e-12 * (scale + cancelling));
      }
    }

    // The logsumexp: L_t = log sum_{u<=t} e^{s_tu}, evaluated in long double, and
    // e^{s_tu - L_t} must give back the reference's probabilities (0 above the diagonal
    // is the reference's mask, which flash never computes).
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.NH; ++h)
        for (int t = 0; t < s.T; ++t) {
          std::vector<LD> sc(size_t(t) + 1);
          LD mx = -std::numeric_limits<LD>::infinity(), Z = 0;
          for (int u = 0; u <= t; ++u) mx = std::max(mx, sc[size_t(u)] = score(in.qkv, s, b, h, t, u));
          for (int u = 0; u <= t; ++u) Z += std::exp(sc[size_t(u)] - mx);
          const LD lse = mx + std::log(Z);
          const double L = fl.lse[(size_t(b) * s.NH + h) * s.T + t];
          INFO("lse b " << b << " h " << h << " t " << t << ": " << L << " exact " << double(lse));
          CHECK(std::fabs(LD(L) - lse) <= LD(1e-12) * std::max(LD(1), std::fabs(lse)));
          // Negative control: L 1e-9 off (relative, or absolute where |L| < 1) is outside.
          const LD L_off = LD(L) + LD(1e-9) * std::max(LD(1), std::fabs(LD(L)));
          CHECK_FALSE(std::fabs(L_off - lse) <= LD(1e-12) * std::max(LD(1), std::fabs(lse)));
          const double* p = ref.att.data() + ((size_t(b) * s.NH + h) * s.T + t) * s.T;
          for (int u = 0; u <= t; ++u) {
            const LD prob = std::exp(sc[size_t(u)] - LD(L));
            CHECK(std::fabs(prob - LD(p[u])) <= LD(1e-12) * LD(p[u]));
          }
        }

    check_counts(fl.fwd, s, "forward");
    check_counts(fl.bwd, s, "backward");
  }
}

TEST_CASE("ops: flash attention in float is as accurate as the reference in float",
          "[ops][flash_attention]") {
  // The shapes above plus a longer sequence, where the float sums are longest.
  std::vector<Shape> shapes = kShapes;
  shapes.push_back({1, 128, 2, 64, 16, 16});
  shapes.push_back({2, 100, 3, 16, 32, 8});
  constexpr double eps32 = std::numeric_limits<float>::epsilon();
  for (size_t n = 0; n < shapes.size(); ++n) {
    const Shape& s = shapes[n];
    INFO(describe(s));
    const Inputs in = make_inputs(s, 9200 + n);
    const Result truth = run_reference<double>(s, in);
    const Result ref = run_reference<float>(s, in);
    const Result fl = run_flash<float>(s, in);
    const Result fl64 = run_flash<double>(s, in);

    const CancellingTerms terms = cancelling_terms(s, in, truth.att);
    const std::tuple<const char*, const Vec Result::*, double> tensors[] = {
        {"out", &Result::out, terms.out},
        {"dq", &Result::dq, terms.dq},
        {"dk", &Result::dk, terms.dk},
        {"dv", &Result::dv, terms.dv}};
    for (const auto& [name, member, cancelling] : tensors) {
      const double err_flash = max_diff(fl.*member, truth.*member);
      const double err_ref = max_diff(ref.*member, truth.*member);
      const double floor = eps32 * (max_abs(truth.*member) + cancelling);
      INFO(name << ": float error flash " << err_flash << ", reference " << err_ref
                << ", floor " << floor << ", ratio " << err_flash / (4 * err_ref + floor));
      CHECK(err_flash <= 4 * err_ref + floor);
      // Negative control: flash's result 1e-3 off (a scale error far below what a wrong
      // tile, mask or rescale does) must be outside the bound. (The floor's cancelling
      // terms are a worst case: where a sum cancels heavily, as dv's at T 64, the bound
      // sits a few hundred times above the error, near 1e-4 of the result.) A tensor
      // that is exactly zero (dq and dk at T = 1) has no scale to be off by.
      if (max_abs(truth.*member) > 0) {
        Vec off = fl.*member;
        for (double& x : off) x *= 1 + 1e-3;
        CHECK_FALSE(max_diff(off, truth.*member) <= 4 * err_ref + floor);
      }
    }

    // The logsumexp, against flash in double (equal to the exact value to 1e-12, previous
    // test). Its float baseline is the unblocked computation written out here: float
    // scores, their max m, l = sum e^{s - m}, m + log l, in the reference's order.
    {
      const auto q32 = cast<float>(in.qkv);
      const size_t C = size_t(s.NH) * s.hs, row = 3 * C;
      const float scale = 1.0f / std::sqrt(float(s.hs));
      Vec base;
      for (int b = 0; b < s.B; ++b)
        for (int h = 0; h < s.NH; ++h)
          for (int t = 0; t < s.T; ++t) {
            std::vector<float> sc(size_t(t) + 1);
            float m = -INFINITY, l = 0;
            for (int u = 0; u <= t; ++u) {
              const float* q = q32.data() + (size_t(b) * s.T + t) * row + size_t(h) * s.hs;
              const float* k = q32.data() + (size_t(b) * s.T + u) * row + C + size_t(h) * s.hs;
              float dot = 0;
              for (int i = 0; i < s.hs; ++i) dot += q[i] * k[i];
              m = std::max(m, sc[size_t(u)] = dot * scale);
            }
            for (float x : sc) l += std::exp(x - m);
            base.push_back(double(m + std::log(l)));
          }
      const double err_flash = max_diff(fl.lse, fl64.lse), err_base = max_diff(base, fl64.lse);
      const double floor = eps32 * max_abs(fl64.lse);
      INFO("lse: float error flash " << err_flash << ", unblocked " << err_base << ", floor "
                                     << floor);
      CHECK(err_flash <= 4 * err_base + floor);
      // Negative control: every logsumexp 1e-3 of the largest off must be outside.
      Vec off = fl.lse;
      for (double& x : off) x += 1e-3 * max_abs(fl64.lse);
      CHECK_FALSE(max_diff(off, fl64.lse) <= 4 * err_base + floor);
    }
  }
}

TEST_CASE("ops: flash attention skips the tiles above the causal diagonal",
          "[ops][flash_attention]") {
  // T = 256 in tiles of 16: 16 x 16 tiles, of which 16 * 17 / 2 = 136 touch the causal
  // triangle; with 32-row query tiles, query tile i sees key tiles 0 .. 2i+1: 72 of 128.
  // The scores computed are exactly the T (T + 1) / 2 causal pairs.
  struct Case {
    int Br, Bc;
    int64_t visited;
  };
  for (const Case& c : {Case{16, 16, 136}, Case{32, 16, 72}, Case{16, 32, 72}}) {
    const Shape s{1, 256, 1, 8, c.Br, c.Bc};
    INFO(describe(s));
    const Inputs in = make_inputs(s, 9300);
    const Result fl = run_flash<float>(s, in);
    CHECK(fl.fwd.tiles_visited == c.visited);
    CHECK(fl.bwd.tiles_visited == c.visited);
    check_counts(fl.fwd, s, "forward");
    check_counts(fl.bwd, s, "backward");
  }
}

TEST_CASE("ops: flash attention backward accumulates and is deterministic",
          "[ops][flash_attention]") {
  const Shape s{2, 37, 3, 16, 16, 8};
  const int C = s.NH * s.hs;
  const Inputs in = make_inputs(s, 9400);
  const auto qkv = cast<float>(in.qkv), dout = cast<float>(in.dout);
  std::vector<float> out(size_t(s.B) * s.T * C), lse(size_t(s.B) * s.NH * s.T);
  cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, C, s.NH, s.Br, s.Bc);
  auto backward = [&](std::vector<float>& dqkv) {
    cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                  s.B, s.T, C, s.NH, s.Br, s.Bc);
  };
  std::vector<float> once(qkv.size(), 0.0f), twice(qkv.size(), 0.0f);
  backward(once);
  backward(twice);
  backward(twice);
  // g + g = 2g exactly in floating point: the second call must add the same bits.
  for (size_t i = 0; i < once.size(); ++i) REQUIRE(twice[i] == 2 * once[i]);

#ifdef _OPENMP
  // Same bits whatever the thread count: every element is summed by one thread in a
  // fixed order, no atomics.
  const int threads = omp_get_max_threads();
  for (int n : {1, 3}) {
    omp_set_num_threads(n);
    std::vector<float> other(qkv.size(), 0.0f), out2(out.size()), lse2(lse.size());
    cpu::flash_attention_forward(out2.data(), lse2.data(), qkv.data(), s.B, s.T, C, s.NH, s.Br,
                                 s.Bc);
    backward(other);
    CHECK(out2 == out);
    CHECK(lse2 == lse);
    CHECK(other == once);
  }
  omp_set_num_threads(threads);
#endif
}

// Causality holds for every value, finite or not: an infinite key, value or upstream
// gradient at token u reaches only the rows the mask lets it reach. The kernel sums tiles
// as small matrix products over groups of rows; a row must never take a product with a
// key (or, in dK and dV, a query row) outside its own causal range, since a zero
// coefficient times an infinite value is NaN. Checked where the tiles put u inside a
// group with rows that do not see it: T = 13 in tiles of 1 to 16, u = 6. Controls: the
// rows that do see u come out non-finite (the injected value took effect).
TEST_CASE("ops: flash attention keeps an infinite key, value or gradient behind the causal mask",
          "[ops][flash_attention]") {
  const int T = 13, u = 6;
  for (const int hs : {16, 64})
    for (const auto& [Br, Bc] : {std::pair{1, 1}, {3, 5}, {4, 4}, {8, 8}, {16, 16}}) {
      INFO("hs " << hs << " Br " << Br << " Bc " << Bc);
      const Shape s{1, T, 2, hs, Br, Bc};
      const int C = s.NH * s.hs;
      const Inputs in = make_inputs(s, 9500);
      enum What { key, value, gradient };
      for (const What what : {key, value, gradient}) {
        INFO("infinite " << (what == key ? "key" : what == value ? "value" : "upstream gradient"));
        auto qkv = cast<float>(in.qkv), dout = cast<float>(in.dout);
        const float inf = std::numeric_limits<float>::infinity();
        if (what == key) qkv[size_t(u) * 3 * C + C] = inf;  // k of token u, head 0, dimension 0
        if (what == value) qkv[size_t(u) * 3 * C + 2 * C] = inf;
        if (what == gradient) dout[size_t(u) * C] = inf;
        std::vector<float> out(size_t(T) * C), lse(size_t(s.NH) * T), dqkv(qkv.size(), 0.0f);
        cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), 1, T, C, s.NH, Br, Bc);
        cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), 1, T, C, s.NH,
                                      Br, Bc);
        // Head 0's row t of a [T, rows x C] tensor at column offset `part`, all finite?
        auto finite_row = [&](const std::vector<float>& x, size_t row_len, size_t part, int t) {
          for (int i = 0; i < hs; ++i)
            if (!std::isfinite(x[size_t(t) * row_len + part + size_t(i)])) return false;
          return true;
        };
        const size_t row3 = size_t(3) * C;
        for (int t = 0; t < T; ++t) {
          INFO("token " << t);
          if (t < u) {  // rows before u see neither its key nor its value
            CHECK(finite_row(out, size_t(C), 0, t));
            CHECK(std::isfinite(lse[size_t(t)]));
          }
          if (what != gradient && t < u) CHECK(finite_row(dqkv, row3, 0, t));  // dq: keys up to t only
          if (what == gradient && t != u) CHECK(finite_row(dqkv, row3, 0, t));  // dq_t: row t's own dO
          if (what == gradient && t > u) {  // dk, dv of a key after u: summed over rows >= t only
            CHECK(finite_row(dqkv, row3, size_t(C), t));
            CHECK(finite_row(dqkv, row3, size_t(2) * C, t));
          }
        }
        // Controls: what does see the infinite value is not finite.
        if (what == value) CHECK_FALSE(finite_row(out, size_t(C), 0, u));
        if (what == key) CHECK_FALSE(finite_row(dqkv, row3, 0, T - 1));
        if (what == gradient) CHECK_FALSE(finite_row(dqkv, row3, size_t(2) * C, u));
      }
    }
}
