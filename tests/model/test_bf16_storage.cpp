// bf16 storage (GPT2<bf16>: weights and activations in 2-byte buffers, what every stage
// trains with in bf16 mode, on the CPU and the GPU) against its emulation (GPT2<float> in
// bf16 mode: fp32 buffers, every activation rounded to bf16 after the op that writes it),
// both on the CPU. The CPU's bf16 ops widen to fp32, run the fp32 kernel and round once
// (kernels/cpu/bf16_ops.h), so the two must agree bit for bit: every loss, every weight
// gradient (fp32 in both), every stage output and input gradient, and the weights after
// AdamW and SGD steps. A difference means bf16 storage rounds where the emulation, whose
// rounding points are few and plain to read, does not, or the reverse.
//
// Checked on the whole model and on first, middle and last pipeline stages, with two
// micro-batches in flight, the backward fused and split (zero-bubble), and with the
// activations recomputed. Negative controls: the fp32 model (no rounding) must differ,
// and so must the emulation with one micro-batch's loss scale off by 2^-10.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "common/gpt2.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/ops.h"
#include "tests/model/model_fixture.h"
#include "tests/ops/gradcheck.h"

using namespace gpt;
using gpt::test::kBatch;
using gpt::test::kInFlight;
using gpt::test::kSeqLen;
using gpt::test::Rng;
using gpt::test::same_bits;
using gpt::test::tiny_model;

namespace {

// The fp32 value of a stored element (bf16: exact).
using cpu::widen;
// x as the storage type holds it (model_fixture.h): the callers pass bf16 values already,
// so the emulation sees what bf16 storage holds.
using gpt::test::stored;

// How a model is run: its layers (a pipeline stage or all), the backward fused or split
// in two halves, the activations kept or recomputed.
struct Variant {
  LayerRange layers;
  bool split_backward = false;
  Recompute recompute = Recompute::None;
};

// What a model computes over `steps` optimizer steps of two micro-batches each: every
// loss, stage output and input gradient, every weight gradient, and the fp32 master
// weights at the end, all as fp32 values.
struct Run {
  std::vector<float> losses, outputs, input_grads, grads, weights;
};

// `steps` steps of the model (A, precision) in `variant`: both forwards of a step before
// either backward (as GPipe runs them), then AdamW (or SGD) on fp32 master weights whose
// bf16 copy the model computes with -- as stage 01 does in bf16 mode. Weights, tokens,
// stage inputs and output gradients come from seed 5, rounded to bf16, so every model
// starts from the same values. `loss_scale_error` perturbs the second micro-batch's scale.
template <class A>
Run train(Precision precision, const Variant& variant, int steps, bool sgd, double loss_scale_error = 0) {
  using G = GradOf<A>;
  static_assert(std::is_same_v<G, float>, "the emulation and bf16 storage both keep fp32 gradients");
  const ModelConfig m = tiny_model();
  GPT2<A> model = gpt::test::make_stage<A>(m, variant.layers, precision, variant.split_backward, variant.recompute);
  const size_t N = size_t(kBatch) * kSeqLen, RC = N * size_t(m.n_embd), P = model.params().size();
  Rng rng(5);
  auto draw = [&](double scale) { return cpu::bf16_round(float(scale * rng.normal())); };
  std::vector<float> master(P), adam_m(P, 0.0f), adam_v(P, 0.0f);
  for (float& w : master) w = draw(0.02);
  model.set_params(master.data());
  Run run;
  for (int step = 1; step <= steps; ++step) {
    model.zero_grads();
    for (int mb = 0; mb < kInFlight; ++mb) {  // every forward first
      std::vector<int32_t> tokens(N), targets(N);
      for (size_t i = 0; i < N; ++i) tokens[i] = rng.below(m.vocab_size), targets[i] = rng.below(m.vocab_size);
      if (!model.first_stage())
        for (size_t i = 0; i < RC; ++i) model.stage_input(mb)[i] = stored<A>(draw(1));
      run.losses.push_back(model.forward_micro(mb, tokens.data(), targets.data()));
      if (!model.last_stage()) {
        for (size_t i = 0; i < RC; ++i) run.outputs.push_back(widen(model.stage_output(mb)[i]));
        for (size_t i = 0; i < RC; ++i) model.output_grad(mb)[i] = stored<A>(draw(0.01));
      }
    }
    for (int mb = 0; mb < kInFlight; ++mb) {
      // 1/3, not a power of two: scaling by it rounds, so where the scale is applied matters.
      const G scale = G((mb == 1 ? 1 + loss_scale_error : 1) / 3.0);
      if (variant.split_backward) model.backward_input_micro(mb, scale);
      else model.backward_micro(mb, scale);
      if (!model.first_stage())
        for (size_t i = 0; i < RC; ++i) run.input_grads.push_back(widen(model.output_grad(mb)[i]));
    }
    if (variant.split_backward)
      for (int mb = 0; mb < kInFlight; ++mb) model.backward_weight_micro(mb);
    const G* g = model.grads().data();
    run.grads.insert(run.grads.end(), g, g + P);
    const ops::AdamWArgs args{1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, step, sgd};
    // The update writes the compute copy: bf16 storage takes it rounded; the emulation's
    // float copy is rounded to bf16 values (copy_bf16).
    ops::adamw_update(Device::CPU, master.data(), g, adam_m.data(), adam_v.data(), P, args, model.params().data(),
                      /*copy_bf16=*/precision == Precision::BF16);
  }
  run.weights = master;
  return run;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}
// Every part of two runs, each reported apart so that a failure says which.
void check_same(const Run& a, const Run& b) {
  CHECK(same(a.losses, b.losses));
  CHECK(same(a.outputs, b.outputs));
  CHECK(same(a.input_grads, b.input_grads));
  CHECK(same(a.grads, b.grads));
  CHECK(same(a.weights, b.weights));
}
bool all_same(const Run& a, const Run& b) {
  return same(a.losses, b.losses) && same(a.outputs, b.outputs) && same(a.input_grads, b.input_grads) &&
         same(a.grads, b.grads) && same(a.weights, b.weights);
}

}  // namespace

TEST_CASE("model: bf16 storage on the CPU computes the emulation's bits", "[model][bf16]") {
  const std::vector<std::pair<const char*, Variant>> variants = {
      {"whole model", {}},
      {"first stage", {LayerRange{0, 2}}},
      {"middle stage", {LayerRange{1, 2}}},
      {"last stage", {LayerRange{1, 3}}},
      {"split backward, middle stage", {LayerRange{1, 2}, true}},
      {"split backward, whole model", {LayerRange{}, true}},
      {"full recompute", {LayerRange{}, false, Recompute::Full}},
      {"selective recompute, middle stage", {LayerRange{1, 2}, false, Recompute::Selective}},
  };
  for (const auto& [name, variant] : variants) {
    INFO(name);
    const Run storage = train<bf16>(Precision::BF16, variant, 3, /*sgd=*/false);
    const Run emulation = train<float>(Precision::BF16, variant, 3, /*sgd=*/false);
    REQUIRE(storage.losses.size() == 6);
    check_same(storage, emulation);
  }
}

TEST_CASE("model: bf16 storage widening its large operands in small slices keeps the bits", "[model][bf16]") {
  // The ops widen the logits and their gradient a slice at a time (kernels/cpu/bf16_ops.h);
  // at the default size these shapes fit one slice, so here slices of 64 floats (two rows
  // of the 32-wide activations, under one row of the 256-wide logits) cut every large
  // operand of the model.
  cpu::set_bf16_slice_floats(64);
  const Run sliced = train<bf16>(Precision::BF16, {}, 3, /*sgd=*/false);
  cpu::set_bf16_slice_floats(size_t(16) << 20);
  const Run emulation = train<float>(Precision::BF16, {}, 3, /*sgd=*/false);
  check_same(sliced, emulation);
}

TEST_CASE("model: one SGD step in bf16 storage equals the emulation's", "[model][bf16]") {
  // AdamW's normalisation (m / sqrt(v)) would hide a gradient scaled by a constant; a plain
  // SGD step moves each weight by lr * gradient, so the weights see the gradient itself.
  for (const LayerRange layers : {LayerRange{}, LayerRange{1, 2}}) {
    const Run storage = train<bf16>(Precision::BF16, {layers}, 1, /*sgd=*/true);
    const Run emulation = train<float>(Precision::BF16, {layers}, 1, /*sgd=*/true);
    check_same(storage, emulation);
  }
}

TEST_CASE("model: the bf16 comparison rejects what differs (negative controls)", "[model][bf16]") {
  const Run storage = train<bf16>(Precision::BF16, {}, 3, /*sgd=*/false);
  // The fp32 model rounds nothing: its activations, and so its losses, must differ.
  const Run fp32 = train<float>(Precision::FP32, {}, 3, /*sgd=*/false);
  CHECK_FALSE(same(storage.losses, fp32.losses));
  CHECK_FALSE(all_same(storage, fp32));
  // A loss scale 2^-10 off (well above fp32's resolution) on one micro-batch.
  const Run off = train<float>(Precision::BF16, {}, 3, /*sgd=*/false, 0x1p-10);
  CHECK_FALSE(same(storage.grads, off.grads));
  CHECK_FALSE(all_same(storage, off));
  // The same for one SGD step on a last stage (it has the loss), where the input gradients
  // show it too.
  const Run sgd = train<bf16>(Precision::BF16, {LayerRange{1, 3}}, 1, /*sgd=*/true);
  const Run sgd_off = train<float>(Precision::BF16, {LayerRange{1, 3}}, 1, /*sgd=*/true, 0x1p-10);
  CHECK_FALSE(same(sgd.input_grads, sgd_off.input_grads));
  CHECK_FALSE(same(sgd.weights, sgd_off.weights));
}

TEST_CASE("model: set_params rounds fp32 weights to bf16 in both the storage and its emulation", "[model][bf16]") {
  // Weights not representable in bf16 (the master weights after any step): both models
  // must hold them rounded to nearest even, the same bits. The trained comparisons above
  // start from weights already rounded, so they cannot see a set_params that forgets to.
  const ModelConfig m = tiny_model();
  GPT2<bf16> storage(m, kBatch, kSeqLen, Device::CPU, Precision::BF16);
  GPT2<float> emulation(m, kBatch, kSeqLen, Device::CPU, Precision::BF16);
  Rng rng(9);
  std::vector<float> master(storage.params().size());
  for (float& w : master) w = float(0.02 * rng.normal());
  storage.set_params(master.data());
  emulation.set_params(master.data());
  size_t rounded = 0;
  for (size_t i = 0; i < master.size(); ++i) {
    const float want = widen(bf16{cpu::bf16_bits(master[i])});
    rounded += want != master[i];
    if (widen(storage.params().data()[i]) != want || emulation.params().data()[i] != want) {
      FAIL_CHECK("weight " << i << ": " << master[i] << " held as " << widen(storage.params().data()[i]) << " and "
                          << emulation.params().data()[i] << ", not " << want);
      break;
    }
  }
  CHECK(rounded > master.size() / 2);  // the test weights do need rounding
}
