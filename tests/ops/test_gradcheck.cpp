// Every op's backward against central finite differences of its forward, in double.
// The method and the tolerance are derived in gradcheck.h: objective L = sum(out * R)
// with a fixed random R (so the upstream gradient is R), h = 1e-6 * max(1, |x|), and
// |analytic - fd| <= 1e-7 * (|fd| + 1e-3 * scale) + noise_j, noise_j the round-off of
// the outputs that input j feeds (eps |L_affected| / h). Each op is called through
// gpt::ops with Device::CPU, the dispatch every stage uses.
//
// Backward ops accumulate (+=) into their gradient buffers (kernels/ops.h), except the
// input gradients of matmul and GELU, which they write. So the analytic gradient is taken
// from zeroed buffers, and a second test per op checks the contract itself: for an
// accumulated buffer two calls from zero give 2g and one call onto G0 gives G0 + g; for a
// written one a call onto random values gives the same bits as a call onto zeros.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "tests/ops/gradcheck.h"

using gpt::Device;
using gpt::test::check_gradient;
using gpt::test::normal_vec;
using gpt::test::Rng;
using gpt::test::uniform_vec;
using gpt::test::Vec;
namespace ops = gpt::ops;

namespace {

constexpr Device kCPU = Device::CPU;

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Accumulation contract of a backward op. `backward()` adds its gradient into the
// buffers listed in `grads`. From zero, two calls must give 2g; onto random G0, one
// call must give G0 + g. Not bitwise: a buffer that sums several contributions (a
// repeated token, a column sum) rounds differently when it starts from g instead of
// 0, by ~eps_double per addition, i.e. < 1e-12 of the tensor's scale; a kernel that
// overwrites instead of accumulating (or zeroes first) is off by |g| or |G0|.
template <class Backward>
void check_accumulates(std::vector<Vec*> grads, Backward&& backward, Rng& rng) {
  std::vector<Vec> g;
  for (Vec* b : grads) std::fill(b->begin(), b->end(), 0.0);
  backward();
  for (Vec* b : grads) g.push_back(*b);

  for (Vec* b : grads) std::fill(b->begin(), b->end(), 0.0);
  backward();
  backward();
  for (size_t k = 0; k < grads.size(); ++k) {
    const double tol = 1e-12 * max_abs(g[k]);
    double worst = 0;
    for (size_t i = 0; i < g[k].size(); ++i)
      worst = std::max(worst, std::fabs((*grads[k])[i] - 2 * g[k][i]));
    INFO("gradient buffer " << k << ": two calls from zero vs 2g, max |diff| " << worst
                            << " tol " << tol);
    CHECK(max_abs(g[k]) > 0);
    CHECK(worst <= tol);
  }

  std::vector<Vec> g0;
  for (Vec* b : grads) {
    *b = normal_vec(b->size(), rng);
    g0.push_back(*b);
  }
  backward();
  for (size_t k = 0; k < grads.size(); ++k) {
    const double tol = 1e-12 * (max_abs(g[k]) + max_abs(g0[k]));
    double worst = 0;
    for (size_t i = 0; i < g[k].size(); ++i)
      worst = std::max(worst, std::fabs((*grads[k])[i] - (g0[k][i] + g[k][i])));
    INFO("gradient buffer " << k << ": one call onto G0 vs G0 + g, max |diff| " << worst
                            << " tol " << tol);
    CHECK(worst <= tol);
  }
}

// Overwrite contract of an input's gradient (kernels/ops.h: matmul's dinp and GELU's are
// written, not added): one call onto zeros and one onto random G0 must give the same g,
// bit for bit, and g must not be all zero. A kernel that accumulates is off by |G0|.
template <class Backward>
void check_overwrites(std::vector<Vec*> grads, Backward&& backward, Rng& rng) {
  std::vector<Vec> g;
  for (Vec* b : grads) std::fill(b->begin(), b->end(), 0.0);
  backward();
  for (Vec* b : grads) g.push_back(*b);
  for (Vec* b : grads) *b = normal_vec(b->size(), rng);
  backward();
  for (size_t k = 0; k < grads.size(); ++k) {
    INFO("gradient buffer " << k << ": one call onto random values vs one onto zeros");
    CHECK(max_abs(g[k]) > 0);
    CHECK(*grads[k] == g[k]);
  }
}

}  // namespace

TEST_CASE("ops: embedding backward matches finite differences", "[ops][gradcheck]") {
  const int B = 2, T = 5, C = 6, Vocab = 7;
  Rng rng(101);
  std::vector<int32_t> tokens(B * T);
  for (auto& t : tokens) t = rng.below(Vocab);
  tokens[7] = tokens[2];  // a token used twice: its dwte row gets two contributions
  tokens[8] = tokens[2];
  Vec wte = normal_vec(size_t(Vocab) * C, rng), wpe = normal_vec(size_t(T) * C, rng);
  const Vec R = normal_vec(size_t(B) * T * C, rng);
  auto forward = [&](Vec& out) {
    ops::embedding_forward(kCPU, out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  };
  Vec dwte(wte.size()), dwpe(wpe.size());
  auto backward = [&] {
    ops::embedding_backward(kCPU, dwte.data(), dwpe.data(), R.data(), tokens.data(), B, T, C);
  };

  SECTION("gradients") {
    backward();  // buffers start at zero
    check_gradient("embedding dwte", wte, dwte, R, forward);
    check_gradient("embedding dwpe", wpe, dwpe, R, forward);
  }
  SECTION("backward accumulates") { check_accumulates({&dwte, &dwpe}, backward, rng); }
}

TEST_CASE("ops: layernorm backward matches finite differences", "[ops][gradcheck]") {
  // C = 12 is one row block; C = 70 crosses the 64-channel blocks of the dw/db sums.
  const int N = GENERATE(6, 3), C = N == 6 ? 12 : 70;
  Rng rng(uint64_t(200 + C));
  Vec inp(size_t(N) * C);
  for (int i = 0; i < N; ++i) {  // rows with a non-zero mean and different spreads
    const double mu = rng.uniform(-1, 1), sigma = rng.uniform(0.5, 2);
    for (int c = 0; c < C; ++c) inp[size_t(i) * C + c] = mu + sigma * rng.normal();
  }
  Vec w = uniform_vec(size_t(C), rng, 0.5, 1.5), b = normal_vec(size_t(C), rng);
  const Vec R = normal_vec(size_t(N) * C, rng);
  Vec mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  auto forward = [&](Vec& out) {
    ops::layernorm_forward(kCPU, out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                           b.data(), N, C);
  };
  Vec out(size_t(N) * C);
  forward(out);  // saves mean and rstd of the unperturbed input for backward
  const Vec mean0 = mean, rstd0 = rstd;
  Vec dinp(inp.size()), dw(w.size()), db(b.size());
  auto backward = [&] {
    ops::layernorm_backward(kCPU, dinp.data(), dw.data(), db.data(), R.data(), inp.data(),
                            w.data(), mean0.data(), rstd0.data(), N, C);
  };

  SECTION("gradients") {
    backward();
    check_gradient("layernorm dinp", inp, dinp, R, forward);
    check_gradient("layernorm dw", w, dw, R, forward);
    check_gradient("layernorm db", b, db, R, forward);
  }
  SECTION("backward accumulates") { check_accumulates({&dinp, &dw, &db}, backward, rng); }
}

TEST_CASE("ops: matmul backward matches finite differences", "[ops][gradcheck]") {
  // Small, and ragged around the GEMM's micro-tile (dimensions 10, 20, 17).
  const int shape = GENERATE(0, 1);
  const int N = shape == 0 ? 6 : 10, C = shape == 0 ? 9 : 20, OC = shape == 0 ? 11 : 17;
  const bool with_bias = GENERATE(true, false);
  Rng rng(uint64_t(300 + 2 * shape + with_bias));
  Vec inp = normal_vec(size_t(N) * C, rng), w = normal_vec(size_t(OC) * C, rng, 0.5);
  Vec bias = normal_vec(size_t(OC), rng);
  const Vec R = normal_vec(size_t(N) * OC, rng);
  auto forward = [&](Vec& out) {
    ops::matmul_forward(kCPU, out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr,
                        N, C, OC);
  };
  Vec dinp(inp.size()), dw(w.size()), dbias(bias.size());
  auto backward = [&] {
    ops::matmul_backward(kCPU, dinp.data(), dw.data(), with_bias ? dbias.data() : nullptr,
                         R.data(), inp.data(), w.data(), N, C, OC);
  };
  INFO("N " << N << " C " << C << " OC " << OC << " bias " << with_bias);

  SECTION("gradients") {
    backward();
    check_gradient("matmul dinp", inp, dinp, R, forward);
    check_gradient("matmul dw", w, dw, R, forward);
    if (with_bias) check_gradient("matmul dbias", bias, dbias, R, forward);
  }
  SECTION("backward accumulates dw and dbias") {
    if (with_bias)
      check_accumulates({&dw, &dbias}, backward, rng);
    else
      check_accumulates({&dw}, backward, rng);
  }
  SECTION("backward writes dinp") { check_overwrites({&dinp}, backward, rng); }
}

TEST_CASE("ops: attention backward matches finite differences", "[ops][gradcheck]") {
  // Causal, three heads of size 4, T = 7 (not a power of two).
  const int B = 2, T = 7, C = 12, NH = 3;
  Rng rng(401);
  Vec qkv = normal_vec(size_t(B) * T * 3 * C, rng);
  const Vec R = normal_vec(size_t(B) * T * C, rng);
  Vec att(size_t(B) * NH * T * T);
  auto forward = [&](Vec& out) {
    ops::attention_forward(kCPU, out.data(), att.data(), qkv.data(), B, T, C, NH);
  };
  Vec out(size_t(B) * T * C);
  forward(out);
  const Vec att0 = att;
  Vec dqkv(qkv.size());
  auto backward = [&] {
    ops::attention_backward(kCPU, dqkv.data(), R.data(), qkv.data(), out.data(), att0.data(), B, T, C, NH);
  };

  SECTION("gradients") {
    backward();
    check_gradient("attention dqkv", qkv, dqkv, R, forward);
  }
  SECTION("backward accumulates") { check_accumulates({&dqkv}, backward, rng); }
}

TEST_CASE("ops: gelu backward matches finite differences", "[ops][gradcheck]") {
  const size_t n = 64;
  Rng rng(501);
  Vec x = uniform_vec(n, rng, -5, 5);
  x[0] = 0, x[1] = 1e-3, x[2] = -1e-3, x[3] = 8, x[4] = -8;
  const Vec R = normal_vec(n, rng);
  auto forward = [&](Vec& out) { ops::gelu_forward(kCPU, out.data(), x.data(), n); };
  Vec dx(n);
  auto backward = [&] { ops::gelu_backward(kCPU, dx.data(), x.data(), R.data(), n); };

  SECTION("gradients") {
    backward();
    check_gradient("gelu dinp", x, dx, R, forward);
  }
  SECTION("backward writes dinp") { check_overwrites({&dx}, backward, rng); }
}

TEST_CASE("ops: residual backward matches finite differences", "[ops][gradcheck]") {
  const size_t n = 40;
  Rng rng(601);
  Vec a = normal_vec(n, rng), b = normal_vec(n, rng, 3);
  const Vec R = normal_vec(n, rng);
  auto forward = [&](Vec& out) { ops::residual_forward(kCPU, out.data(), a.data(), b.data(), n); };
  Vec da(n), db(n);
  auto backward = [&] { ops::residual_backward(kCPU, da.data(), db.data(), R.data(), n); };

  SECTION("gradients") {
    backward();
    check_gradient("residual da", a, da, R, forward);
    check_gradient("residual db", b, db, R, forward);
  }
  SECTION("backward accumulates") { check_accumulates({&da, &db}, backward, rng); }
}

TEST_CASE("ops: softmax_crossentropy dlogits match finite differences of the summed loss",
          "[ops][gradcheck]") {
  // V < Vp: columns [V, Vp) are padding. They hold a huge value that would dominate
  // the softmax if it were read; the contract says they are ignored.
  const int N = 5, V = 7, Vp = 10;
  Rng rng(701);
  Vec logits(size_t(N) * Vp);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < Vp; ++j) logits[size_t(i) * Vp + j] = j < V ? 2 * rng.normal() : 1e4;
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = rng.below(V);
  targets[0] = 0, targets[1] = V - 1;
  const Vec R(size_t(N), 1.0);  // L = sum of the per-row losses
  auto forward = [&](Vec& losses) {
    ops::softmax_crossentropy(kCPU, losses.data(), static_cast<double*>(nullptr), logits.data(),
                              targets.data(), 1.0, N, V, Vp);
  };
  Vec losses(static_cast<size_t>(N));
  // dlogits is overwritten (not accumulated): start it with NaN to prove it.
  Vec dlogits(logits.size(), std::nan(""));
  ops::softmax_crossentropy(kCPU, losses.data(), dlogits.data(), logits.data(), targets.data(),
                            1.0, N, V, Vp);

  check_gradient("softmax_crossentropy dlogits", logits, dlogits, R, forward);

  // Padding: exactly zero gradient, and changing a padded logit leaves every loss
  // bit-identical.
  for (int i = 0; i < N; ++i)
    for (int j = V; j < Vp; ++j) {
      INFO("row " << i << " padded column " << j);
      CHECK(dlogits[size_t(i) * Vp + j] == 0.0);
    }
  Vec base(static_cast<size_t>(N)), changed(static_cast<size_t>(N));
  forward(base);
  for (double pad : {-1e4, 0.0, 3.0, 1e300}) {
    for (int i = 0; i < N; ++i)
      for (int j = V; j < Vp; ++j) logits[size_t(i) * Vp + j] = pad;
    forward(changed);
    INFO("padding value " << pad);
    for (int i = 0; i < N; ++i) CHECK(changed[size_t(i)] == base[size_t(i)]);
  }
}
