// The ops in bf16 storage on the CPU (kernels/cpu/bf16_ops.h, reached through
// kernels/ops.h with A = bf16): each must give, bit for bit, the fp32 op on the same
// values with its bf16 outputs rounded once -- outputs it accumulates into included (they
// start from the same values in both), fp32 outputs (gradients of parameters, statistics)
// unrounded. Every op of ops.h that has a bf16 form is run, with shapes that leave
// ragged edges. Negative controls: the fused GELU of matmul_forward must be the GELU of
// the fp32 product, so the GELU of the rounded product has to differ; and the rounded
// output has to differ from the unrounded one (else rounding was never tested).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/ops.h"
#include "tests/ops/gradcheck.h"

using namespace gpt;
using gpt::test::Rng;

namespace {

constexpr Device kCpu = Device::CPU;

// A tensor held twice, as bf16 and as the fp32 values of those bf16s: the inputs of the
// two ops being compared.
struct Pair {
  std::vector<bf16> h;
  std::vector<float> f;
  bf16* hp() { return h.data(); }
  float* fp() { return f.data(); }
};

// n bf16 values of about `scale` (plus `offset`), and their fp32 twins.
Pair random(Rng& rng, size_t n, double scale, double offset = 0) {
  Pair p;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t bits = cpu::bf16_bits(float(offset + scale * rng.normal()));
    p.h.push_back(bf16{bits});
    p.f.push_back(cpu::bf16_to_float(bits));
  }
  return p;
}

// Whether every bf16 output is its fp32 counterpart rounded to bf16.
bool rounded_from(const std::vector<bf16>& got, const std::vector<float>& fp32) {
  if (got.size() != fp32.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i].bits != cpu::bf16_bits(fp32[i])) return false;
  return true;
}
// Sets the fp32 twin to the stored bf16 values: an output about to be an input again.
void stored(Pair& p) {
  for (size_t i = 0; i < p.h.size(); ++i) p.f[i] = cpu::bf16_to_float(p.h[i].bits);
}
// Whether two fp32 arrays hold the same bits.
bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
// Whether rounding changed anything: some fp32 output is not a bf16 value.
bool rounding_mattered(const std::vector<float>& fp32) {
  for (const float x : fp32)
    if (cpu::bf16_round(x) != x) return true;
  return false;
}

std::vector<int32_t> tokens(Rng& rng, size_t n, int V) {
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = rng.below(V);
  return t;
}

}  // namespace

TEST_CASE("ops: bf16 storage -- matmul, with the GELU of the fp32 product", "[ops][bf16]") {
  Rng rng(1);
  const int N = 19, C = 24, OC = 40;
  Pair inp = random(rng, size_t(N) * C, 1), w = random(rng, size_t(OC) * C, 0.2), bias = random(rng, OC, 0.1);
  Pair out = random(rng, size_t(N) * OC, 1), gelu = random(rng, size_t(N) * OC, 1);  // overwritten
  ops::matmul_forward(kCpu, out.hp(), inp.hp(), w.hp(), bias.hp(), N, C, OC, gelu.hp());
  ops::matmul_forward(kCpu, out.fp(), inp.fp(), w.fp(), bias.fp(), N, C, OC, gelu.fp());
  CHECK(rounded_from(out.h, out.f));
  CHECK(rounded_from(gelu.h, gelu.f));
  CHECK(rounding_mattered(out.f));
  // Control: the GELU of the rounded product is another result.
  std::vector<float> rounded_out(out.f.size()), gelu_of_rounded(out.f.size());
  for (size_t i = 0; i < out.f.size(); ++i) rounded_out[i] = cpu::bf16_round(out.f[i]);
  ops::gelu_forward(kCpu, gelu_of_rounded.data(), rounded_out.data(), rounded_out.size());
  CHECK_FALSE(rounded_from(gelu.h, gelu_of_rounded));

  // Backward: dinp is written (bf16), dw and dbias accumulate (fp32); each alone too.
  Pair dout = random(rng, size_t(N) * OC, 0.1);
  for (const int which : {0, 1, 2, 3}) {  // all three, then dinp, dw, dbias alone
    INFO("gradients " << which);
    Pair dinp = random(rng, size_t(N) * C, 0.1);
    std::vector<float> dw_h(size_t(OC) * C, 0.5f), dw_f = dw_h, db_h(size_t(OC), 0.25f), db_f = db_h;
    const bool with_dinp = which <= 1, with_dw = which == 0 || which == 2, with_db = which == 0 || which == 3;
    ops::matmul_backward(kCpu, with_dinp ? dinp.hp() : nullptr, with_dw ? dw_h.data() : nullptr,
                         with_db ? db_h.data() : nullptr, dout.hp(), inp.hp(), w.hp(), N, C, OC);
    ops::matmul_backward(kCpu, with_dinp ? dinp.fp() : nullptr, with_dw ? dw_f.data() : nullptr,
                         with_db ? db_f.data() : nullptr, dout.fp(), inp.fp(), w.fp(), N, C, OC);
    CHECK(rounded_from(dinp.h, dinp.f));
    CHECK(same(dw_h, dw_f));
    CHECK(same(db_h, db_f));
  }
}

TEST_CASE("ops: bf16 storage -- layernorm, GELU, residual, scale", "[ops][bf16]") {
  Rng rng(2);
  const int N = 13, C = 40;
  const size_t NC = size_t(N) * C;
  Pair x = random(rng, NC, 1.5, 0.3), w = random(rng, C, 0.2, 1), b = random(rng, C, 0.1);
  Pair y = random(rng, NC, 1);
  std::vector<float> mean_h(N), rstd_h(N), mean_f(N), rstd_f(N);
  ops::layernorm_forward(kCpu, y.hp(), mean_h.data(), rstd_h.data(), x.hp(), w.hp(), b.hp(), N, C);
  ops::layernorm_forward(kCpu, y.fp(), mean_f.data(), rstd_f.data(), x.fp(), w.fp(), b.fp(), N, C);
  CHECK(rounded_from(y.h, y.f));
  CHECK(same(mean_h, mean_f));
  CHECK(same(rstd_h, rstd_f));
  CHECK(rounding_mattered(y.f));
  stored(y);  // an input of the residual below

  Pair dy = random(rng, NC, 0.1), dx = random(rng, NC, 0.1);
  std::vector<float> dw_h(C, 1.0f), dw_f = dw_h, db_h(C, -1.0f), db_f = db_h;
  ops::layernorm_backward(kCpu, dx.hp(), dw_h.data(), db_h.data(), dy.hp(), x.hp(), w.hp(), mean_f.data(),
                          rstd_f.data(), N, C);
  ops::layernorm_backward(kCpu, dx.fp(), dw_f.data(), db_f.data(), dy.fp(), x.fp(), w.fp(), mean_f.data(),
                          rstd_f.data(), N, C);
  CHECK(rounded_from(dx.h, dx.f));
  CHECK(same(dw_h, dw_f));
  CHECK(same(db_h, db_f));

  Pair g = random(rng, NC, 1);
  ops::gelu_forward(kCpu, g.hp(), x.hp(), NC);
  ops::gelu_forward(kCpu, g.fp(), x.fp(), NC);
  CHECK(rounded_from(g.h, g.f));
  Pair dg = random(rng, NC, 0.1);
  ops::gelu_backward(kCpu, dg.hp(), x.hp(), dy.hp(), NC);
  ops::gelu_backward(kCpu, dg.fp(), x.fp(), dy.fp(), NC);
  CHECK(rounded_from(dg.h, dg.f));

  Pair sum = random(rng, NC, 1);
  ops::residual_forward(kCpu, sum.hp(), x.hp(), y.hp(), NC);
  ops::residual_forward(kCpu, sum.fp(), x.fp(), y.fp(), NC);
  CHECK(rounded_from(sum.h, sum.f));
  Pair da = random(rng, NC, 1), db2 = random(rng, NC, 1);
  ops::residual_backward(kCpu, da.hp(), db2.hp(), dy.hp(), NC);
  ops::residual_backward(kCpu, da.fp(), db2.fp(), dy.fp(), NC);
  CHECK(rounded_from(da.h, da.f));
  CHECK(rounded_from(db2.h, db2.f));

  ops::scale(kCpu, x.hp(), NC, 1.0 / 3);
  ops::scale(kCpu, x.fp(), NC, 1.0 / 3);
  CHECK(rounded_from(x.h, x.f));
  CHECK(rounding_mattered(x.f));
}

TEST_CASE("ops: bf16 storage -- embeddings, whole and by vocabulary range", "[ops][bf16]") {
  Rng rng(3);
  const int B = 2, T = 5, C = 12, V = 17, pos0 = 3, v0 = 4, v1 = 11;
  const size_t NC = size_t(B) * T * C;
  Pair wte = random(rng, size_t(V) * C, 1), wpe = random(rng, size_t(pos0 + T) * C, 1);
  const std::vector<int32_t> tok = tokens(rng, size_t(B) * T, V);
  Pair out = random(rng, NC, 1);
  ops::embedding_forward(kCpu, out.hp(), tok.data(), wte.hp(), wpe.hp(), B, T, C);
  ops::embedding_forward(kCpu, out.fp(), tok.data(), wte.fp(), wpe.fp(), B, T, C);
  CHECK(rounded_from(out.h, out.f));
  CHECK(rounding_mattered(out.f));
  // The range [v0, v1) with positions from pos0, and without positions.
  for (const bool with_positions : {true, false}) {
    INFO("positions " << with_positions);
    const bf16* wpe_h = with_positions ? wpe.hp() : nullptr;
    const float* wpe_f = with_positions ? wpe.fp() : nullptr;
    ops::embedding_range_forward(kCpu, out.hp(), tok.data(), wte.hp() + size_t(v0) * C, v0, v1, wpe_h, pos0, B, T,
                                 C);
    ops::embedding_range_forward(kCpu, out.fp(), tok.data(), wte.fp() + size_t(v0) * C, v0, v1, wpe_f, pos0, B, T,
                                 C);
    CHECK(rounded_from(out.h, out.f));
  }

  Pair dout = random(rng, NC, 0.1);
  std::vector<float> dwte_h(size_t(V) * C, 0.5f), dwte_f = dwte_h, dwpe_h(size_t(pos0 + T) * C, 0.5f),
      dwpe_f = dwpe_h;
  ops::embedding_backward(kCpu, dwte_h.data(), dwpe_h.data(), dout.hp(), tok.data(), B, T, C);
  ops::embedding_backward(kCpu, dwte_f.data(), dwpe_f.data(), dout.fp(), tok.data(), B, T, C);
  ops::embedding_range_backward(kCpu, dwte_h.data() + size_t(v0) * C, dwpe_h.data(), dout.hp(), tok.data(), v0, v1,
                                pos0, B, T, C);
  ops::embedding_range_backward(kCpu, dwte_f.data() + size_t(v0) * C, dwpe_f.data(), dout.fp(), tok.data(), v0, v1,
                                pos0, B, T, C);
  CHECK(same(dwte_h, dwte_f));
  CHECK(same(dwpe_h, dwpe_f));
}

TEST_CASE("ops: bf16 storage -- flash attention forward and backward", "[ops][bf16]") {
  Rng rng(4);
  const int B = 2, T = 21, C = 16, NH = 2;  // T not a multiple of the 64-wide tiles
  const size_t NC = size_t(B) * T * C;
  Pair qkv = random(rng, 3 * NC, 1), out = random(rng, NC, 1);
  const size_t S = ops::attention_stats_size(kCpu, B, T, NH);
  std::vector<float> lse_h(S), lse_f(S);
  ops::attention_forward(kCpu, out.hp(), lse_h.data(), qkv.hp(), B, T, C, NH);
  ops::attention_forward(kCpu, out.fp(), lse_f.data(), qkv.fp(), B, T, C, NH);
  CHECK(rounded_from(out.h, out.f));
  CHECK(same(lse_h, lse_f));
  CHECK(rounding_mattered(out.f));
  stored(out);  // the backward reads the stored output
  Pair dout = random(rng, NC, 0.1), dqkv = random(rng, 3 * NC, 0.1);
  ops::attention_backward(kCpu, dqkv.hp(), dout.hp(), qkv.hp(), out.hp(), lse_f.data(), B, T, C, NH);
  ops::attention_backward(kCpu, dqkv.fp(), dout.fp(), qkv.fp(), out.fp(), lse_f.data(), B, T, C, NH);
  CHECK(rounded_from(dqkv.h, dqkv.f));
}

TEST_CASE("ops: bf16 storage -- cross-entropy, whole and by vocabulary range", "[ops][bf16]") {
  Rng rng(5);
  const int N = 9, V = 50, Vp = 56, v0 = 16, Vl = 24;
  Pair logits = random(rng, size_t(N) * Vp, 2);
  const std::vector<int32_t> target = tokens(rng, N, V);
  Pair dlogits = random(rng, size_t(N) * Vp, 1);
  std::vector<float> loss_h(N), loss_f(N);
  ops::softmax_crossentropy(kCpu, loss_h.data(), dlogits.hp(), logits.hp(), target.data(), 1.0 / 3, N, V, Vp);
  ops::softmax_crossentropy(kCpu, loss_f.data(), dlogits.fp(), logits.fp(), target.data(), 1.0 / 3, N, V, Vp);
  CHECK(same(loss_h, loss_f));
  CHECK(rounded_from(dlogits.h, dlogits.f));
  CHECK(rounding_mattered(dlogits.f));

  // Columns [v0, v0 + Vl) of the same logits, as one rank of a vocabulary split holds them.
  Pair range;
  for (int i = 0; i < N; ++i)
    for (int c = v0; c < v0 + Vl; ++c)
      range.h.push_back(logits.h[size_t(i) * Vp + c]), range.f.push_back(logits.f[size_t(i) * Vp + c]);
  std::vector<float> max_h(N), sum_h(N), tl_h(N), max_f(N), sum_f(N), tl_f(N);
  ops::crossentropy_stats(kCpu, max_h.data(), sum_h.data(), tl_h.data(), range.hp(), target.data(), v0, V, N, Vl);
  ops::crossentropy_stats(kCpu, max_f.data(), sum_f.data(), tl_f.data(), range.fp(), target.data(), v0, V, N, Vl);
  CHECK(same(max_h, max_f));
  CHECK(same(sum_h, sum_f));
  CHECK(same(tl_h, tl_f));
  Pair drange = random(rng, size_t(N) * Vl, 1);
  ops::crossentropy_from_stats(kCpu, loss_h.data(), drange.hp(), range.hp(), max_f.data(), sum_f.data(), tl_f.data(),
                               target.data(), 1.0 / 3, v0, V, N, Vl);
  ops::crossentropy_from_stats(kCpu, loss_f.data(), drange.fp(), range.fp(), max_f.data(), sum_f.data(), tl_f.data(),
                               target.data(), 1.0 / 3, v0, V, N, Vl);
  CHECK(same(loss_h, loss_f));
  CHECK(rounded_from(drange.h, drange.f));
}

TEST_CASE("ops: bf16 storage -- AdamW and SGD write a rounded bf16 copy; convert_to_bf16", "[ops][bf16]") {
  Rng rng(6);
  const size_t n = 1000;
  for (const bool sgd : {false, true}) {
    INFO("sgd " << sgd);
    Pair start = random(rng, n, 0.02);
    std::vector<float> p_h = start.f, p_f = start.f, g(n), m_h(n, 0.01f), v_h(n, 1e-4f);
    for (float& x : g) x = float(0.01 * rng.normal());
    std::vector<float> m_f = m_h, v_f = v_h, copy_f(n);
    std::vector<bf16> copy_h(n);
    const ops::AdamWArgs args{1e-3, 0.9, 0.95, 1e-8, 0.1, 0.7, 2, sgd};
    ops::adamw_update(kCpu, p_h.data(), g.data(), m_h.data(), v_h.data(), n, args, copy_h.data());
    ops::adamw_update(kCpu, p_f.data(), g.data(), m_f.data(), v_f.data(), n, args, copy_f.data(), /*copy_bf16=*/false);
    CHECK(same(p_h, p_f));
    CHECK(same(m_h, m_f));
    CHECK(same(v_h, v_f));
    CHECK(rounded_from(copy_h, copy_f));
    CHECK(rounding_mattered(copy_f));
  }
  const Pair values = random(rng, n, 3);
  std::vector<float> unrounded(n);
  for (size_t i = 0; i < n; ++i) unrounded[i] = values.f[i] * 1.001f;
  std::vector<bf16> converted(n);
  ops::convert_to_bf16(kCpu, converted.data(), unrounded.data(), n);
  CHECK(rounded_from(converted, unrounded));
  CHECK(rounding_mattered(unrounded));
}

TEST_CASE("ops: bf16 storage -- the sliced paths of the large operands give the same bits", "[ops][bf16]") {
  // The matmul's output and the losses are made in fp32 a slice of rows at a time; with
  // slices of a few rows the outputs must keep every bit of the whole-operand call (the
  // default slice holds these shapes whole). A slice smaller than one row still takes one
  // at a time, so 1 float per slice is the finest cut. An edge
  // of a slice handled wrongly (a row skipped, an offset off by one) would change some
  // output; the comparisons above this test check that each output is the fp32 op's.
  Rng rng(7);
  const int N = 11, C = 24, OC = 40, V = 37;
  Pair inp = random(rng, size_t(N) * C, 1), w = random(rng, size_t(OC) * C, 0.2), bias = random(rng, OC, 0.1);
  Pair dout = random(rng, size_t(N) * OC, 0.1), dinp0 = random(rng, size_t(N) * C, 0.1);
  const std::vector<int32_t> target = tokens(rng, N, V);
  struct Outputs {
    std::vector<bf16> out, gelu, dinp, dlogits, drange;
    std::vector<float> dw, dbias, losses, max, sum, tl, range_losses;
  };
  auto run = [&](size_t slice) {
    cpu::set_bf16_slice_floats(slice);
    Outputs o;
    o.out.resize(size_t(N) * OC), o.gelu.resize(o.out.size()), o.dinp = dinp0.h, o.dlogits.resize(o.out.size());
    o.dw.assign(size_t(OC) * C, 0.5f), o.dbias.assign(OC, 0.25f), o.losses.resize(N);
    o.max.resize(N), o.sum.resize(N), o.tl.resize(N);
    ops::matmul_forward(kCpu, o.out.data(), inp.hp(), w.hp(), bias.hp(), N, C, OC, o.gelu.data());
    ops::matmul_backward(kCpu, o.dinp.data(), o.dw.data(), o.dbias.data(), dout.hp(), inp.hp(), w.hp(), N, C, OC);
    ops::softmax_crossentropy(kCpu, o.losses.data(), o.dlogits.data(), o.out.data(), target.data(), 1.0 / 3, N, V,
                              OC);
    ops::crossentropy_stats(kCpu, o.max.data(), o.sum.data(), o.tl.data(), o.out.data(), target.data(), 8, V, N, OC);
    o.drange.resize(o.out.size()), o.range_losses.resize(N);
    ops::crossentropy_from_stats(kCpu, o.range_losses.data(), o.drange.data(), o.out.data(), o.max.data(),
                                 o.sum.data(), o.tl.data(), target.data(), 1.0 / 3, 8, V, N, OC);
    cpu::set_bf16_slice_floats(size_t(16) << 20);  // the default
    return o;
  };
  auto bits = [](const std::vector<bf16>& a, const std::vector<bf16>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
  };
  const Outputs whole = run(size_t(16) << 20);
  for (const size_t slice : {size_t(1), size_t(50), size_t(100), size_t(7 * OC)}) {
    INFO("slice of " << slice << " floats");
    const Outputs sliced = run(slice);
    CHECK(bits(sliced.out, whole.out));
    CHECK(bits(sliced.gelu, whole.gelu));
    CHECK(bits(sliced.dinp, whole.dinp));
    CHECK(bits(sliced.dlogits, whole.dlogits));
    CHECK(same(sliced.dw, whole.dw));
    CHECK(same(sliced.dbias, whole.dbias));
    CHECK(same(sliced.losses, whole.losses));
    CHECK(same(sliced.max, whole.max));
    CHECK(same(sliced.sum, whole.sum));
    CHECK(same(sliced.tl, whole.tl));
    CHECK(bits(sliced.drange, whole.drange));
    CHECK(same(sliced.range_losses, whole.range_losses));
  }
}
