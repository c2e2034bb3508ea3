// Activation checkpointing (ModelSlice::recompute, see common/gpt2.cpp) against the model
// that keeps every activation: the backward recomputes each block's forward from the
// block's kept input, with the same weights and ops, so every loss, weight gradient,
// stage output and gradient of the stage input must have the same bits. Checked on the
// whole model and on first, middle and last pipeline stages, in fp32, emulated bf16 and
// double, with two micro-batches in flight (both forwards before either backward, as
// GPipe runs them: the second forward overwrites the one shared activation set, so the
// first backward must recompute). Negative control: the second micro-batch's loss scaled
// by 1 + 2^-10 must be seen. Memory: a recomputing micro-batch keeps rows x C values per
// block, counted here from the buffers' definitions, not from the model's own sums.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "common/gpt2.h"
#include "tests/model/model_fixture.h"
#include "tests/ops/gradcheck.h"

using namespace gpt;
using gpt::test::Rng;
using gpt::test::same_bits;
using gpt::test::tiny_model;

namespace {

using gpt::test::kBatch;
using gpt::test::kInFlight;
using gpt::test::kSeqLen;

template <class A>
GPT2<A> make(const ModelConfig& m, LayerRange layers, bool recompute, Precision precision) {
  return gpt::test::make_stage<A>(m, layers, precision, /*split_backward=*/false, recompute);
}

// Two micro-batches through `plain` and `recomputing`, both forwards first; true when the
// losses, the stage outputs, every weight gradient and the gradients of the stage inputs
// have the same bits. `scale_second` perturbs the recomputing model's second loss scale.
template <class A>
bool same_training(GPT2<A>& plain, GPT2<A>& recomputing, Rng& rng, bool scale_second = false) {
  using G = GradOf<A>;
  const ModelConfig& m = plain.model();
  const size_t N = size_t(kBatch) * kSeqLen, RC = N * size_t(m.n_embd);
  std::vector<G> w(plain.params().size());
  for (G& x : w) x = G(0.02 * rng.normal());  // any weights do: both models get the same
  plain.set_params(w.data());
  recomputing.set_params(w.data());
  std::vector<std::vector<int32_t>> tokens(kInFlight), targets(kInFlight);
  std::vector<std::vector<A>> input(kInFlight), out_grad(kInFlight);
  for (int mb = 0; mb < kInFlight; ++mb)
    for (size_t i = 0; i < N; ++i) tokens[mb].push_back(rng.below(m.vocab_size)), targets[mb].push_back(rng.below(m.vocab_size));
  for (int mb = 0; mb < kInFlight; ++mb)
    for (size_t i = 0; i < RC; ++i) input[mb].push_back(A(rng.normal())), out_grad[mb].push_back(A(0.01 * rng.normal()));
  bool same = true;
  for (GPT2<A>* model : {&plain, &recomputing}) model->zero_grads();
  std::vector<G> losses[2];
  std::vector<std::vector<A>> outputs[2], in_grads[2];
  GPT2<A>* models[2] = {&plain, &recomputing};
  for (int k = 0; k < 2; ++k) {
    GPT2<A>& model = *models[k];
    for (int mb = 0; mb < kInFlight; ++mb) {  // every forward first
      if (!model.first_stage()) std::memcpy(model.stage_input(mb), input[mb].data(), RC * sizeof(A));
      losses[k].push_back(model.forward_micro(mb, tokens[mb].data(), targets[mb].data()));
      if (!model.last_stage()) {
        outputs[k].emplace_back(model.stage_output(mb), model.stage_output(mb) + RC);
        std::memcpy(model.output_grad(mb), out_grad[mb].data(), RC * sizeof(A));
      }
    }
    for (int mb = 0; mb < kInFlight; ++mb) {
      const bool perturb = k == 1 && mb == 1 && scale_second;
      model.backward_micro(mb, perturb ? G(0.5 * (1 + 0x1p-10)) : G(0.5));
      in_grads[k].emplace_back(model.output_grad(mb), model.output_grad(mb) + RC);
    }
  }
  same = same && same_bits(losses[0].data(), losses[1].data(), losses[0].size());
  for (size_t i = 0; i < outputs[0].size(); ++i)
    same = same && same_bits(outputs[0][i].data(), outputs[1][i].data(), outputs[0][i].size());
  same = same && same_bits(plain.grads().data(), recomputing.grads().data(), plain.grads().size());
  if (!plain.first_stage())
    for (int mb = 0; mb < kInFlight; ++mb) same = same && same_bits(in_grads[0][mb].data(), in_grads[1][mb].data(), RC);
  return same;
}

template <class A>
void check_recompute(LayerRange layers, Precision precision) {
  const ModelConfig m = tiny_model();
  GPT2<A> plain = make<A>(m, layers, false, precision), recomputing = make<A>(m, layers, true, precision);
  Rng rng(11);
  CHECK(same_training(plain, recomputing, rng));
}

}  // namespace

TEST_CASE("model: recomputing activations in the backward gives the same bits", "[model]") {
  SECTION("whole model, fp32") { check_recompute<float>(LayerRange{}, Precision::FP32); }
  SECTION("whole model, emulated bf16") { check_recompute<float>(LayerRange{}, Precision::BF16); }
  SECTION("whole model, double") { check_recompute<double>(LayerRange{}, Precision::FP32); }
  SECTION("first stage, fp32") { check_recompute<float>(LayerRange{0, 2}, Precision::FP32); }
  SECTION("middle stage, fp32") { check_recompute<float>(LayerRange{1, 2}, Precision::FP32); }
  SECTION("last stage, double") { check_recompute<double>(LayerRange{1, 3}, Precision::FP32); }
}

TEST_CASE("model: the recompute comparison sees a loss scaled by 1 + 2^-10", "[model]") {
  const ModelConfig m = tiny_model();
  GPT2<float> plain = make<float>(m, LayerRange{}, false, Precision::FP32);
  GPT2<float> recomputing = make<float>(m, LayerRange{}, true, Precision::FP32);
  Rng rng(11);
  CHECK_FALSE(same_training(plain, recomputing, rng, /*scale_second=*/true));
}

TEST_CASE("model: a recomputing micro-batch keeps only each block's output", "[model]") {
  // One block's activations on one rank, from the buffers BlockActivations lists:
  // ln1, resid2, ln2, resid3 (C each), qkv (3C), atty (C), fch and fch_gelu (4C each): 16 C
  // values a row of A; the two layernorms' mean and rstd (4 a row) and the attention's
  // logsumexp (n_head a row) of GradOf<A>.
  const ModelConfig m = tiny_model();
  const size_t rows = size_t(kBatch) * kSeqLen, C = size_t(m.n_embd);
  const size_t block_bytes = rows * 16 * C * sizeof(float) + rows * (4 + size_t(m.n_head)) * sizeof(float);
  // The whole model: its embedding's and head's buffers are the same with and without
  // recompute and cancel in the difference.
  const GPT2<float> plain = make<float>(m, LayerRange{}, false, Precision::FP32);
  const GPT2<float> recomputing = make<float>(m, LayerRange{}, true, Precision::FP32);
  const size_t blocks = size_t(m.n_layer) * kInFlight;  // block activation sets the plain model keeps
  // Recompute keeps rows x C per block and micro-batch, and one set of a block's
  // activations for the block being recomputed.
  const size_t saved = blocks * block_bytes - (blocks * rows * C * sizeof(float) + block_bytes);
  CHECK(plain.activation_bytes() - recomputing.activation_bytes() == saved);
}

TEST_CASE("model: recompute with a split backward is refused", "[model]") {
  ModelSlice<float> slice{1, 0, false, nullptr, {}, LayerRange{}, 1, /*split_backward=*/true};
  slice.recompute = true;
  REQUIRE_THROWS_WITH(GPT2<float>(tiny_model(), kBatch, kSeqLen, Device::CPU, Precision::FP32, true, slice),
                      Catch::Contains("recompute with split_backward"));
}

namespace {

// A two-stage pipeline run by hand (first stage layers 0-1, last stage layer 2), two
// micro-batches, both forwards first; returns the last stage's losses and both stages'
// weight gradients.
std::vector<float> two_stage_run(GPT2<float>& first, GPT2<float>& last, Rng& rng) {
  const ModelConfig& m = first.model();
  const size_t N = size_t(kBatch) * kSeqLen, RC = N * size_t(m.n_embd);
  for (GPT2<float>* stage : {&first, &last}) {
    std::vector<float> w(stage->params().size());
    for (float& x : w) x = float(0.02 * rng.normal());
    stage->set_params(w.data());
    stage->zero_grads();
  }
  std::vector<std::vector<int32_t>> tokens(kInFlight), targets(kInFlight);
  for (int mb = 0; mb < kInFlight; ++mb)
    for (size_t i = 0; i < N; ++i) tokens[mb].push_back(rng.below(m.vocab_size)), targets[mb].push_back(rng.below(m.vocab_size));
  std::vector<float> out;
  for (int mb = 0; mb < kInFlight; ++mb) {
    first.forward_micro(mb, tokens[mb].data(), targets[mb].data());
    std::memcpy(last.stage_input(mb), first.stage_output(mb), RC * sizeof(float));
    out.push_back(last.forward_micro(mb, tokens[mb].data(), targets[mb].data()));
  }
  for (int mb = 0; mb < kInFlight; ++mb) {
    last.backward_micro(mb, 0.5f);
    std::memcpy(first.output_grad(mb), last.output_grad(mb), RC * sizeof(float));
    first.backward_micro(mb, 0.5f);
  }
  for (GPT2<float>* stage : {&first, &last}) out.insert(out.end(), stage->grads().data(), stage->grads().data() + stage->grads().size());
  return out;
}

}  // namespace

TEST_CASE("model: pipeline stages can share one recompute working set", "[model]") {
  // One block runs at a time on a rank, so a rank's chunks may recompute into one set:
  // the same bits as each keeping its own, one set fewer counted by the stages.
  const ModelConfig m = tiny_model();
  ModelSlice<float> first_slice{1, 0, false, nullptr, {}, LayerRange{0, 2}, kInFlight, false};
  first_slice.recompute = true;
  ModelSlice<float> last_slice = first_slice;
  last_slice.layers = LayerRange{2, 3};
  auto make_stage = [&](const ModelSlice<float>& slice) {
    return GPT2<float>(m, kBatch, kSeqLen, Device::CPU, Precision::FP32, true, slice);
  };
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
  // A set of other block shapes (another micro-batch size) is refused.
  BlockActivations<float> other = GPT2<float>::working_block_for(m, 2 * kBatch, kSeqLen, Device::CPU, first_slice);
  first_slice.working_block = &other;
  REQUIRE_THROWS_WITH(make_stage(first_slice), Catch::Contains("other block shapes"));
}
