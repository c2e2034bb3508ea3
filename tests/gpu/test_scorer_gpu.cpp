// The multiple-choice scorer's model on the GPU (common/choices_eval.h): an inference-only
// model made for a longer window runs a shorter one in its buffers (GPT2::set_seq_len)
// and computes the head over some positions alone (GPT2::evaluate_spans, its rows gathered
// by device-to-device copies). Its losses at those positions are held against float64 on
// the CPU (the truth), in fp32 and bf16 storage: within 4 x the error of the GPU's own
// plain evaluate() of a model made that short + 8 eps32 (the oracle's bound,
// tests/oracle/README.md). On the CPU the same is bit for bit (model_sampler); on the GPU
// a head of fewer rows may run other GEMM tiles. Negative control: the truth one position
// later must exceed the bound.
#include "tests/gpu/gpu_test.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/gpt2.h"
#include "tests/model/model_fixture.h"

using namespace gpt;

namespace {

ModelConfig scorer_model() {  // head size 64, GPT-2's: the attention runs the flash kernels
  ModelConfig m;
  m.n_layer = 2, m.n_embd = 128, m.n_head = 2, m.block_size = 64, m.vocab_size = 256;
  return m;
}

constexpr int B = 3, kLongest = 40, kShort = 23;

std::vector<int32_t> tokens(int count, int mul, int add) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int32_t((i * size_t(mul) + size_t(add)) % 256);
  return v;
}
const std::vector<int32_t> kInputs = tokens(B * kShort, 37, 5), kTargets = tokens(B * kShort, 19, 2);
// Spans within a sequence and across the end of one into the next.
const std::vector<ScoredSpan> kSpans = {{2, 5}, {kShort + 3, 9}, {2 * kShort - 4, 11}};

template <class A>
ModelSlice<A> inference() {
  ModelSlice<A> s;
  s.inference_only = true;
  return s;
}

// The losses of every position of a model made kShort long, on device d.
template <class A>
std::vector<double> plain_losses(Device d, Precision p) {
  GPT2<A> model(scorer_model(), B, kShort, d, p, true, inference<A>());
  model.set_params(on_device(d, test::initial_weights<A>(scorer_model(), 3)).data());
  model.evaluate(kInputs.data(), kTargets.data());
  std::vector<GradOf<A>> host(size_t(B) * kShort);
  device_copy(Device::CPU, host.data(), d, model.losses(), host.size() * sizeof(GradOf<A>));
  return std::vector<double>(host.begin(), host.end());
}

// The spans' losses out of every position's, shifted by `later` positions.
std::vector<double> at_spans(const std::vector<double>& all, int later = 0) {
  std::vector<double> out;
  for (const ScoredSpan& s : kSpans)
    out.insert(out.end(), all.begin() + s.first + later, all.begin() + s.first + later + s.count);
  return out;
}

// The scorer's path: a model made kLongest long, a forward at that length first (its
// buffers full of other values), then kShort with the head over the spans.
template <class A>
std::vector<double> scorer_losses(Precision p) {
  GPT2<A> model(scorer_model(), B, kLongest, Device::CUDA, p, true, inference<A>());
  model.set_params(on_device(Device::CUDA, test::initial_weights<A>(scorer_model(), 3)).data());
  const std::vector<int32_t> long_in = tokens(B * kLongest, 11, 1), long_tg = tokens(B * kLongest, 13, 4);
  model.evaluate(long_in.data(), long_tg.data());
  model.set_seq_len(kShort);
  model.evaluate_spans(kInputs.data(), kTargets.data(), kSpans);
  size_t scored = 0;
  for (const ScoredSpan& s : kSpans) scored += size_t(s.count);
  std::vector<GradOf<A>> host(scored);
  device_copy(Device::CPU, host.data(), Device::CUDA, model.losses(), host.size() * sizeof(GradOf<A>));
  return std::vector<double>(host.begin(), host.end());
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

template <class A>
void check_scorer(Precision p) {
  const std::vector<double> truth_all = plain_losses<double>(Device::CPU, Precision::FP64);
  const std::vector<double> truth = at_spans(truth_all);
  const double base = relative_error(at_spans(plain_losses<A>(Device::CUDA, p)), truth);
  const std::vector<double> scored = scorer_losses<A>(p);
  const double err = relative_error(scored, truth), bound = 4 * base + 8 * std::ldexp(1.0, -23);
  INFO(precision_name(p) << ": scorer " << err << ", the GPU's plain evaluate " << base << ", bound " << bound);
  CHECK(err <= bound);
  CHECK(relative_error(scored, at_spans(truth_all, 1)) > bound);  // control: the next positions
}

}  // namespace

TEST_CASE("scorer on the GPU: a shorter window and the head over spans, as close to float64 as evaluate()",
          "[gpu]") {
  SECTION("fp32") { check_scorer<float>(Precision::FP32); }
  SECTION("bf16 storage") { check_scorer<bf16>(Precision::BF16); }
}
