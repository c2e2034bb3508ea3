// Ring attention (stages/10_context_parallel) against single-rank causal attention in
// double, on the ranks of `mpirun -np CP`: output, logsumexp, dQ, dK and dV of every
// rank's chunks, for T in {2 cp (every chunk a single token: each mask case), 40, 96},
// both splits; and the attention work per rank: equal with zigzag, the contiguous
// split's imbalance printed.
//
// Tolerance: the ring regroups each row's softmax sum into at most 2 cp blocks merged
// through logsumexps, and dK, dV into sums over ranks; every compared value moves by a
// few T * 1.1e-16 relative to the magnitudes summed, so normwise 1e-12 holds with room,
// while a wrong position offset, a dropped block or a misrouted dK is of order 1.
// Negative control: rank 0's copy of one token's q, k and v scrambled must be rejected.
//
// Like comm_test, no Catch2: every rank runs every check and the failures are summed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/error.h"
#include "kernels/ops.h"
#include "stages/10_context_parallel/context_split.h"
#include "stages/10_context_parallel/ring_attention.h"
#include "tests/rank_checks.h"

using namespace gpt;
using Vec = std::vector<double>;
using gpt::test::RankChecks;
using gpt::test::sci;

namespace {

constexpr double kTol = 1e-12;
constexpr int B = 2, NH = 3, hs = 8, W = NH * hs;
const PieceContext kCtx{Device::CPU, Precision::FP64};
RankChecks g_checks;
void expect(bool ok, const std::string& what) { g_checks.expect(ok, what); }
double normwise(const Vec& got, const Vec& want) { return gpt::test::normwise(got.data(), want.data(), want.size()); }
Vec random_vec(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// This rank's rows of a (B, T, width) tensor, in the order of its chunks.
Vec take_rows(const ContextSplit& split, const Vec& whole, int T, int width) {
  Vec part;
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < split.chunks(); ++c) {
      const size_t first = (size_t(b) * T + size_t(split.chunk_start(split.rank(), c))) * width;
      part.insert(part.end(), whole.begin() + int64_t(first), whole.begin() + int64_t(first + size_t(split.chunk_len()) * width));
    }
  return part;
}

struct Outcome {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
  double worst() const { return std::max({out, lse, dq, dk, dv}); }
};

Outcome run(Communicator& cp, int T, bool zigzag, bool corrupt) {
  ContextSplit split(cp.size(), cp.rank(), zigzag, T);
  const int Tl = split.local_len(T), Tc = split.chunk_len(), nc = split.chunks();
  const Vec qkv = random_vec(size_t(B) * T * 3 * W, 7 + uint64_t(T)), dout = random_vec(size_t(B) * T * W, 9 + uint64_t(T));
  // Whole attention on every rank (the reference).
  Vec out(size_t(B) * T * W), lse(ops::attention_stats_size(Device::CPU, B, T, NH)), dqkv(qkv.size(), 0.0);
  ops::attention_forward(Device::CPU, out.data(), lse.data(), qkv.data(), B, T, W, NH);
  ops::attention_backward(Device::CPU, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, W, NH);
  // The ring on this rank's chunks.
  Vec my_qkv = take_rows(split, qkv, T, 3 * W), my_dout = take_rows(split, dout, T, W);
  if (corrupt && cp.rank() == 0) std::reverse(my_qkv.begin(), my_qkv.begin() + 3 * W);  // one token's q, k, v scrambled
  std::unique_ptr<Communicator> tp = cp.split(cp.rank(), 0);  // a tensor-parallel group of one
  RingAttentionHooks<double> ring(*tp, false, cp, split, Device::CPU);
  Vec my_out(size_t(B) * Tl * W), my_lse(size_t(B) * NH * Tl), my_dqkv(my_qkv.size(), 0.0);
  ring.attention_forward(kCtx, my_out.data(), my_lse.data(), my_qkv.data(), B, Tl, W, NH);
  ring.attention_backward(kCtx, my_dqkv.data(), my_dout.data(), my_qkv.data(), my_out.data(), my_lse.data(), B, Tl, W,
                          NH);
  Outcome o;
  o.out = normwise(my_out, take_rows(split, out, T, W));
  // The ring keeps lse as (B, chunk, head, Tc); the reference as (B, head, T).
  Vec want_lse;
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < nc; ++c)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < Tc; ++t)
          want_lse.push_back(lse[(size_t(b) * NH + h) * T + size_t(split.chunk_start(split.rank(), c) + t)]);
  o.lse = normwise(my_lse, want_lse);
  const Vec want = take_rows(split, dqkv, T, 3 * W);
  Vec got_q, got_k, got_v, want_q, want_k, want_v;
  for (size_t row = 0; row < want.size() / (3 * W); ++row)
    for (int i = 0; i < W; ++i) {
      got_q.push_back(my_dqkv[row * 3 * W + i]), want_q.push_back(want[row * 3 * W + i]);
      got_k.push_back(my_dqkv[row * 3 * W + W + i]), want_k.push_back(want[row * 3 * W + W + i]);
      got_v.push_back(my_dqkv[row * 3 * W + 2 * W + i]), want_v.push_back(want[row * 3 * W + 2 * W + i]);
    }
  o.dq = normwise(got_q, want_q), o.dk = normwise(got_k, want_k), o.dv = normwise(got_v, want_v);
  // The work this rank's forward computed equals what the split says it should.
  expect(ring.pairs() == int64_t(B) * split.work(split.rank()),
         "T " + std::to_string(T) + ": visible pairs " + std::to_string(ring.pairs()) + ", split says " +
             std::to_string(B * split.work(split.rank())));
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main("ring_attention_test", [&] {
    std::unique_ptr<Communicator> world = make_world(&argc, &argv, {"auto", Device::CPU, 60.0});
    test::require_world_size(*world, "ring_attention_test");
    Communicator& cp = *world;
    g_checks.rank = cp.rank();
    const int p = cp.size();
    for (bool zigzag : {true, false})
      for (int T : {2 * p, 40, 96}) {
        if (T % (2 * p) != 0) continue;  // 40 does not split into 6 chunks: cp = 3 skips it
        const std::string what = std::string(zigzag ? "zigzag" : "contiguous") + " T " + std::to_string(T);
        const Outcome o = run(cp, T, zigzag, false);
        expect(o.out <= kTol, what + ": output " + sci(o.out));
        expect(o.lse <= kTol, what + ": logsumexp " + sci(o.lse));
        expect(o.dq <= kTol, what + ": dQ " + sci(o.dq));
        expect(o.dk <= kTol, what + ": dK " + sci(o.dk));
        expect(o.dv <= kTol, what + ": dV " + sci(o.dv));
        if (T == 40 || (T == 96 && p == 3)) {
          double bad = run(cp, T, zigzag, true).worst();
          cp.all_reduce(&bad, 1, DType::F64);  // rank 0's scrambled token shows on some rank
          expect(bad > 1e-3, what + ": negative control (one token scrambled on rank 0) accepted: " + sci(bad));
        }
      }
    // The work per rank: zigzag equal on every rank; the contiguous split's imbalance.
    for (int T : {96}) {
      const ContextSplit zig(p, 0, true, T), flat(p, 0, false, T);
      int64_t zmax = 0, zsum = 0, fmax = 0, fsum = 0;
      for (int r = 0; r < p; ++r) {
        zmax = std::max(zmax, zig.work(r)), zsum += zig.work(r);
        fmax = std::max(fmax, flat.work(r)), fsum += flat.work(r);
      }
      expect(zmax * p == zsum, "zigzag work differs between ranks");
      if (cp.rank() == 0)
        std::printf("cp %d, T %d: attention work slowest/mean zigzag %.3f, contiguous %.3f\n", p, T,
                    double(zmax) * p / double(zsum), double(fmax) * p / double(fsum));
    }
    return g_checks.finish(cp, "ring_attention_test");
  });
}
