// What the model tests that compare two ways of running GPT2 share: a small model
// (3 layers, so a pipeline stage can be first, middle or last), a stage of it with two
// micro-batches in flight, and a bitwise comparison.
#pragma once
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/config.h"
#include "common/gpt2.h"
#include "common/gpt2_layout.h"
#include "kernels/cpu/bf16.h"
#include "tests/ops/gradcheck.h"

namespace gpt::test {

inline ModelConfig tiny_model() {
  ModelConfig m;
  m.n_layer = 3, m.n_embd = 32, m.n_head = 4, m.block_size = 16, m.vocab_size = 200;
  return m;
}

constexpr int kBatch = 2, kSeqLen = 16, kInFlight = 2;

// How a pipeline stage of one tp rank holds the layers `layers`: kInFlight micro-batches
// in flight, the backward split in two or the activations recomputed as asked.
template <class A>
ModelSlice<A> stage_slice(LayerRange layers, Recompute recompute, bool split_backward = false) {
  ModelSlice<A> slice{1, 0, false, nullptr, {}, layers, kInFlight, split_backward};
  slice.recompute = recompute;
  return slice;
}

// Model m's stage of `slice` on the CPU, B = kBatch sequences of kSeqLen tokens.
template <class A>
GPT2<A> stage_of(const ModelConfig& m, const ModelSlice<A>& slice, Precision precision = Precision::FP32) {
  return GPT2<A>(m, kBatch, kSeqLen, Device::CPU, precision, true, slice);
}

// The layers `layers` of model m on the CPU (stage_slice, stage_of).
template <class A>
GPT2<A> make_stage(const ModelConfig& m, LayerRange layers, Precision precision, bool split_backward,
                   Recompute recompute) {
  return stage_of<A>(m, stage_slice<A>(layers, recompute, split_backward), precision);
}

// The initial weights of `seed` for model m, in the master type of A's model (float, or
// double for the fp64 model), for set_params().
template <class A>
std::vector<GradOf<A>> initial_weights(const ModelConfig& m, uint64_t seed) {
  const ParamLayout layout(m);
  std::vector<GradOf<A>> weights(size_t(layout.total()));
  layout.init_range(seed, 0, layout.total(), weights.data());
  return weights;
}

// Whether a[0..n) and b[0..n) hold the same bits.
template <class T>
bool same_bits(const T* a, const T* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(T)) == 0;  // memcmp may not see the null data of empty vectors
}

// x as storage type A holds it: bf16 rounds (to nearest even); float and double keep it.
template <class A>
A stored(float x) {
  if constexpr (std::is_same_v<A, bf16>) return bf16{cpu::bf16_bits(x)};
  else return A(x);
}

// A two-stage pipeline run by hand (first stage layers 0-1, last stage layer 2; or two
// chunks of one rank), two micro-batches, both forwards first; returns the last stage's losses and both stages'
// weight gradients.
inline std::vector<float> two_stage_run(GPT2<float>& first, GPT2<float>& last, Rng& rng) {
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
    for (size_t i = 0; i < N; ++i)
      tokens[mb].push_back(rng.below(m.vocab_size)), targets[mb].push_back(rng.below(m.vocab_size));
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
  for (GPT2<float>* stage : {&first, &last})
    out.insert(out.end(), stage->grads().data(), stage->grads().data() + stage->grads().size());
  return out;
}

}  // namespace gpt::test
