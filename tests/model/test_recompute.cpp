// Activation checkpointing (ModelSlice::recompute, see common/gpt2.cpp) against the model
// that keeps every activation. Full recomputes each block's forward from the block's kept
// input, with the same weights and ops; selective rebuilds ln1, ln2 and fch_gelu from
// kept tensors. Either way every loss, weight gradient, stage output and gradient of the
// stage input must have the same bits -- with one exception the model documents:
// selective in emulated bf16 rebuilds fch_gelu from the rounded fch, so mlp.c_proj's
// weight gradients (and only those) may differ; a block-level test pins the rebuilt value
// down bit for bit instead. Checked on the whole model and on first, middle and last
// pipeline stages, in fp32, emulated bf16 and double (full recompute also in bf16
// storage, GPT2<bf16>), with two micro-batches in flight
// (both forwards before either backward, as GPipe runs them: the second forward
// overwrites the one working set, so the first backward must recompute). Negative
// control: the second micro-batch's loss scaled by 1 + 2^-10 must be seen. Memory: the
// bytes each mode keeps are counted here from the buffers' definitions, not from the
// model's own sums.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/gpt2.h"
#include "kernels/ops.h"
#include "tests/model/model_fixture.h"
#include "tests/ops/gradcheck.h"

using namespace gpt;
using gpt::test::Rng;
using gpt::test::same_bits;
using gpt::test::stage_of;
using gpt::test::stage_slice;
using gpt::test::stored;
using gpt::test::tiny_model;
using gpt::test::two_stage_run;

namespace {

using gpt::test::kBatch;
using gpt::test::kInFlight;
using gpt::test::kSeqLen;

template <class A>
GPT2<A> make(const ModelConfig& m, LayerRange layers, Recompute recompute, Precision precision) {
  return gpt::test::make_stage<A>(m, layers, precision, /*split_backward=*/false, recompute);
}

// What two micro-batches through a model give: the losses, the stage outputs (stages
// before the last), the weight gradients and the gradients of the stage inputs (stages
// after the first), each in double.
struct Training {
  std::vector<double> losses, outputs, grads, input_grads;
};

// Two micro-batches through `model`, both forwards first, from weights, tokens, stage
// inputs and output gradients drawn from seed 11: float values, so a double model gets
// exactly the float models' inputs. `scale_second` perturbs the second loss scale.
template <class A>
Training train_two(GPT2<A>& model, bool scale_second = false) {
  using G = GradOf<A>;
  const ModelConfig& m = model.model();
  const size_t N = size_t(kBatch) * kSeqLen, RC = N * size_t(m.n_embd);
  Rng rng(11);
  auto draw = [&](double scale) { return float(scale * rng.normal()); };
  std::vector<G> w(model.params().size());
  for (G& x : w) x = G(draw(0.02));
  model.set_params(w.data());
  std::vector<std::vector<int32_t>> tokens(kInFlight), targets(kInFlight);
  std::vector<std::vector<A>> input(kInFlight), out_grad(kInFlight);
  for (int mb = 0; mb < kInFlight; ++mb)
    for (size_t i = 0; i < N; ++i) tokens[mb].push_back(rng.below(m.vocab_size)), targets[mb].push_back(rng.below(m.vocab_size));
  for (int mb = 0; mb < kInFlight; ++mb)
    for (size_t i = 0; i < RC; ++i)
      input[mb].push_back(stored<A>(draw(1))), out_grad[mb].push_back(stored<A>(draw(0.01)));
  model.zero_grads();
  Training t;
  for (int mb = 0; mb < kInFlight; ++mb) {  // every forward first
    if (!model.first_stage()) std::memcpy(model.stage_input(mb), input[mb].data(), RC * sizeof(A));
    t.losses.push_back(double(model.forward_micro(mb, tokens[mb].data(), targets[mb].data())));
    if (!model.last_stage()) {
      for (size_t i = 0; i < RC; ++i) t.outputs.push_back(double(cpu::widen(model.stage_output(mb)[i])));
      std::memcpy(model.output_grad(mb), out_grad[mb].data(), RC * sizeof(A));
    }
  }
  for (int mb = 0; mb < kInFlight; ++mb) {
    model.backward_micro(mb, scale_second && mb == 1 ? G(0.5 * (1 + 0x1p-10)) : G(0.5));
    if (!model.first_stage())
      for (size_t i = 0; i < RC; ++i) t.input_grads.push_back(double(cpu::widen(model.output_grad(mb)[i])));
  }
  t.grads.assign(model.grads().data(), model.grads().data() + model.grads().size());
  return t;
}

bool same(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}
bool same(const Training& a, const Training& b) {
  return same(a.losses, b.losses) && same(a.outputs, b.outputs) && same(a.grads, b.grads) &&
         same(a.input_grads, b.input_grads);
}

template <class A>
void check_recompute(Recompute mode, LayerRange layers, Precision precision) {
  const ModelConfig m = tiny_model();
  GPT2<A> plain = make<A>(m, layers, Recompute::None, precision), recomputing = make<A>(m, layers, mode, precision);
  CHECK(same(train_two(plain), train_two(recomputing)));
}

// The element ranges of each of a stage's blocks' mlp.c_proj weight, [C, 4C] at tp = 1,
// in its buffers.
std::vector<std::pair<size_t, size_t>> fcproj_ranges(const GPT2<float>& model) {
  const size_t C = size_t(model.model().n_embd);
  std::vector<std::pair<size_t, size_t>> r;
  for (int l = model.layout().layer_begin(); l < model.layout().layer_end(); ++l) {
    const size_t begin = size_t(model.layout().block(l).fcproj_w);
    r.emplace_back(begin, begin + C * 4 * C);
  }
  return r;
}

}  // namespace

TEST_CASE("model: recomputing activations in the backward gives the same bits", "[model]") {
  for (const Recompute mode : {Recompute::Full, Recompute::Selective}) {
    INFO(recompute_name(mode));
    check_recompute<float>(mode, LayerRange{}, Precision::FP32);
    check_recompute<double>(mode, LayerRange{}, Precision::FP32);
    check_recompute<float>(mode, LayerRange{0, 2}, Precision::FP32);   // first stage
    check_recompute<float>(mode, LayerRange{1, 2}, Precision::FP32);   // middle stage
    check_recompute<double>(mode, LayerRange{1, 3}, Precision::FP32);  // last stage
  }
  check_recompute<float>(Recompute::Full, LayerRange{}, Precision::BF16);  // emulated bf16
  check_recompute<float>(Recompute::Full, LayerRange{0, 2}, Precision::BF16);
  check_recompute<bf16>(Recompute::Full, LayerRange{}, Precision::BF16);  // bf16 storage (stages 01-11)
  check_recompute<bf16>(Recompute::Full, LayerRange{1, 2}, Precision::BF16);
}

TEST_CASE("model: block_rebuild_cheap writes what the block's forward wrote (bf16: the GELU of the rounded fch)",
          "[model]") {
  // One block, run forward; its cheap buffers and the layernorms' statistics are then
  // overwritten with NaN and rebuilt. The layernorms must come back bit for bit. The GELU
  // comes back as gelu of the stored fch, rounded as the mode stores it: in fp32 that is
  // what the forward kept; in emulated bf16 the forward took it from c_fc's output before
  // rounding, so some elements must differ (else the two would be one claim).
  constexpr int B = 2, T = 8, N = B * T, C = 16, NH = 4, F = 4 * C;
  const BlockDims dims{C, NH, C / NH, F};
  for (const Precision precision : {Precision::FP32, Precision::BF16}) {
    INFO(precision_name(precision));
    const PieceContext ctx{Device::CPU, precision};
    Rng rng(3);
    // The block's tensors in BlockTensors order, in one buffer; layernorm scales about 1.
    const size_t sizes[] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, F * C, F, C * F, C};
    std::vector<float> buffer;
    std::vector<size_t> offsets;
    for (const size_t n : sizes) {
      offsets.push_back(buffer.size());
      for (size_t i = 0; i < n; ++i) buffer.push_back(float(0.2 * rng.normal()));
    }
    for (const int ln : {0, 6})
      for (size_t i = 0; i < C; ++i) buffer[offsets[size_t(ln)] + i] += 1;
    ctx.round(buffer.data(), buffer.size());
    const float* p = buffer.data();
    const BlockWeights<float> w{p + offsets[0], p + offsets[1], p + offsets[2],  p + offsets[3],
                                p + offsets[4], p + offsets[5], p + offsets[6],  p + offsets[7],
                                p + offsets[8], p + offsets[9], p + offsets[10], p + offsets[11]};
    std::vector<float> x(size_t(N) * C);
    for (float& v : x) v = float(rng.normal());
    ctx.round(x.data(), x.size());
    BlockActivations<float> act(Device::CPU, dims, B, T, N);
    BlockScratch<float> scratch(Device::CPU, dims, N, N);
    ModelHooks<float> none;
    block_forward(ctx, dims, w, x.data(), act, scratch, none, B, T, N);
    std::vector<DeviceArray<float>*> rebuilt = {&act.ln1, &act.ln1_mean, &act.ln1_rstd, &act.ln2,
                                                &act.ln2_mean, &act.ln2_rstd, &act.fch_gelu};
    std::vector<std::vector<float>> kept;
    for (DeviceArray<float>* a : rebuilt) {
      kept.emplace_back(a->data(), a->data() + a->size());
      std::fill(a->data(), a->data() + a->size(), std::nanf(""));
    }
    block_rebuild_cheap(ctx, dims, w, x.data(), act, B, T, N);
    for (size_t k = 0; k + 1 < rebuilt.size(); ++k) CHECK(same_bits(rebuilt[k]->data(), kept[k].data(), kept[k].size()));
    std::vector<float> gelu_of_stored(act.fch.size());
    ops::gelu_forward(Device::CPU, gelu_of_stored.data(), act.fch.data(), gelu_of_stored.size());
    ctx.round(gelu_of_stored.data(), gelu_of_stored.size());
    CHECK(same_bits(act.fch_gelu.data(), gelu_of_stored.data(), gelu_of_stored.size()));
    const bool as_kept = same_bits(act.fch_gelu.data(), kept.back().data(), kept.back().size());
    CHECK(as_kept == (precision == Precision::FP32));
  }
}

TEST_CASE("model: selective recompute in emulated bf16 changes only mlp.c_proj's weight gradients", "[model]") {
  // Only mlp.c_proj's weight gradient reads fch_gelu (its input gradient reads the
  // weight), so every loss, stage output, input gradient and other weight gradient keeps
  // its bits; c_proj's weight gradients see the rebuilt GELU (the test above pins it down)
  // and so must differ. A middle stage, so that outputs and input gradients are compared.
  const ModelConfig m = tiny_model();
  GPT2<float> plain = make<float>(m, LayerRange{1, 2}, Recompute::None, Precision::BF16);
  GPT2<float> selective = make<float>(m, LayerRange{1, 2}, Recompute::Selective, Precision::BF16);
  Training kept = train_two(plain), rebuilt = train_two(selective);
  REQUIRE(!kept.outputs.empty());
  REQUIRE(!kept.input_grads.empty());
  CHECK(same(kept.losses, rebuilt.losses));
  CHECK(same(kept.outputs, rebuilt.outputs));
  CHECK(same(kept.input_grads, rebuilt.input_grads));
  bool differs = false;
  // How far: the rebuilt GELU reads its input rounded to bf16 (relative 2^-9), and
  // |x gelu'(x)| <= 1.13 |x| <= 2.3 |gelu(x)| + 0.34 for the inputs that matter, so each
  // value moves by about 3 half-ulps of bf16 and the weight gradient, a sum of them
  // weighted by the output gradient, by at most 2^-6 of its norm (4 bf16 ulps; measured
  // 2.8e-3, about 2^-8.5). A GELU rebuilt from anything but that rounded input moves it by O(1).
  // Negative control: the rebuilt gradients 1 + 2^-5 too large must be beyond the bound
  // (the bound accepts a gradient scaled by up to about 1 + 2^-6).
  const double control_scale = 1.0 + std::ldexp(1.0, -5);
  double diff2 = 0, norm2 = 0, control2 = 0;
  for (const auto& [begin, end] : fcproj_ranges(plain))
    for (size_t i = begin; i < end; ++i) {
      diff2 += (kept.grads[i] - rebuilt.grads[i]) * (kept.grads[i] - rebuilt.grads[i]);
      norm2 += kept.grads[i] * kept.grads[i];
      const double wrong = control_scale * rebuilt.grads[i];
      control2 += (kept.grads[i] - wrong) * (kept.grads[i] - wrong);
    }
  INFO("mlp.c_proj weight gradients: selective vs kept " << std::sqrt(diff2 / norm2) << " of their norm, "
       << "the control " << std::sqrt(control2 / norm2));
  CHECK(norm2 > 0);
  CHECK(std::sqrt(diff2) <= std::ldexp(1.0, -6) * std::sqrt(norm2));
  CHECK(std::sqrt(control2) > std::ldexp(1.0, -6) * std::sqrt(norm2));
  for (const auto& [begin, end] : fcproj_ranges(plain)) {
    for (size_t i = begin; i < end; ++i) differs = differs || kept.grads[i] != rebuilt.grads[i];
    // The rest of the comparison: c_proj's weight gradients set aside in both runs.
    std::fill(kept.grads.begin() + long(begin), kept.grads.begin() + long(end), 0.0);
    std::fill(rebuilt.grads.begin() + long(begin), rebuilt.grads.begin() + long(end), 0.0);
  }
  CHECK(differs);  // the rebuild really ran, from the rounded fch
  CHECK(same(kept.grads, rebuilt.grads));
}

TEST_CASE("model: the recompute comparison sees a loss scaled by 1 + 2^-10", "[model]") {
  const ModelConfig m = tiny_model();
  for (const Recompute mode : {Recompute::Full, Recompute::Selective}) {
    GPT2<float> plain = make<float>(m, LayerRange{}, Recompute::None, Precision::FP32);
    GPT2<float> recomputing = make<float>(m, LayerRange{}, mode, Precision::FP32);
    CHECK_FALSE(same(train_two(plain), train_two(recomputing, /*scale_second=*/true)));
  }
}

TEST_CASE("model: what each recompute mode keeps per block and micro-batch", "[model]") {
  // One block's activations on one rank, from the buffers BlockActivations lists:
  // ln1, resid2, ln2, resid3 (C each), qkv (3C), atty (C), fch and fch_gelu (4C each): 16 C
  // values a row of A; the two layernorms' mean and rstd (4 a row) and the attention's
  // logsumexp (n_head a row) of GradOf<A>. Full keeps C a row (the output); selective
  // all but ln1, ln2 and fch_gelu (6 C a row). Each mode also holds one working set for
  // the block running now: what a micro-batch's block does not keep.
  const ModelConfig m = tiny_model();
  const size_t rows = size_t(kBatch) * kSeqLen, C = size_t(m.n_embd);
  const size_t block_bytes = rows * 16 * C * sizeof(float) + rows * (4 + size_t(m.n_head)) * sizeof(float);
  const size_t cheap_bytes = rows * 6 * C * sizeof(float);
  // The whole model: its embedding's and head's buffers are the same in every mode and
  // cancel in the difference.
  const GPT2<float> plain = make<float>(m, LayerRange{}, Recompute::None, Precision::FP32);
  const GPT2<float> full = make<float>(m, LayerRange{}, Recompute::Full, Precision::FP32);
  const GPT2<float> selective = make<float>(m, LayerRange{}, Recompute::Selective, Precision::FP32);
  const size_t blocks = size_t(m.n_layer) * kInFlight;  // block activation sets the plain model keeps
  CHECK(plain.activation_bytes() - full.activation_bytes() == blocks * (block_bytes - rows * C * sizeof(float)) - block_bytes);
  CHECK(plain.activation_bytes() - selective.activation_bytes() == blocks * cheap_bytes - cheap_bytes);
}

TEST_CASE("model: full recompute with a split backward is refused, selective is not", "[model]") {
  ModelSlice<float> slice{1, 0, false, nullptr, {}, LayerRange{}, 1, /*split_backward=*/true};
  slice.recompute = Recompute::Full;
  REQUIRE_THROWS_WITH(GPT2<float>(tiny_model(), kBatch, kSeqLen, Device::CPU, Precision::FP32, true, slice),
                      Catch::Contains("full recompute with split_backward"));
  slice.recompute = Recompute::Selective;  // its bits: model_backward_split
  REQUIRE_NOTHROW(GPT2<float>(tiny_model(), kBatch, kSeqLen, Device::CPU, Precision::FP32, true, slice));
}


TEST_CASE("model: pipeline stages can share one recompute working set", "[model]") {
  // One block runs at a time on a rank, so a rank's chunks may recompute into one set:
  // the same bits as each keeping its own, one set fewer counted by the stages.
  const ModelConfig m = tiny_model();
  for (const Recompute mode : {Recompute::Full, Recompute::Selective}) {
    INFO(recompute_name(mode));
    ModelSlice<float> first_slice = stage_slice<float>(LayerRange{0, 2}, mode);
    ModelSlice<float> last_slice = first_slice;
    last_slice.layers = LayerRange{2, 3};
    auto make_stage = [&](const ModelSlice<float>& slice) { return stage_of(m, slice); };
    GPT2<float> own_first = make_stage(first_slice), own_last = make_stage(last_slice);
    BlockActivations<float> shared = GPT2<float>::working_block_for(m, kBatch, kSeqLen, Device::CPU, first_slice);
    first_slice.working_block = last_slice.working_block = &shared;
    GPT2<float> shared_first = make_stage(first_slice), shared_last = make_stage(last_slice);
    Rng a(5), b(5);
    const std::vector<float> own = two_stage_run(own_first, own_last, a);
    const std::vector<float> with_shared = two_stage_run(shared_first, shared_last, b);
    REQUIRE(own.size() == with_shared.size());
    CHECK(same_bits(own.data(), with_shared.data(), own.size()));
    // Each stage that owns its set counts it; sharing stages leave it to the owner.
    CHECK(own_first.activation_bytes() - shared_first.activation_bytes() == shared.bytes());
    CHECK(own_last.activation_bytes() - shared_last.activation_bytes() == shared.bytes());
    // A set of other block shapes (another micro-batch size) is refused, and so is the
    // other mode's set.
    BlockActivations<float> other = GPT2<float>::working_block_for(m, 2 * kBatch, kSeqLen, Device::CPU, first_slice);
    first_slice.working_block = &other;
    REQUIRE_THROWS_WITH(make_stage(first_slice), Catch::Contains("not the one this model's slice needs"));
    ModelSlice<float> other_mode = first_slice;
    other_mode.recompute = mode == Recompute::Full ? Recompute::Selective : Recompute::Full;
    BlockActivations<float> other_set = GPT2<float>::working_block_for(m, kBatch, kSeqLen, Device::CPU, other_mode);
    first_slice.working_block = &other_set;
    REQUIRE_THROWS_WITH(make_stage(first_slice), Catch::Contains("not the one this model's slice needs"));
  }
}
