// Ring attention (stages/10_context_parallel) against single-rank causal attention in
// double, on the ranks of `mpirun -np CP`: output, logsumexp, dQ, dK and dV of every
// rank's chunks, for T in {2 cp (every chunk a single token: each mask case), 40, 96},
// both splits; the bf16 ring against the float ring, bit for bit (bf16_mismatches); and
// the attention work per rank: equal with zigzag, the contiguous split's imbalance printed.
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
#include "kernels/cpu/bf16.h"
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

// bf16 storage: RingAttentionHooks<bf16> widens what it reads, computes in fp32 exactly
// what RingAttentionHooks<float> computes on the same values, and rounds what it stores
// once. So on bf16 inputs (and, in backward, the forward's output rounded to bf16, as a
// stage storing bf16 keeps it) its output and dQ, dK, dV must be the bf16 rounding of the
// float ring's, and its logsumexps (fp32) the float ring's, bit for bit. With `corrupt`
// the float ring runs with rank 0's first token scrambled: the negative control, which
// must not match. Returns this rank's count of differing values.
int64_t bf16_mismatches(Communicator& cp, int T, bool zigzag, bool corrupt) {
  ContextSplit split(cp.size(), cp.rank(), zigzag, T);
  const int Tl = split.local_len(T);
  const auto round16 = [](const Vec& v) {  // bf16 values, as float and as bf16
    std::vector<float> f(v.size());
    std::vector<bf16> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i].bits = cpu::bf16_bits(float(v[i])), f[i] = cpu::bf16_to_float(b[i].bits);
    return std::make_pair(f, b);
  };
  const Vec whole_qkv = random_vec(size_t(B) * T * 3 * W, 17 + uint64_t(T));
  const Vec whole_dout = random_vec(size_t(B) * T * W, 19 + uint64_t(T));
  auto [qkv32, qkv16] = round16(take_rows(split, whole_qkv, T, 3 * W));
  auto [dout32, dout16] = round16(take_rows(split, whole_dout, T, W));
  std::unique_ptr<Communicator> tp = cp.split(cp.rank(), 0);
  const PieceContext ctx{Device::CPU, Precision::BF16};
  // The float ring on the same values (rank 0's first token scrambled for the control).
  std::vector<float> ref_qkv = qkv32;
  if (corrupt && cp.rank() == 0) std::reverse(ref_qkv.begin(), ref_qkv.begin() + 3 * W);
  RingAttentionHooks<float> ring32(*tp, false, cp, split, Device::CPU);
  std::vector<float> out32(size_t(B) * Tl * W), lse32(size_t(B) * NH * Tl), dqkv32(qkv32.size(), 0.0f);
  ring32.attention_forward(ctx, out32.data(), lse32.data(), ref_qkv.data(), B, Tl, W, NH);
  for (float& x : out32) x = cpu::bf16_round(x);  // what a bf16 stage keeps of it
  ring32.attention_backward(ctx, dqkv32.data(), dout32.data(), ref_qkv.data(), out32.data(), lse32.data(), B, Tl, W,
                            NH);
  // The bf16 ring.
  RingAttentionHooks<bf16> ring16(*tp, false, cp, split, Device::CPU);
  std::vector<bf16> out16(out32.size()), dqkv16(qkv16.size(), bf16{});
  std::vector<float> lse16(lse32.size());
  ring16.attention_forward(ctx, out16.data(), lse16.data(), qkv16.data(), B, Tl, W, NH);
  ring16.attention_backward(ctx, dqkv16.data(), dout16.data(), qkv16.data(), out16.data(), lse16.data(), B, Tl, W,
                            NH);
  int64_t differ = 0;
  for (size_t i = 0; i < out16.size(); ++i) differ += out16[i].bits != cpu::bf16_bits(out32[i]);
  for (size_t i = 0; i < lse16.size(); ++i) differ += lse16[i] != lse32[i];
  for (size_t i = 0; i < dqkv16.size(); ++i) differ += dqkv16[i].bits != cpu::bf16_bits(dqkv32[i]);
  return differ;
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
    // bf16 storage: the bf16 ring against the float ring's rounding, bit for bit.
    for (bool zigzag : {true, false}) {
      const int T = 8 * p;  // 4 tokens a chunk
      const std::string what = std::string("bf16, ") + (zigzag ? "zigzag" : "contiguous") + " T " + std::to_string(T);
      double differ = double(bf16_mismatches(cp, T, zigzag, false));
      double control = double(bf16_mismatches(cp, T, zigzag, true));
      cp.all_reduce(&differ, 1, DType::F64), cp.all_reduce(&control, 1, DType::F64);
      expect(differ == 0, what + ": " + sci(differ) + " values differ from the float ring's, rounded");
      expect(control > 0, what + ": negative control (one token scrambled on rank 0) accepted");
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
