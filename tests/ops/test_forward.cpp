// Forward ops against their definitions in kernels/ops.h, in double. The gradient
// checks prove that each backward is the derivative of its forward; these prove that
// the forward computes the right function in the first place (a GELU in erf form, a
// missing 1/sqrt(hs), a biased variance would all pass a gradient check).
//
// The reference is a direct transcription evaluated in long double (64-bit mantissa),
// so its own error is ~2^-11 of the kernel's and the bounds below are the kernel's
// first-order rounding-error bounds in double (e = eps_double), doubled.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/ops.h"
#include "tests/ops/gradcheck.h"

using gpt::Device;
using gpt::test::normal_vec;
using gpt::test::Rng;
using gpt::test::uniform_vec;
using gpt::test::Vec;
namespace ops = gpt::ops;
using LD = long double;

namespace {
constexpr Device kCPU = Device::CPU;
constexpr double e = std::numeric_limits<double>::epsilon();
}  // namespace

TEST_CASE("ops: embedding and residual forward are exact sums", "[ops][forward]") {
  const int B = 3, T = 4, C = 5, Vocab = 9;
  Rng rng(6001);
  std::vector<int32_t> tokens(B * T);
  for (auto& t : tokens) t = rng.below(Vocab);
  const Vec wte = normal_vec(size_t(Vocab) * C, rng), wpe = normal_vec(size_t(T) * C, rng);
  Vec out(size_t(B) * T * C);
  ops::embedding_forward(kCPU, out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        CHECK(out[(size_t(b) * T + t) * C + c] ==
              wte[size_t(tokens[size_t(b * T + t)]) * C + c] + wpe[size_t(t) * C + c]);

  const Vec a = normal_vec(33, rng), bb = normal_vec(33, rng);
  Vec sum(33);
  ops::residual_forward(kCPU, sum.data(), a.data(), bb.data(), sum.size());
  for (size_t i = 0; i < sum.size(); ++i) CHECK(sum[i] == a[i] + bb[i]);
}

TEST_CASE("ops: gelu forward is the tanh form", "[ops][forward]") {
  Rng rng(6002);
  Vec x = uniform_vec(200, rng, -6, 6);
  x[0] = 0, x[1] = 1e-8, x[2] = -30, x[3] = 30;
  Vec out(x.size());
  ops::gelu_forward(kCPU, out.data(), x.data(), x.size());
  size_t erf_rejected = 0;  // negative control: the erf form, 0.5 x (1 + erf(x / sqrt 2))
  for (size_t i = 0; i < x.size(); ++i) {
    const LD xi = x[i];
    const LD z = std::sqrt(LD(2) / LD(3.14159265358979323846264338327950288L)) *
                 (xi + LD(0.044715) * xi * xi * xi);
    const LD ref = LD(0.5) * xi * (1 + std::tanh(z));
    // z carries ~4e relative error, tanh' <= 1: |d tanh| <= 4e|z| + e; times 0.5|x|,
    // plus e|gelu| for the last product.
    const double tol = 2 * (0.5 * std::fabs(x[i]) * (4 * e * double(std::fabs(z)) + 2 * e) +
                            2 * e * double(std::fabs(ref)));
    INFO("x " << x[i] << " gelu " << out[i] << " reference " << double(ref));
    CHECK(std::fabs(LD(out[i]) - ref) <= LD(tol));
    const LD erf_form = LD(0.5) * xi * (1 + std::erf(xi / std::sqrt(LD(2))));
    erf_rejected += !(std::fabs(erf_form - ref) <= LD(tol));
  }
  CHECK(erf_rejected > 0);  // the bound tells the two forms apart
}

TEST_CASE("ops: layernorm forward is (x - mean) * rstd * w + b with the biased variance",
          "[ops][forward]") {
  const int N = 5, C = 70;
  Rng rng(6003);
  Vec inp(size_t(N) * C);
  for (int i = 0; i < N; ++i) {
    const double mu = rng.uniform(-3, 3), sigma = rng.uniform(0.01, 3);
    for (int c = 0; c < C; ++c) inp[size_t(i) * C + c] = mu + sigma * rng.normal();
  }
  const Vec w = normal_vec(size_t(C), rng), b = normal_vec(size_t(C), rng);
  Vec out(inp.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  ops::layernorm_forward(kCPU, out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                         b.data(), N, C);
  for (int i = 0; i < N; ++i) {
    const double* x = &inp[size_t(i) * C];
    LD m = 0, mabs = 0;
    for (int c = 0; c < C; ++c) m += x[c], mabs += std::fabs(x[c]);
    m /= C, mabs /= C;
    LD var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;  // biased (population) variance, as GPT-2 / PyTorch LayerNorm
    const LD s = 1 / std::sqrt(var + LD(1e-5));
    // Negative control: the unbiased variance (divided by C - 1) must miss rstd's bound.
    const LD s_unbiased = 1 / std::sqrt(var * C / (C - 1) + LD(1e-5));
    CHECK_FALSE(std::fabs(s_unbiased - s) <= LD(2 * (C / 2.0 + 4) * e) * s);
    // mean: summation error <= C e mean|x|; variance: relative (C + 4) e, plus the mean
    // error squared (second order); rstd relative (C/2 + 4) e.
    const double tol_m = 2 * (C + 1) * e * double(mabs);
    const double rel_s = 2 * (C / 2.0 + 4) * e;
    INFO("row " << i << " mean " << mean[size_t(i)] << " (" << double(m) << ") rstd "
                << rstd[size_t(i)] << " (" << double(s) << ")");
    CHECK(std::fabs(LD(mean[size_t(i)]) - m) <= LD(tol_m));
    CHECK(std::fabs(LD(rstd[size_t(i)]) - s) <= LD(rel_s) * s);
    for (int c = 0; c < C; ++c) {
      const LD xhat = (x[c] - m) * s;
      const LD ref = xhat * w[c] + b[c];
      // error of (x - m) is tol_m/2 + e|x - m|; times s|w|; plus rel_s |xhat w|; plus
      // e (|xhat w| + |b|) for the last product and sum.
      const double tol =
          2 * (double(s) * std::fabs(w[c]) * (tol_m / 2 + e * double(std::fabs(x[c] - m))) +
               (rel_s + 2 * e) * double(std::fabs(xhat * w[c])) + e * std::fabs(b[c]));
      INFO("column " << c << " out " << out[size_t(i) * C + c] << " reference " << double(ref));
      CHECK(std::fabs(LD(out[size_t(i) * C + c]) - ref) <= LD(tol));
    }
  }
}

TEST_CASE("ops: attention forward is causal softmax(q k^T / sqrt(hs)) v", "[ops][forward]") {
  const int B = 2, T = 7, C = 12, NH = 3, hs = C / NH;
  Rng rng(6004);
  const Vec qkv = normal_vec(size_t(B) * T * 3 * C, rng, 1.5);
  Vec out(size_t(B) * T * C), att(size_t(B) * NH * T * T, std::nan(""));
  // The reference of kernels/cpu/attention.cpp, whose probabilities are checked here; the
  // op (flash attention) is checked against it in test_flash_attention.cpp.
  gpt::cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  auto q = [&](int b, int t, int h, int d) { return LD(qkv[(size_t(b) * T + t) * 3 * C + h * hs + d]); };
  auto k = [&](int b, int t, int h, int d) { return LD(qkv[(size_t(b) * T + t) * 3 * C + C + h * hs + d]); };
  auto v = [&](int b, int t, int h, int d) { return LD(qkv[(size_t(b) * T + t) * 3 * C + 2 * C + h * hs + d]); };
  const LD scale = 1 / std::sqrt(LD(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<LD> s(size_t(t) + 1), p(size_t(t) + 1);
        LD mx = -1e300L, max_err_s = 0;
        for (int u = 0; u <= t; ++u) {
          LD dot = 0, dabs = 0;
          for (int d = 0; d < hs; ++d) dot += q(b, t, h, d) * k(b, u, h, d), dabs += std::fabs(q(b, t, h, d) * k(b, u, h, d));
          s[size_t(u)] = dot * scale;
          // score error: (hs + 2) e sum|q k| scale, then e |s| for subtracting the max
          max_err_s = std::max(max_err_s, LD(hs + 2) * LD(e) * dabs * scale + 2 * LD(e) * std::fabs(s[size_t(u)]));
          mx = std::max(mx, s[size_t(u)]);
        }
        LD Z = 0;
        for (int u = 0; u <= t; ++u) Z += (p[size_t(u)] = std::exp(s[size_t(u)] - mx));
        for (auto& pu : p) pu /= Z;
        // probabilities: relative 2 max_err_s (numerator and normaliser) + (T + 4) e
        const LD rel_p = 2 * max_err_s + LD(T + 4) * LD(e);
        const size_t arow = ((size_t(b) * NH + h) * T + t) * T;
        for (int u = 0; u < T; ++u) {
          INFO("att b " << b << " h " << h << " t " << t << " s " << u << ": " << att[arow + u]);
          if (u <= t)
            CHECK(std::fabs(LD(att[arow + u]) - p[size_t(u)]) <= 2 * rel_p * p[size_t(u)]);
          else
            CHECK(att[arow + u] == 0.0);  // masked: probability 0
        }
        for (int d = 0; d < hs; ++d) {
          LD o = 0, oabs = 0;
          for (int u = 0; u <= t; ++u) o += p[size_t(u)] * v(b, u, h, d), oabs += p[size_t(u)] * std::fabs(v(b, u, h, d));
          // out = sum_u p_u v_u: the probabilities' error plus (T + 1) e for the sum
          const LD tol = 2 * (rel_p + LD(T + 1) * LD(e)) * oabs;
          const double got = out[(size_t(b) * T + t) * C + h * hs + d];
          INFO("out b " << b << " t " << t << " h " << h << " d " << d << ": " << got
                        << " reference " << double(o));
          CHECK(std::fabs(LD(got) - o) <= tol);
        }
      }
}

TEST_CASE("ops: softmax_crossentropy forward is -log softmax at the target", "[ops][forward]") {
  const int N = 6, V = 29, Vp = 32;
  Rng rng(6005);
  Vec logits(size_t(N) * Vp, 0.0);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < V; ++j) logits[size_t(i) * Vp + j] = 4 * rng.normal();
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = rng.below(V);
  const double dloss = 0.125;
  Vec losses(static_cast<size_t>(N)), dlogits(logits.size());
  ops::softmax_crossentropy(kCPU, losses.data(), dlogits.data(), logits.data(), targets.data(),
                            dloss, N, V, Vp);
  for (int i = 0; i < N; ++i) {
    const double* x = &logits[size_t(i) * Vp];
    LD mx = x[0], xmax_abs = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, LD(x[j])), xmax_abs = std::max(xmax_abs, LD(std::fabs(x[j])));
    LD Z = 0;
    for (int j = 0; j < V; ++j) Z += std::exp(LD(x[j]) - mx);
    const LD loss = std::log(Z) + mx - x[targets[size_t(i)]];
    // x - max: e|x - max| <= 2e max|x|; exp and the sum: (V + 4) e relative; log and
    // the final additions: e (|log Z| + |loss| + 2 max|x|).
    const LD tol = 2 * LD(e) * (4 * xmax_abs + (V + 4) + std::fabs(std::log(Z)) + std::fabs(loss));
    INFO("row " << i << " loss " << losses[size_t(i)] << " reference " << double(loss));
    CHECK(std::fabs(LD(losses[size_t(i)]) - loss) <= tol);
    for (int j = 0; j < V; ++j) {
      const LD p = std::exp(LD(x[j]) - mx) / Z;
      const LD ref = LD(dloss) * (p - (j == targets[size_t(i)] ? 1 : 0));
      // p: relative 4e max|x| (the exponent) + (V + 6) e; then p - y and the product.
      const LD tolg = 2 * LD(dloss) * LD(e) * ((4 * xmax_abs + V + 6) * p + 2);
      INFO("column " << j << " dlogits " << dlogits[size_t(i) * Vp + j] << " reference " << double(ref));
      CHECK(std::fabs(LD(dlogits[size_t(i) * Vp + j]) - ref) <= tolg);
    }
  }
}
