// The backward in two halves (common/model_backward_split.h) against the fused backward:
// the input half then the weight half must give the fused call's bits, in every weight
// gradient and in the gradient of the stage's input, because each weight gradient is the
// same call on the same values. Checked on the whole model (embedding, blocks, head) and
// on a middle pipeline stage (blocks only: its input arrives from the stage before, the
// gradient of its output from the stage after), in fp32 and double, over two micro-batches
// accumulated, and for the emulated bf16 mode. Negative controls: leaving out the weight
// half of the second micro-batch, and scaling its loss by 1 + 2^-10, must each be seen.
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

template <class A>
GPT2<A> make(const ModelConfig& m, LayerRange layers, bool split, Precision precision,
             Recompute recompute = Recompute::None) {
  return gpt::test::make_stage<A>(m, layers, precision, split, recompute);
}

// How the split runs are to go wrong for the negative controls.
enum class Fault { None, SkipSecondWeights, ScaleSecond };

// Two micro-batches through `fused` (backward_micro) and `split` (the two halves, both
// inputs first, as a zero-bubble schedule runs them); true when every weight gradient and
// the gradient of each micro-batch's stage input have the same bits.
template <class A>
bool same_gradients(GPT2<A>& fused, GPT2<A>& split, Rng& rng, Fault fault = Fault::None) {
  using G = GradOf<A>;
  const ModelConfig& m = fused.model();
  const size_t N = size_t(fused.batch()) * fused.seq_len(), RC = N * size_t(m.n_embd);
  // The same weights on both (a pipeline stage cannot initialise itself: any values do).
  std::vector<G> w(fused.params().size());
  for (G& x : w) x = G(0.02 * rng.normal());
  fused.set_params(w.data());
  split.set_params(w.data());
  for (GPT2<A>* model : {&fused, &split}) model->zero_grads();
  std::vector<std::vector<int32_t>> tokens(2), targets(2);
  std::vector<std::vector<A>> input(2), out_grad(2);
  for (int mb = 0; mb < 2; ++mb) {
    for (size_t i = 0; i < N; ++i) tokens[mb].push_back(rng.below(m.vocab_size)), targets[mb].push_back(rng.below(m.vocab_size));
    for (size_t i = 0; i < RC; ++i) input[mb].push_back(A(rng.normal())), out_grad[mb].push_back(A(0.01 * rng.normal()));
  }
  auto forward = [&](GPT2<A>& model, int slot, int mb) {
    if (!model.first_stage()) std::memcpy(model.stage_input(slot), input[mb].data(), RC * sizeof(A));
    model.forward_micro(slot, tokens[mb].data(), targets[mb].data());
    if (!model.last_stage()) std::memcpy(model.output_grad(slot), out_grad[mb].data(), RC * sizeof(A));
  };
  std::vector<std::vector<A>> fused_in_grad(2), split_in_grad(2);
  for (int mb = 0; mb < 2; ++mb) {
    forward(fused, mb, mb);
    fused.backward_micro(mb, G(0.5));
    fused_in_grad[mb].assign(fused.output_grad(mb), fused.output_grad(mb) + RC);
  }
  const G second_scale = fault == Fault::ScaleSecond ? G(0.5 * (1 + 0x1p-10)) : G(0.5);
  forward(split, 0, 0);
  forward(split, 1, 1);
  split.backward_input_micro(0, G(0.5));
  split_in_grad[0].assign(split.output_grad(0), split.output_grad(0) + RC);
  split.backward_input_micro(1, second_scale);  // both inputs first, as a zero-bubble schedule may
  split_in_grad[1].assign(split.output_grad(1), split.output_grad(1) + RC);
  split.backward_weight_micro(0);
  if (fault != Fault::SkipSecondWeights) split.backward_weight_micro(1);
  bool same = same_bits(fused.grads().data(), split.grads().data(), fused.grads().size());
  if (!fused.first_stage())
    for (int mb = 0; mb < 2; ++mb) same = same && same_bits(fused_in_grad[mb].data(), split_in_grad[mb].data(), RC);
  return same;
}

template <class A>
void check_split(LayerRange layers, Precision precision, Recompute split_recompute = Recompute::None) {
  const ModelConfig m = tiny_model();
  GPT2<A> fused = make<A>(m, layers, false, precision);
  GPT2<A> split = make<A>(m, layers, true, precision, split_recompute);
  Rng rng(7);
  CHECK(same_gradients(fused, split, rng));
}

}  // namespace

TEST_CASE("model: the backward in two halves gives the fused backward's bits", "[model]") {
  SECTION("whole model, fp32") { check_split<float>(LayerRange{}, Precision::FP32); }
  SECTION("whole model, emulated bf16") { check_split<float>(LayerRange{}, Precision::BF16); }
  SECTION("whole model, double") { check_split<double>(LayerRange{}, Precision::FP32); }
  SECTION("middle pipeline stage, fp32") { check_split<float>(LayerRange{1, 2}, Precision::FP32); }
  SECTION("first stage, fp32") { check_split<float>(LayerRange{0, 2}, Precision::FP32); }
  SECTION("last stage, double") { check_split<double>(LayerRange{2, 3}, Precision::FP32); }
}

TEST_CASE("model: the two halves with selective recompute give the fused backward's bits", "[model]") {
  // The weight half rebuilds ln1, ln2 and fch_gelu into the one working set; with both
  // micro-batches' input halves first, then both weight halves, each weight half must
  // rebuild its own micro-batch's (fp32 and double on the CPU: the same bits as kept).
  SECTION("whole model, fp32") { check_split<float>(LayerRange{}, Precision::FP32, Recompute::Selective); }
  SECTION("middle pipeline stage, fp32") { check_split<float>(LayerRange{1, 2}, Precision::FP32, Recompute::Selective); }
  SECTION("last stage, double") { check_split<double>(LayerRange{2, 3}, Precision::FP32, Recompute::Selective); }
}

TEST_CASE("model: the split-backward comparison sees a missing weight half and a scaled loss", "[model]") {
  const ModelConfig m = tiny_model();
  for (Fault fault : {Fault::SkipSecondWeights, Fault::ScaleSecond}) {
    INFO("fault " << int(fault));
    GPT2<float> fused = make<float>(m, LayerRange{}, false, Precision::FP32);
    GPT2<float> split = make<float>(m, LayerRange{}, true, Precision::FP32);
    Rng rng(7);
    CHECK_FALSE(same_gradients(fused, split, rng, fault));
  }
}

TEST_CASE("model: a slot outside [0, in_flight) is refused by every per-micro-batch call", "[model]") {
  const ModelConfig m = tiny_model();
  GPT2<float> split = make<float>(m, LayerRange{}, true, Precision::FP32);  // in_flight 2
  std::vector<int32_t> tokens(size_t(split.batch()) * split.seq_len(), 1);
  for (int slot : {-1, 2}) {
    INFO("slot " << slot);
    REQUIRE_THROWS_WITH(split.forward_micro(slot, tokens.data(), tokens.data()),
                        Catch::Contains("forward_micro: slot " + std::to_string(slot) + " of 2"));
    REQUIRE_THROWS_WITH(split.backward_micro(slot, 1.0f), Catch::Contains("backward_micro: slot"));
    REQUIRE_THROWS_WITH(split.backward_input_micro(slot, 1.0f), Catch::Contains("backward_input_micro: slot"));
    REQUIRE_THROWS_WITH(split.backward_weight_micro(slot), Catch::Contains("backward_weight_micro: slot"));
  }
  // In range, the same calls run (a forward, then the two halves).
  split.forward_micro(1, tokens.data(), tokens.data());
  split.backward_input_micro(1, 1.0f);
  REQUIRE_NOTHROW(split.backward_weight_micro(1));
}
