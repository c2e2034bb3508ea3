// A transformer block split the way tensor parallelism splits it, ranks simulated by
// threads (thread_group.h), against the whole block, in double: what BlockDims and the
// hooks of model_pieces.h must make possible.
//
// Rank r of tp holds heads [r H/tp, (r+1) H/tp) (their rows of Q, K and V in c_attn, their
// columns of attn.c_proj) and hidden units [r F/tp, (r+1) F/tp) (rows of c_fc, columns of
// mlp.c_proj); layernorms are replicated; the row-parallel biases live on rank 0. The
// hooks all-reduce after the row-parallel linears (forward) and before the
// column-parallel ones (backward); with sequence parallelism they all-gather and
// reduce-scatter rows instead, and each rank keeps N/tp rows of the residual stream.
//
// Tolerance: the split regroups each row-parallel product's sum over W = C (or 4C)
// terms into tp partial sums; in double every compared value is within a few
// (4C) eps = 96 * 1.1e-16 ~ 1e-14 of exact relative to the magnitudes summed, and the
// layers compose a handful of such steps, so normwise 1e-12 holds with room (the same
// bound as the attention tests). Negative control: the rank order of Q's rows swapped
// between two ranks' slices (a wrong head split) must be rejected by far.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/model_block.h"
#include "tests/model/thread_group.h"
#include "tests/ops/gradcheck.h"

using namespace gpt;
using gpt::test::normal_vec;
using gpt::test::Rng;
using gpt::test::ThreadGroup;
using gpt::test::Vec;

namespace {

constexpr int B = 2, T = 6, N = B * T, C = 24, NH = 6, hs = C / NH, F = 4 * C;
const PieceContext kCtx{Device::CPU, Precision::FP32};

// The whole block's tensors, one Vec each, in BlockTensors order.
struct Tensors {
  Vec ln1_w, ln1_b, qkv_w, qkv_b, attproj_w, attproj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  BlockTensors<double> ptrs() {
    return {ln1_w.data(), ln1_b.data(), qkv_w.data(), qkv_b.data(), attproj_w.data(), attproj_b.data(),
            ln2_w.data(), ln2_b.data(), fc_w.data(),  fc_b.data(),  fcproj_w.data(),  fcproj_b.data()};
  }
  static Tensors zeros(int W, int Fl) {
    return {Vec(C, 0.0), Vec(C, 0.0), Vec(size_t(3) * W * C, 0.0), Vec(size_t(3) * W, 0.0), Vec(size_t(C) * W, 0.0),
            Vec(C, 0.0), Vec(C, 0.0), Vec(C, 0.0), Vec(size_t(Fl) * C, 0.0), Vec(size_t(Fl), 0.0),
            Vec(size_t(C) * Fl, 0.0), Vec(C, 0.0)};
  }
};

Tensors random_block(Rng& rng) {
  Tensors t;
  t.ln1_w = normal_vec(C, rng, 0.2), t.ln1_b = normal_vec(C, rng, 0.1);
  for (double& x : t.ln1_w) x += 1;
  t.qkv_w = normal_vec(size_t(3) * C * C, rng, 0.3), t.qkv_b = normal_vec(size_t(3) * C, rng, 0.1);
  t.attproj_w = normal_vec(size_t(C) * C, rng, 0.2), t.attproj_b = normal_vec(C, rng, 0.1);
  t.ln2_w = normal_vec(C, rng, 0.2), t.ln2_b = normal_vec(C, rng, 0.1);
  for (double& x : t.ln2_w) x += 1;
  t.fc_w = normal_vec(size_t(F) * C, rng, 0.2), t.fc_b = normal_vec(F, rng, 0.1);
  t.fcproj_w = normal_vec(size_t(C) * F, rng, 0.1), t.fcproj_b = normal_vec(C, rng, 0.1);
  return t;
}

// Rows [r0, r0 + n) of a (rows, cols) matrix; columns [c0, c0 + n) of one.
Vec rows(const Vec& m, int cols, int r0, int n) {
  return Vec(m.begin() + size_t(r0) * cols, m.begin() + size_t(r0 + n) * cols);
}
Vec columns(const Vec& m, int cols, int c0, int n) {
  Vec out;
  for (size_t r = 0; r < m.size() / size_t(cols); ++r)
    out.insert(out.end(), m.begin() + r * cols + c0, m.begin() + r * cols + c0 + n);
  return out;
}
Vec concat(std::initializer_list<Vec> parts) {
  Vec out;
  for (const Vec& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Rank r's slice of the whole block. `swap_q` (negative control) gives rank r the Q rows
// of rank tp-1-r.
Tensors slice(const Tensors& w, int tp, int r, bool swap_q) {
  const int W = C / tp, Fl = F / tp, h0 = r * W, f0 = r * Fl, hq = (swap_q ? tp - 1 - r : r) * W;
  Tensors s;
  s.ln1_w = w.ln1_w, s.ln1_b = w.ln1_b, s.ln2_w = w.ln2_w, s.ln2_b = w.ln2_b;
  s.qkv_w = concat({rows(w.qkv_w, C, hq, W), rows(w.qkv_w, C, C + h0, W), rows(w.qkv_w, C, 2 * C + h0, W)});
  s.qkv_b = concat({rows(w.qkv_b, 1, hq, W), rows(w.qkv_b, 1, C + h0, W), rows(w.qkv_b, 1, 2 * C + h0, W)});
  s.attproj_w = columns(w.attproj_w, C, h0, W);
  s.attproj_b = r == 0 ? w.attproj_b : Vec();
  s.fc_w = rows(w.fc_w, C, f0, Fl), s.fc_b = rows(w.fc_b, 1, f0, Fl);
  s.fcproj_w = columns(w.fcproj_w, F, f0, Fl);
  s.fcproj_b = r == 0 ? w.fcproj_b : Vec();
  return s;
}

// Null where a tensor is absent on this rank (the row-parallel biases off rank 0).
template <class T>
BlockTensors<T> nulls_for_empty(BlockTensors<T> p, const Tensors& t) {
  if (t.attproj_b.empty()) p.attproj_b = nullptr;
  if (t.fcproj_b.empty()) p.fcproj_b = nullptr;
  return p;
}

// Tensor-parallel hooks over a thread group; with `sp`, sequence parallel.
struct TpHooks : ModelHooks<double> {
  TpHooks(ThreadGroup& g, int r, bool s) : group(g), rank(r), sp(s) {}
  int full_rows(int local) const override { return sp ? local * group.size() : local; }
  const double* gather_input(Site, const double* x, double* full, int rows_, int C_) override {
    if (!sp) return x;
    group.all_gather(rank, x, full, size_t(rows_) * C_);
    return full;
  }
  double* reduce_input_grad(Site, double* d_full, double* local, int rows_, int C_) override {
    if (!sp) {
      group.all_reduce(rank, d_full, size_t(rows_) * C_);
      return d_full;
    }
    group.reduce_scatter(rank, d_full, local, size_t(rows_) * C_);
    return local;
  }
  double* reduce_output(Site, double* partial, double* local, int rows_, int C_) override {
    if (!sp) {
      group.all_reduce(rank, partial, size_t(rows_) * C_);
      return partial;
    }
    group.reduce_scatter(rank, partial, local, size_t(rows_) * C_);
    return local;
  }
  const double* gather_output_grad(Site, const double* d_local, double* full, int rows_, int C_) override {
    if (!sp) return d_local;
    group.all_gather(rank, d_local, full, size_t(rows_) * C_);
    return full;
  }
  ThreadGroup& group;
  int rank;
  bool sp;
};

struct Outcome {
  Vec out, dx;     // (N, C): block output and input gradient (rows put back together)
  Tensors grads;   // whole-layout gradients: slices placed back, replicated ones summed over ranks
  bool ln_grads_equal_across_ranks = true;
};

Outcome run_whole(Tensors& w, const Vec& x, const Vec& dout) {
  const BlockDims dims{C, NH, hs, F};
  BlockActivations<double> act(Device::CPU, dims, B, T, N);
  BlockScratch<double> scratch(Device::CPU, dims, N, N);
  ModelHooks<double> none;
  block_forward(kCtx, dims, as_const(w.ptrs()), x.data(), act, scratch, none, B, T, N);
  Outcome o;
  o.out.assign(act.resid3.data(), act.resid3.data() + N * C);
  o.dx = dout;
  o.grads = Tensors::zeros(C, F);
  block_backward(kCtx, dims, as_const(w.ptrs()), o.grads.ptrs(), x.data(), act, o.dx.data(), scratch,
                 none, B, T, N);
  return o;
}

Outcome run_split(const Tensors& w, const Vec& x, const Vec& dout, int tp, bool sp, bool swap_q) {
  ThreadGroup group(tp);
  const int W = C / tp, Fl = F / tp, rows_local = sp ? N / tp : N;
  std::vector<Tensors> grads(static_cast<size_t>(tp));
  Outcome o;
  o.out.assign(size_t(N) * C, 0), o.dx.assign(size_t(N) * C, 0);
  group.run([&](int r) {
    Tensors mine = slice(w, tp, r, swap_q);
    grads[size_t(r)] = Tensors::zeros(W, Fl);
    const BlockDims dims{C, NH / tp, hs, Fl};
    TpHooks hooks(group, r, sp);
    const int first = sp ? r * rows_local : 0;  // this rank's rows of the residual stream
    const Vec x_local = rows(x, C, first, rows_local);
    Vec d_local = rows(dout, C, first, rows_local);
    BlockActivations<double> act(Device::CPU, dims, B, T, rows_local);
    BlockScratch<double> scratch(Device::CPU, dims, N, rows_local);
    const BlockWeights<double> wp = nulls_for_empty(as_const(mine.ptrs()), mine);
    block_forward(kCtx, dims, wp, x_local.data(), act, scratch, hooks, B, T, rows_local);
    block_backward(kCtx, dims, wp, nulls_for_empty(grads[size_t(r)].ptrs(), mine), x_local.data(), act,
                   d_local.data(), scratch, hooks, B, T, rows_local);
    if (sp || r == 0) {
      std::copy(act.resid3.data(), act.resid3.data() + size_t(rows_local) * C, o.out.begin() + size_t(first) * C);
      std::copy(d_local.begin(), d_local.end(), o.dx.begin() + size_t(first) * C);
    }
  });
  // Back to the whole layout: slices placed, replicated layernorm gradients summed over
  // ranks under sequence parallelism (each rank saw its rows) and taken from rank 0
  // otherwise (every rank saw every row: they must be equal).
  o.grads = Tensors::zeros(C, F);
  for (int r = 0; r < tp; ++r) {
    const Tensors& g = grads[size_t(r)];
    const int h0 = r * W, f0 = r * Fl;
    for (int third = 0; third < 3; ++third)
      for (int i = 0; i < W; ++i) {
        std::copy_n(g.qkv_w.begin() + size_t(third * W + i) * C, C,
                    o.grads.qkv_w.begin() + size_t(third * C + h0 + i) * C);
        o.grads.qkv_b[size_t(third * C + h0 + i)] = g.qkv_b[size_t(third * W + i)];
      }
    for (int row = 0; row < C; ++row) {
      std::copy_n(g.attproj_w.begin() + size_t(row) * W, W, o.grads.attproj_w.begin() + size_t(row) * C + h0);
      std::copy_n(g.fcproj_w.begin() + size_t(row) * Fl, Fl, o.grads.fcproj_w.begin() + size_t(row) * F + f0);
    }
    std::copy(g.fc_w.begin(), g.fc_w.end(), o.grads.fc_w.begin() + size_t(f0) * C);
    std::copy(g.fc_b.begin(), g.fc_b.end(), o.grads.fc_b.begin() + f0);
    if (r == 0) o.grads.attproj_b = g.attproj_b, o.grads.fcproj_b = g.fcproj_b;
    const Tensors& g0 = grads[0];
    if (!sp && r > 0)
      o.ln_grads_equal_across_ranks = o.ln_grads_equal_across_ranks && g.ln1_w == g0.ln1_w && g.ln1_b == g0.ln1_b &&
                                      g.ln2_w == g0.ln2_w && g.ln2_b == g0.ln2_b;
    if (sp || r == 0)
      for (auto [whole, part] : {std::pair{&o.grads.ln1_w, &g.ln1_w}, {&o.grads.ln1_b, &g.ln1_b},
                                 {&o.grads.ln2_w, &g.ln2_w}, {&o.grads.ln2_b, &g.ln2_b}})
        for (size_t i = 0; i < part->size(); ++i) (*whole)[i] += (*part)[i];
  }
  return o;
}

double normwise(const Vec& got, const Vec& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i)
    err = std::max(err, std::fabs(got[i] - want[i])), scale = std::max(scale, std::fabs(want[i]));
  return scale > 0 ? err / scale : err;
}

double worst(const Outcome& a, const Outcome& b) {
  const Tensors& g = a.grads;
  const Tensors& h = b.grads;
  return std::max({normwise(a.out, b.out), normwise(a.dx, b.dx), normwise(g.ln1_w, h.ln1_w), normwise(g.ln1_b, h.ln1_b),
                   normwise(g.qkv_w, h.qkv_w), normwise(g.qkv_b, h.qkv_b), normwise(g.attproj_w, h.attproj_w),
                   normwise(g.attproj_b, h.attproj_b), normwise(g.ln2_w, h.ln2_w), normwise(g.ln2_b, h.ln2_b),
                   normwise(g.fc_w, h.fc_w), normwise(g.fc_b, h.fc_b), normwise(g.fcproj_w, h.fcproj_w),
                   normwise(g.fcproj_b, h.fcproj_b)});
}

}  // namespace

TEST_CASE("model: a block split over tensor-parallel ranks equals the whole block", "[model]") {
  Rng rng(8201);
  Tensors w = random_block(rng);
  const Vec x = normal_vec(size_t(N) * C, rng), dout = normal_vec(size_t(N) * C, rng);
  const Outcome whole = run_whole(w, x, dout);
  for (int tp : {1, 2, 3, 6})
    for (bool sp : {false, true}) {
      if (sp && N % tp != 0) continue;
      INFO("tp " << tp << (sp ? " with" : " without") << " sequence parallelism");
      const Outcome split = run_split(w, x, dout, tp, sp, false);
      const double err = worst(split, whole);
      INFO("worst normwise error " << err);
      CHECK(err <= 1e-12);
      CHECK(split.ln_grads_equal_across_ranks);
      if (tp > 1) {
        const double wrong = worst(run_split(w, x, dout, tp, sp, true), whole);
        INFO("negative control (Q rows of another rank's heads): " << wrong);
        CHECK(wrong > 1e-6);
      }
    }
}
