// The cached decoder (common/decoder.h) on the GPU: every step's logits against the whole
// window's forward in float64 on the CPU (the truth), in fp32 and in bf16 storage. On the
// GPU the two paths run different kernels (the key-block attention and GEMMs of one row
// against the flash attention and GEMMs of the window), so they are not the same bits as
// on the CPU; the decoder must be as close to the truth as the GPU's own window forward:
// within 4 x that forward's error + 8 eps32 (the oracle's bound, tests/oracle/README.md).
// Head size 64, GPT-2's: the window's attention runs the flash kernels. Negative control,
// which only attention can tell apart: the truth of the same tokens with the first one
// changed, from row 1 on (every later row differs only through the keys it attends to),
// must exceed the bound.
#include "tests/gpu/gpu_test.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/decoder.h"
#include "common/gpt2.h"
#include "common/gpt2_layout.h"
#include "tests/model/model_fixture.h"

using namespace gpt;

namespace {

ModelConfig decoder_model() {
  ModelConfig m;
  m.n_layer = 2, m.n_embd = 128, m.n_head = 2, m.block_size = 128, m.vocab_size = 256;
  return m;
}

const std::vector<int> kTokens = {72, 105, 33, 7, 200, 13, 13, 90, 4, 250, 65, 66, 32, 101, 118, 101, 114,
                                  3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 32, 38};

using Rows = std::vector<std::vector<double>>;


// Copies the real vocabulary columns of a logits row.
void keep_row(Rows& rows, const std::vector<float>& row) {
  rows.emplace_back(row.begin(), row.begin() + decoder_model().vocab_size);
}

template <class A>
Rows window_rows(Device d, Precision p, const std::vector<int>& tokens = kTokens) {
  GPT2<A> model(decoder_model(), 1, int(tokens.size()), d, p);
  const std::vector<GradOf<A>> w = test::initial_weights<A>(decoder_model(), 1);
  model.set_params(on_device(d, w).data());
  const std::vector<int32_t> input(tokens.begin(), tokens.end());
  model.forward(input.data(), nullptr);
  Rows rows;
  std::vector<float> row(size_t(decoder_model().padded_vocab()));
  for (size_t t = 0; t < kTokens.size(); ++t) {
    model.logits_row(int(t), row.data());
    keep_row(rows, row);
  }
  return rows;
}

template <class A>
Rows decoder_rows(Precision p) {
  CachedDecoder<A> decoder(decoder_model(), int(kTokens.size()), Device::CUDA, p);
  const std::vector<GradOf<A>> w = test::initial_weights<A>(decoder_model(), 1);
  decoder.model().set_params(on_device(Device::CUDA, w).data());
  Rows rows;
  std::vector<float> row(size_t(decoder_model().padded_vocab()));
  for (const int token : kTokens) {
    decoder.step(token, row.data());
    keep_row(rows, row);
  }
  return rows;
}

// max |a - b| over max |b|, rows first.. of both.
double relative_error(const Rows& a, const Rows& b, size_t first = 0) {
  double diff = 0, scale = 0;
  for (size_t t = first; t < b.size(); ++t)
    for (size_t v = 0; v < a[t].size(); ++v) {
      diff = std::max(diff, std::abs(a[t][v] - b[t][v]));
      scale = std::max(scale, std::abs(b[t][v]));
    }
  return diff / scale;
}

template <class A>
void check_decoder(Precision p) {
  const Rows truth = window_rows<double>(Device::CPU, Precision::FP64);
  const double base = relative_error(window_rows<A>(Device::CUDA, p), truth);
  const Rows cached = decoder_rows<A>(p);
  const double err = relative_error(cached, truth), bound = 4 * base + 8 * std::ldexp(1.0, -23);
  INFO(precision_name(p) << ": decoder " << err << ", the GPU's window forward " << base << ", bound " << bound);
  CHECK(err <= bound);
  std::vector<int> changed = kTokens;
  changed[0] = (changed[0] + 1) % decoder_model().vocab_size;
  const Rows other = window_rows<double>(Device::CPU, Precision::FP64, changed);
  CHECK(relative_error(cached, other, 1) > bound);  // control: another first key, seen by attention alone
}

}  // namespace

TEST_CASE("decoder on the GPU: each step's logits as close to float64 as the window forward's", "[gpu]") {
  SECTION("fp32") { check_decoder<float>(Precision::FP32); }
  SECTION("bf16 storage") { check_decoder<bf16>(Precision::BF16); }
}
