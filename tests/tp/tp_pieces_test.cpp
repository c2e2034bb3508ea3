// Stage 06's tensor-parallel pieces against the single-rank ones, in double, on the
// ranks of `mpirun -np TP` (every rank is one tensor-parallel rank; the world is the
// group). Model: n_embd 96, n_head 6 (24 at tp 4 and 8, which cannot split 6 heads),
// vocabulary 250 (padded to 256), B 2 x T 24.
//
//   embedding   vocabulary-parallel forward (partial sums reduced by the hooks) and
//               backward (this rank's wte rows, wpe)
//   block       heads and hidden units split, forward and backward through the hooks
//   head + loss the logits of this rank's vocabulary columns, the vocabulary-parallel
//               cross-entropy (row max, sum of exponentials, target logit reduced), and
//               its backward; once more with a split that leaves the last rank only
//               padding columns (no NaN, the same losses)
//   model       GPT2<double> holding the rank's slices, with SequenceParallelGrads: the
//               loss and every local gradient equal the whole model's, and the
//               layernorm gradients are identical on every rank under sequence parallelism
//   gather      gather_whole_model: rank 0 gets the global buffer bit for bit from the
//               slices, window by window, and from two chunks per rank, fp32 and bf16
// each with sequence parallelism off and on (T = 24 divides by 1, 2, 3, 4, 6 and 8).
//
// Tolerance: a split regroups each product's sum over at most 4C = 384 (or the
// vocabulary's 256) terms into TP partial sums; in double each compared value moves by
// a few 384 * 1.1e-16 ~ 4e-14 relative to the magnitudes summed, and the model composes
// a few dozen such steps, so normwise 1e-11 holds with room while any real mistake (a
// bias added twice, a missed reduction, another rank's heads) is above 1e-4. Negative
// controls, each must be rejected: hooks that skip the row-parallel reduction, and a
// rank holding another rank's Q rows.
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
#include "common/gpt2.h"
#include "common/model_embedding.h"
#include "common/model_head.h"
#include "common/rank_layout.h"
#include "kernels/cpu/bf16.h"
#include "stages/06_tensor_parallel/gather_whole.h"
#include "stages/06_tensor_parallel/local_zero.h"
#include "stages/06_tensor_parallel/sequence_parallel_grads.h"
#include "stages/06_tensor_parallel/tp_hooks.h"
#include "tests/rank_checks.h"

using namespace gpt;
using Vec = std::vector<double>;
using gpt::test::normwise;
using gpt::test::RankChecks;
using gpt::test::sci;

namespace {

constexpr double kTol = 1e-11;
constexpr int B = 2, T = 24, N = B * T;
const PieceContext kCtx{Device::CPU, Precision::FP64};
int g_tp = 1;  // the group's size: the heads must divide by it
RankChecks g_checks;
void expect(bool ok, const std::string& what) { g_checks.expect(ok, what); }

void expect_close(const double* got, const double* want, size_t n, const std::string& what) {
  const double e = normwise(got, want, n);
  expect(e <= kTol, what + ": normwise error " + sci(e));
}

// n_head 6 where tp divides it (1, 2, 3, 6); 24 heads of 4 for tp 4 and 8, which cannot
// split 6 heads.
ModelConfig test_model(int layers) {
  ModelConfig m;
  m.n_layer = layers, m.n_embd = 96, m.n_head = 6 % g_tp == 0 ? 6 : 24, m.block_size = T, m.vocab_size = 250;
  return m;
}

// The global parameters: GPT-2's initialisation plus noise everywhere, so biases,
// layernorms and wte's padding rows are not trivially 0 or 1.
Vec global_params(const ParamLayout& g, uint64_t seed) {
  Vec w(size_t(g.total()));
  g.init_range(seed, 0, g.total(), w.data());
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.05);
  for (double& x : w) x += noise(rng);
  return w;
}

Vec random_vec(size_t n, uint64_t seed, double std = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, std);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

std::vector<int32_t> tokens(uint64_t seed, int V) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> t(N);
  for (int32_t& x : t) x = int32_t(rng() % uint32_t(V));
  return t;
}

// Hooks that leave out the row-parallel reduction (negative control).
struct ForgetfulHooks : TensorParallelHooks<double> {
  using TensorParallelHooks<double>::TensorParallelHooks;
  double* reduce_output(Site site, double* partial, double* local, int rows, int C) override {
    if (site == Site::Mlp) return partial;  // the MLP's partial sums kept as they are
    return TensorParallelHooks<double>::reduce_output(site, partial, local, rows, C);
  }
};

// ---- embedding ----
void test_embedding(Communicator& tp, bool sp) {
  const ModelConfig m = test_model(1);
  const ParamLayout g(m);
  const int C = m.n_embd, Vp = m.padded_vocab(), R = sp ? N / tp.size() : N, first = sp ? tp.rank() * R : 0;
  const Vec w = global_params(g, 11);
  const auto tok = tokens(12, m.vocab_size);
  const double* wte = w.data() + g.wte();
  const double* wpe = w.data() + g.wpe();
  // Whole.
  Vec out(size_t(N) * C);
  embedding_piece_forward(kCtx, out.data(), tok.data(), wte, {0, Vp}, wpe, 0, B, T, C, Vp);
  const Vec dout = random_vec(size_t(N) * C, 13);
  Vec dwte(size_t(Vp) * C, 0.0), dwpe(size_t(T) * C, 0.0);
  embedding_piece_backward(kCtx, dwte.data(), dwpe.data(), dout.data(), tok.data(), {0, Vp}, 0, B, T, C, Vp);
  // This rank's vocabulary rows.
  TensorParallelHooks<double> hooks(tp, sp, Device::CPU);
  const VocabRange v = vocab_range(m, tp.size(), tp.rank());
  Vec partial(size_t(N) * C), local(size_t(R) * C);
  embedding_piece_forward(kCtx, partial.data(), tok.data(), wte + size_t(v.begin) * C, v,
                          tp.rank() == 0 ? wpe : nullptr, 0, B, T, C, Vp);
  const double* x0 = hooks.reduce_output(Site::Embedding, partial.data(), local.data(), R, C);
  const std::string what = std::string("embedding") + (sp ? " (sp)" : "");
  expect_close(x0, out.data() + size_t(first) * C, size_t(R) * C, what + " forward");
  Vec full(size_t(N) * C), my_dwte(size_t(v.size()) * C, 0.0), my_dwpe(size_t(T) * C, 0.0);
  const double* d = hooks.gather_output_grad(Site::Embedding, dout.data() + size_t(first) * C, full.data(), R, C);
  embedding_piece_backward(kCtx, my_dwte.data(), my_dwpe.data(), d, tok.data(), v, 0, B, T, C, Vp);
  expect_close(my_dwte.data(), dwte.data() + size_t(v.begin) * C, my_dwte.size(), what + " d wte rows");
  expect_close(my_dwpe.data(), dwpe.data(), my_dwpe.size(), what + " d wpe");
}

// ---- block ----
template <class T_>
BlockTensors<T_> tensors_of(const ParamLayout& l, T_* buf) {
  const BlockParams& o = l.block(0);
  return {buf + o.ln1_w, buf + o.ln1_b, buf + o.qkv_w,  buf + o.qkv_b, buf + o.attproj_w, buf + o.attproj_b,
          buf + o.ln2_w, buf + o.ln2_b, buf + o.fc_w,   buf + o.fc_b,  buf + o.fcproj_w,  buf + o.fcproj_b};
}

void test_block(Communicator& tp, bool sp) {
  const ModelConfig m = test_model(1);
  const ParamLayout g(m), local_layout(m, tp.size(), tp.rank());
  const RankLayout slices = RankLayout::tensor_parallel(g, tp.size(), tp.rank());
  const int C = m.n_embd, R = sp ? N / tp.size() : N, first = sp ? tp.rank() * R : 0;
  const Vec w = global_params(g, 21);
  const Vec x = random_vec(size_t(N) * C, 22), dout = random_vec(size_t(N) * C, 23);
  // Whole.
  const BlockDims whole_dims = BlockDims::whole(m);
  BlockActivations<double> act(Device::CPU, whole_dims, B, T, N);
  BlockScratch<double> scratch(Device::CPU, whole_dims, N, N);
  ModelHooks<double> none;
  block_forward(kCtx, whole_dims, as_const(tensors_of(g, w.data())), x.data(), act, scratch, none, B, T, N);
  Vec grads(size_t(g.total()), 0.0), dx = dout;
  block_backward(kCtx, whole_dims, as_const(tensors_of(g, w.data())), tensors_of(g, grads.data()), x.data(), act,
                 dx.data(), scratch, none, B, T, N);
  // This rank's slices, taken from the global buffer by the rank layout.
  Vec mine(size_t(slices.total())), my_grads(size_t(slices.total()), 0.0), want_grads(size_t(slices.total()));
  slices.scatter(w.data(), mine.data());
  slices.scatter(grads.data(), want_grads.data());
  const BlockDims dims = BlockDims::slice(m, tp.size());
  TensorParallelHooks<double> hooks(tp, sp, Device::CPU);
  BlockActivations<double> my_act(Device::CPU, dims, B, T, R);
  BlockScratch<double> my_scratch(Device::CPU, dims, N, R);
  BlockWeights<double> wl = as_const(tensors_of(local_layout, mine.data()));
  if (tp.rank() != 0) wl.attproj_b = wl.fcproj_b = nullptr;  // added once, by rank 0
  const Vec x_local(x.begin() + int64_t(first) * C, x.begin() + int64_t(first + R) * C);
  Vec d_local(dout.begin() + int64_t(first) * C, dout.begin() + int64_t(first + R) * C);
  block_forward(kCtx, dims, wl, x_local.data(), my_act, my_scratch, hooks, B, T, R);
  block_backward(kCtx, dims, wl, tensors_of(local_layout, my_grads.data()), x_local.data(), my_act, d_local.data(),
                 my_scratch, hooks, B, T, R);
  const std::string what = std::string("block") + (sp ? " (sp)" : "");
  expect_close(my_act.resid3.data(), act.resid3.data() + size_t(first) * C, size_t(R) * C, what + " forward");
  expect_close(d_local.data(), dx.data() + size_t(first) * C, size_t(R) * C, what + " d x");
  // Under sequence parallelism a layernorm's gradient is this rank's rows' share: sum it.
  if (sp) {
    const BlockParams& o = local_layout.block(0);
    for (int64_t off : {o.ln1_w, o.ln1_b, o.ln2_w, o.ln2_b}) tp.all_reduce(my_grads.data() + off, size_t(C), DType::F64);
  }
  for (const ParamTensor& t : local_layout.tensors()) {
    if (t.layer != 0) continue;
    expect_close(my_grads.data() + t.offset, want_grads.data() + t.offset, size_t(t.numel), what + " d " + t.name);
  }
}

// ---- head and the vocabulary-parallel cross-entropy ----
// `ranges`: each rank's vocabulary columns (by default vocab_range's split).
void test_head(Communicator& tp, bool sp, const std::vector<VocabRange>& ranges, const std::string& label) {
  const ModelConfig m = test_model(1);
  const ParamLayout g(m);
  const int C = m.n_embd, Vp = m.padded_vocab(), V = m.vocab_size, R = sp ? N / tp.size() : N,
            first = sp ? tp.rank() * R : 0;
  const Vec w = global_params(g, 31);
  const Vec x = random_vec(size_t(N) * C, 32);
  const auto tgt = tokens(33, V);
  std::vector<int32_t> targets(tgt.begin(), tgt.end());
  const double* wte = w.data() + g.wte();
  const double *lnf_w = w.data() + g.lnf_w(), *lnf_b = w.data() + g.lnf_b();
  const double scale = 1.0 / N;
  // Whole.
  ModelHooks<double> none;
  HeadActivations<double> act(Device::CPU, C, N, N, {0, Vp}, /*train=*/true);
  head_forward(kCtx, x.data(), lnf_w, lnf_b, wte, {0, Vp}, act, none, N, C);
  head_loss(kCtx, act, targets.data(), {0, Vp}, V, none, N);
  head_loss_gradient(kCtx, act, targets.data(), {0, Vp}, V, none, N, scale);
  BlockScratch<double> scratch(Device::CPU, BlockDims::whole(m), N, N);
  Vec dwte(size_t(Vp) * C, 0.0), dlnf_w(size_t(C), 0.0), dlnf_b(size_t(C), 0.0), dx(size_t(N) * C);
  head_backward(kCtx, x.data(), lnf_w, wte, dlnf_w.data(), dlnf_b.data(), dwte.data(), {0, Vp}, act, dx.data(),
                scratch, none, N, C);
  // This rank's columns.
  const VocabRange v = ranges[size_t(tp.rank())];
  TensorParallelHooks<double> hooks(tp, sp, Device::CPU);
  HeadActivations<double> mine(Device::CPU, C, R, N, v, /*train=*/true);
  const Vec x_local(x.begin() + int64_t(first) * C, x.begin() + int64_t(first + R) * C);
  head_forward(kCtx, x_local.data(), lnf_w, lnf_b, wte + size_t(v.begin) * C, v, mine, hooks, R, C);
  head_loss(kCtx, mine, targets.data(), v, V, hooks, R);
  head_loss_gradient(kCtx, mine, targets.data(), v, V, hooks, R, scale);
  BlockScratch<double> my_scratch(Device::CPU, BlockDims::slice(m, tp.size()), N, R);
  Vec my_dwte(size_t(v.size()) * C, 0.0), my_dlnf_w(size_t(C), 0.0), my_dlnf_b(size_t(C), 0.0), my_dx(size_t(R) * C);
  head_backward(kCtx, x_local.data(), lnf_w, wte + size_t(v.begin) * C, my_dlnf_w.data(), my_dlnf_b.data(),
                my_dwte.data(), v, mine, my_dx.data(), my_scratch, hooks, R, C);
  const std::string what = "head" + label + (sp ? " (sp)" : "");
  expect_close(mine.losses.data(), act.losses.data(), size_t(N), what + " losses");
  // The logits of this rank's columns (every row).
  Vec want_logits;
  for (int i = 0; i < N; ++i)
    want_logits.insert(want_logits.end(), act.logits.data() + size_t(i) * Vp + v.begin,
                       act.logits.data() + size_t(i) * Vp + v.end);
  expect_close(mine.logits.data(), want_logits.data(), want_logits.size(), what + " logits");
  if (v.size() > 0) expect_close(my_dwte.data(), dwte.data() + size_t(v.begin) * C, my_dwte.size(), what + " d wte rows");
  expect_close(my_dx.data(), dx.data() + size_t(first) * C, my_dx.size(), what + " d x");
  if (sp) tp.all_reduce(my_dlnf_w.data(), size_t(C), DType::F64), tp.all_reduce(my_dlnf_b.data(), size_t(C), DType::F64);
  expect_close(my_dlnf_w.data(), dlnf_w.data(), size_t(C), what + " d ln_f.weight");
  expect_close(my_dlnf_b.data(), dlnf_b.data(), size_t(C), what + " d ln_f.bias");
}

// ---- the whole model as slices ----
struct ModelOutcome {
  double loss_error = 0, grad_error = 0;
  bool layernorms_identical = true;
};

// `swap_q`: the rank's Q rows come from the next rank's slice (negative control).
template <class Hooks>
ModelOutcome run_model(Communicator& tp, bool sp, bool swap_q) {
  const ModelConfig m = test_model(2);
  const ParamLayout g(m);
  const RankLayout slices = RankLayout::tensor_parallel(g, tp.size(), tp.rank());
  const Vec w = global_params(g, 41);
  const auto in = tokens(42, m.vocab_size), tg = tokens(43, m.vocab_size);
  GPT2<double> whole(m, B, T, Device::CPU, Precision::FP64);
  whole.set_params(w.data());
  whole.zero_grads();
  const double loss = whole.forward(in.data(), tg.data());
  whole.backward(0.5);
  Vec want(size_t(slices.total()));
  slices.scatter(whole.grads().data(), want.data());

  Hooks hooks(tp, sp, Device::CPU);
  GPT2<double> model(m, B, T, Device::CPU, Precision::FP64, true, ModelSlice<double>{tp.size(), tp.rank(), sp, &hooks, {}});
  Vec mine(size_t(slices.total()));
  slices.scatter(w.data(), mine.data());
  if (swap_q && tp.size() > 1) {  // Q rows of the next rank's heads
    const RankLayout other = RankLayout::tensor_parallel(g, tp.size(), (tp.rank() + 1) % tp.size());
    Vec theirs(size_t(other.total()));
    other.scatter(w.data(), theirs.data());
    const ParamLayout& l = model.layout();
    const int64_t qkv = l.block(0).qkv_w, q_rows = (m.n_embd / tp.size()) * m.n_embd;
    std::copy_n(theirs.begin() + qkv, q_rows, mine.begin() + qkv);
  }
  model.set_params(mine.data());
  model.zero_grads();
  FlatStore<double> flat(model.layout(), model.params().data(), model.grads().data());
  SequenceParallelGrads<double> sums(model.layout(), tp, flat, Device::CPU);
  if (sp) model.set_store(&sums);
  ModelOutcome o;
  o.loss_error = std::fabs(model.forward(in.data(), tg.data()) - loss) / std::fabs(loss);
  model.backward(0.5);
  o.grad_error = normwise(model.grads().data(), want.data(), want.size());
  // Every rank's layernorm gradients, gathered: identical bits on all ranks.
  for (const ParamTensor& t : model.layout().tensors()) {
    if (t.name.find("ln_") == std::string::npos) continue;
    Vec all(size_t(t.numel) * tp.size());
    tp.all_gather(model.grads().data() + t.offset, all.data(), size_t(t.numel), DType::F64);
    for (int r = 1; r < tp.size(); ++r)
      o.layernorms_identical = o.layernorms_identical && std::equal(all.begin(), all.begin() + t.numel, all.begin() + r * t.numel);
  }
  return o;
}

void test_model_slices(Communicator& tp, bool sp) {
  const std::string what = std::string("model") + (sp ? " (sp)" : "");
  const ModelOutcome o = run_model<TensorParallelHooks<double>>(tp, sp, false);
  expect(o.loss_error <= kTol, what + " loss: relative error " + sci(o.loss_error));
  expect(o.grad_error <= kTol, what + " gradients: normwise error " + sci(o.grad_error));
  expect(o.layernorms_identical, what + ": layernorm gradients differ between tp ranks");
  if (tp.size() == 1) return;
  const ModelOutcome forgot = run_model<ForgetfulHooks>(tp, sp, false);
  expect(forgot.loss_error > 1e-4 || forgot.grad_error > 1e-4,
         what + " negative control (no MLP reduction) accepted: loss " + sci(forgot.loss_error) + ", gradients " +
             sci(forgot.grad_error));
  const ModelOutcome swapped = run_model<TensorParallelHooks<double>>(tp, sp, true);
  expect(swapped.loss_error > 1e-4 || swapped.grad_error > 1e-4,
         what + " negative control (another rank's Q rows) accepted: " + sci(swapped.grad_error));
}

// gather_whole_model: world rank 0 gets the whole model, bit for bit, from the ranks'
// tensor-parallel slices, whatever the window (a prime number of elements that cuts
// runs, a whole model at once, the default); the other ranks get nothing, or, asked for
// WholeOn::EveryRank, the same whole model. Control: with no rank counting its slices,
// rank 0 gets zeros, which must differ.
void test_gather_whole_model(Communicator& tp) {
  const ParamLayout global(test_model(1));
  std::vector<float> want(size_t(global.total()));
  for (size_t i = 0; i < want.size(); ++i) want[i] = float(i % 1000) + 0.25f;  // every element distinct from 0
  const RankLayout slices = RankLayout::tensor_parallel(global, tp.size(), tp.rank());
  std::vector<float> local(size_t(slices.total()));
  slices.scatter(want.data(), local.data());
  for (int64_t window : {int64_t(4099), global.total(), kGatherWindow}) {
    const std::vector<float> got = gather_whole_model(tp, slices, local, true, WholeOn::Lead, window);
    const std::string what = "gather_whole_model (window " + std::to_string(window) + ")";
    if (tp.rank() == 0) expect(got == want, what + ": rank 0's model differs from the global one");
    else expect(got.empty(), what + ": a rank other than 0 received a model");
    const std::vector<float> everywhere = gather_whole_model(tp, slices, local, true, WholeOn::EveryRank, window);
    expect(everywhere == want, what + ", every rank: rank " + std::to_string(tp.rank()) + "'s model differs");
  }
  const std::vector<float> none = gather_whole_model(tp, slices, local, false, WholeOn::Lead, 4099);
  if (tp.rank() == 0) expect(none != want, "gather_whole_model negative control (nothing counted) accepted");
}

// The same from two local buffers per rank (an interleaved pipeline's chunks: layer 0
// with the embeddings, layer 1 with ln_f; wte counted on the first), in fp32 and in bf16,
// bit for bit (the values are small integers, which bf16 holds exactly). Control: one
// chunk left out, which must differ.
void test_gather_chunks(Communicator& tp) {
  const ParamLayout global(test_model(2));
  std::vector<float> want(size_t(global.total()));
  for (size_t i = 0; i < want.size(); ++i) want[i] = float(1 + i % 200);
  const RankLayout tp_slice = RankLayout::tensor_parallel(global, tp.size(), tp.rank());
  const RankLayout first = RankLayout::pipeline_stage(tp_slice, 0, 1, /*first=*/true, /*last=*/false);
  const RankLayout second = RankLayout::pipeline_stage(tp_slice, 1, 2, /*first=*/false, /*last=*/true);
  std::vector<float> a(size_t(first.total())), b(size_t(second.total()));
  first.scatter(want.data(), a.data());
  second.scatter(want.data(), b.data());
  const WholeOn lead = WholeOn::Lead;
  const std::vector<float> got = gather_whole_model<float>(tp, {{&first, &a}, {&second, &b}}, true, lead, 4099);
  const auto narrow = [](const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i].bits = cpu::bf16_bits(v[i]);
    return out;
  };
  const std::vector<bf16> a16 = narrow(a), b16 = narrow(b), want16 = narrow(want);
  const std::vector<bf16> got16 = gather_whole_model<bf16>(tp, {{&first, &a16}, {&second, &b16}}, true, lead, 4099);
  const std::vector<float> half = gather_whole_model<float>(tp, {{&first, &a}}, true, lead, 4099);
  if (tp.rank() != 0) {
    expect(got.empty() && got16.empty(), "gather_whole_model (two chunks): a rank other than 0 received a model");
    return;
  }
  expect(got == want, "gather_whole_model (two chunks, fp32): rank 0's model differs from the global one");
  const bool same16 = got16.size() == want16.size() &&
                      std::equal(got16.begin(), got16.end(), want16.begin(),
                                 [](bf16 x, bf16 y) { return x.bits == y.bits; });
  expect(same16, "gather_whole_model (two chunks, bf16): rank 0's model differs from the global one");
  expect(half != want, "gather_whole_model negative control (the second chunk left out) accepted");
}

}  // namespace

int main(int argc, char** argv) {
  return run_main("tp_pieces_test", [&] {
    std::unique_ptr<Communicator> world = make_world(&argc, &argv, {"auto", Device::CPU, 60.0});
    test::require_world_size(*world, "tp_pieces_test");
    Communicator& tp = *world;
    g_checks.rank = tp.rank(), g_tp = tp.size();
    const ModelConfig m = test_model(1);
    for (bool sp : {false, true}) {
      test_embedding(tp, sp);
      test_block(tp, sp);
      std::vector<VocabRange> even;
      for (int r = 0; r < tp.size(); ++r) even.push_back(vocab_range(m, tp.size(), r));
      test_head(tp, sp, even, "");
      if (tp.size() > 1) {
        // The last rank holds only padding columns [V, Vp); the others split [0, V).
        std::vector<VocabRange> padded;
        const int others = tp.size() - 1, V = m.vocab_size;
        for (int r = 0; r < others; ++r) padded.push_back({V * r / others, V * (r + 1) / others});
        padded.push_back({V, m.padded_vocab()});
        test_head(tp, sp, padded, " (last rank only padding)");
      }
      test_model_slices(tp, sp);
    }
    test_gather_whole_model(tp);
    test_gather_chunks(tp);
    return g_checks.finish(tp, "tp_pieces_test");
  });
}
