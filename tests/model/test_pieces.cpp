// The pieces split over simulated ranks (threads with a barrier standing in for the
// collectives) against the whole pieces, in double.
//
// Embedding: with the vocabulary split into ranges, exactly one range holds a token's
// row, the others add zeros, and positions are added on one range only: the sum over
// ranges is the whole embedding bit for bit (x + 0 = x), and the gradients of the rows
// and positions are the whole gradients' slices bit for bit (the same sums in the same
// order). The negative control leaves one range out.
//
// Cross-entropy: 8 ranges of 32 columns of Vp = 256, V = 200, so ranges 7 (224..255)
// and part of 6 hold only padding. The whole loss sums 200 exponentials in one order,
// the split one per range then across ranges after rescaling; in double each side's
// log-sum-exp is within a few V eps (V eps = 2.2e-14) of exact relative to the sum, so
// losses and gradients must agree within 1e-12 (relative to the loss, absolute on the
// gradient whose entries are probabilities <= 1). The negative control sums the ranges'
// exponential sums without rescaling them to the common max.
//
// On one rank the head keeps each row's statistics in its loss and makes the gradient
// from them in one pass: the fused softmax_crossentropy's numbers bit for bit, in float,
// double and bf16 (the same max, the same sum in the same order, the same quotient). The
// negative control, a gradient 1.001x too large (dloss off by that factor), must differ.
#include <catch2/catch.hpp>

#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "common/model_embedding.h"
#include "common/model_head.h"
#include "tests/model/model_fixture.h"
#include "tests/ops/gradcheck.h"

using namespace gpt;
using gpt::test::normal_vec;
using gpt::test::Rng;
using gpt::test::Vec;

namespace {

const PieceContext kCtx{Device::CPU, Precision::FP32};

// Runs body(rank) on `ranks` threads at once.
void on_ranks(int ranks, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

// Vocabulary-parallel hooks of simulated ranks: vocab_reduce publishes this rank's row
// statistics, waits for all, and combines them as tensor parallelism would.
struct SimulatedVocabHooks : ModelHooks<double> {
  struct Shared {
    explicit Shared(int ranks, int rows)
        : sync(ranks), max(size_t(ranks), Vec(size_t(rows))), sum(max), target(max) {}
    std::barrier<> sync;
    std::vector<Vec> max, sum, target;
    bool rescale = true;  // false: the negative control's wrong combination
  };
  SimulatedVocabHooks(Shared& s, int r) : shared(s), rank(r) {}
  bool vocab_parallel() const override { return true; }
  void vocab_reduce(double* row_max, double* row_sumexp, double* target_logit, int rows) override {
    const size_t R = size_t(rows), ranks = shared.max.size();
    shared.max[size_t(rank)].assign(row_max, row_max + R);
    shared.sum[size_t(rank)].assign(row_sumexp, row_sumexp + R);
    shared.target[size_t(rank)].assign(target_logit, target_logit + R);
    shared.sync.arrive_and_wait();
    for (size_t i = 0; i < R; ++i) {
      double M = -INFINITY, S = 0, z = 0;
      for (size_t r = 0; r < ranks; ++r) M = std::max(M, shared.max[r][i]);
      for (size_t r = 0; r < ranks; ++r) {
        const double s = shared.sum[r][i];
        if (s > 0) S += shared.rescale ? s * std::exp(shared.max[r][i] - M) : s;
        z += shared.target[r][i];
      }
      row_max[i] = M, row_sumexp[i] = S, target_logit[i] = z;
    }
    shared.sync.arrive_and_wait();  // nobody publishes again before all have read
  }
  Shared& shared;
  int rank;
};

struct SplitLoss {
  Vec losses;   // rank 0's (every rank's must be equal)
  Vec dlogits;  // (N, Vp), the ranks' column ranges put together
  bool losses_agree = true, finite = true;
};

SplitLoss split_loss(const Vec& logits, const std::vector<int32_t>& targets, int N, int V, int Vp, int ranks,
                     bool rescale) {
  SimulatedVocabHooks::Shared shared(ranks, N);
  shared.rescale = rescale;
  const int per = Vp / ranks;
  std::vector<Vec> losses(static_cast<size_t>(ranks));
  SplitLoss out;
  out.dlogits.assign(size_t(N) * Vp, NAN);
  on_ranks(ranks, [&](int r) {
    SimulatedVocabHooks hooks(shared, r);
    const VocabRange vocab{r * per, (r + 1) * per};
    HeadActivations<double> act(Device::CPU, 4, N, N, vocab, /*train=*/true);
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < per; ++j) act.logits.data()[size_t(i) * per + j] = logits[size_t(i) * Vp + vocab.begin + j];
    head_loss(kCtx, act, targets.data(), vocab, V, hooks, N);
    head_loss_gradient(kCtx, act, targets.data(), vocab, V, hooks, N, /*dloss=*/1.0);
    losses[size_t(r)].assign(act.losses.data(), act.losses.data() + N);
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < per; ++j)
        out.dlogits[size_t(i) * Vp + vocab.begin + j] = act.d_logits.data()[size_t(i) * per + j];
  });
  out.losses = losses[0];
  for (const Vec& l : losses) out.losses_agree = out.losses_agree && l == losses[0];
  for (double x : out.dlogits) out.finite = out.finite && std::isfinite(x);
  for (double x : out.losses) out.finite = out.finite && std::isfinite(x);
  return out;
}

}  // namespace

TEST_CASE("model: a vocabulary-parallel cross-entropy equals the whole one", "[model]") {
  const int N = 6, V = 200, Vp = 256, ranks = 8;
  Rng rng(8101);
  const Vec logits = normal_vec(size_t(N) * Vp, rng, 3.0);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) targets[size_t(i)] = int32_t((i * 37 + 11) % V);  // in several ranges
  Vec whole_losses(static_cast<size_t>(N)), whole_d(size_t(N) * Vp);
  ops::softmax_crossentropy(Device::CPU, whole_losses.data(), whole_d.data(), logits.data(), targets.data(), 1.0, N, V,
                            Vp);

  const SplitLoss split = split_loss(logits, targets, N, V, Vp, ranks, true);
  CHECK(split.finite);  // the ranks holding only padding produce no NaN
  CHECK(split.losses_agree);
  for (int i = 0; i < N; ++i) {
    INFO("row " << i << ": split " << split.losses[size_t(i)] << " whole " << whole_losses[size_t(i)]);
    CHECK(std::fabs(split.losses[size_t(i)] - whole_losses[size_t(i)]) <= 1e-12 * std::fabs(whole_losses[size_t(i)]));
  }
  double worst = 0;
  for (size_t k = 0; k < whole_d.size(); ++k) worst = std::max(worst, std::fabs(split.dlogits[k] - whole_d[k]));
  INFO("worst |d split - d whole| " << worst);
  CHECK(worst <= 1e-12);
  for (int i = 0; i < N; ++i)
    for (int j = V; j < Vp; ++j) CHECK(split.dlogits[size_t(i) * Vp + j] == 0.0);  // padding: no gradient

  // Negative control: the exponential sums added without rescaling to the common max.
  const SplitLoss wrong = split_loss(logits, targets, N, V, Vp, ranks, false);
  double worst_loss = 0;
  for (int i = 0; i < N; ++i) worst_loss = std::max(worst_loss, std::fabs(wrong.losses[size_t(i)] - whole_losses[size_t(i)]));
  INFO("negative control: worst loss error " << worst_loss);
  CHECK(worst_loss > 1e-3);
}

TEMPLATE_TEST_CASE("model: the head's loss and gradient on one rank are the fused cross-entropy's, bit for bit",
                   "[model]", float, double, bf16) {
  using A = TestType;
  using G = GradOf<A>;
  const int N = 5, V = 200, Vp = 256;
  const double dloss = 1.0 / 7;
  Rng rng(8103);
  const Vec values = normal_vec(size_t(N) * Vp, rng, 3.0);
  std::vector<A> logits(values.size());
  for (size_t k = 0; k < values.size(); ++k) logits[k] = test::stored<A>(float(values[k]));
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) targets[size_t(i)] = int32_t((i * 37 + 11) % V);

  std::vector<G> fused_losses(static_cast<size_t>(N));
  std::vector<A> fused_d(logits.size());
  ops::softmax_crossentropy(Device::CPU, fused_losses.data(), fused_d.data(), logits.data(), targets.data(), dloss, N,
                            V, Vp);
  // The head's loss, then its gradient, from logits z.
  const PieceContext ctx{Device::CPU, Precision::FP32};
  auto head = [&](const std::vector<A>& z, double scale) {
    ModelHooks<A> one_rank;
    HeadActivations<A> act(Device::CPU, 4, N, N, VocabRange{0, Vp}, /*train=*/true);
    std::memcpy(act.logits.data(), z.data(), z.size() * sizeof(A));
    head_loss(ctx, act, targets.data(), VocabRange{0, Vp}, V, one_rank, N);
    const std::vector<G> losses(act.losses.data(), act.losses.data() + N);
    head_loss_gradient(ctx, act, targets.data(), VocabRange{0, Vp}, V, one_rank, N, scale);
    CHECK(test::same_bits(act.losses.data(), losses.data(), size_t(N)));  // the gradient's losses are the loss's
    return std::make_pair(losses, std::vector<A>(act.d_logits.data(), act.d_logits.data() + z.size()));
  };
  const auto [losses, d] = head(logits, dloss);
  CHECK(test::same_bits(losses.data(), fused_losses.data(), size_t(N)));
  CHECK(test::same_bits(d.data(), fused_d.data(), d.size()));

  const auto [control_losses, control_d] = head(logits, 1.001 * dloss);  // negative control
  CHECK_FALSE(test::same_bits(control_d.data(), fused_d.data(), d.size()));
}

TEST_CASE("model: a vocabulary-parallel embedding sums to the whole one, bit for bit", "[model]") {
  const int B = 2, T = 5, C = 8, Vp = 64, ranks = 4, per = Vp / ranks, pos0 = 3;
  Rng rng(8102);
  const Vec wte = normal_vec(size_t(Vp) * C, rng), wpe = normal_vec(size_t(T + pos0) * C, rng);
  const std::vector<int32_t> tokens = {0, 15, 16, 63, 31, 32, 47, 48, 5, 5};
  const Vec dout = normal_vec(size_t(B) * T * C, rng);

  // The whole embedding at positions pos0.., from the whole-vocabulary range.
  Vec whole(size_t(B) * T * C), whole_dwte(wte.size(), 0.0), whole_dwpe(wpe.size(), 0.0);
  embedding_piece_forward(kCtx, whole.data(), tokens.data(), wte.data(), VocabRange{0, Vp}, wpe.data(), pos0, B, T, C,
                          Vp);
  embedding_piece_backward(kCtx, whole_dwte.data(), whole_dwpe.data(), dout.data(), tokens.data(), VocabRange{0, Vp},
                           pos0, B, T, C, Vp);

  auto summed = [&](int skip) {
    Vec sum(whole.size(), 0.0), part(whole.size());
    for (int r = 0; r < ranks; ++r) {
      if (r == skip) continue;
      const VocabRange vocab{r * per, (r + 1) * per};
      embedding_piece_forward(kCtx, part.data(), tokens.data(), wte.data() + size_t(vocab.begin) * C, vocab,
                              r == 0 ? wpe.data() : nullptr, pos0, B, T, C, Vp);
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += part[k];
    }
    return sum;
  };
  CHECK(summed(-1) == whole);
  CHECK(summed(2) != whole);  // negative control: a range left out

  Vec dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  for (int r = 0; r < ranks; ++r) {
    const VocabRange vocab{r * per, (r + 1) * per};
    embedding_piece_backward(kCtx, dwte.data() + size_t(vocab.begin) * C, r == 0 ? dwpe.data() : nullptr, dout.data(),
                             tokens.data(), vocab, pos0, B, T, C, Vp);
  }
  CHECK(dwte == whole_dwte);
  CHECK(dwpe == whole_dwpe);
  double moved = 0;
  for (double x : whole_dwpe) moved += std::fabs(x);
  CHECK(moved > 0);  // the positions' gradient is not trivially zero
}
