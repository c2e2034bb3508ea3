// The sampler (common/sampler.h). Attention is causal, so the positions after the last
// token of a context never reach the logits the sampler reads: a model whose window is
// just the prompt plus the tokens to sample (sample_window) must give the logits, bit for
// bit, and so the tokens, of a model of the whole seq_len, in fp32 and in bf16 storage.
// Negative controls: other weights sample other tokens, and a window shorter than the
// context (which then slides) gives other logits.
//
// The cached decoder (common/decoder.h) computes the same logits one token at a time:
// step t equals row t of the window's forward bit for bit on the CPU, in fp64, fp32 and
// bf16 storage (the same ops on the same row). The tokens it samples, its window sliding
// included, are the plain generate's, and so is the sum of their log-probabilities, which
// is also replayed from each window's logits. Controls: row t + 1 differs; a cache one
// position short samples other tokens once the context outgrows it; a term counted twice.
//
// Inference-only models (sampling, the multiple-choice eval): the training model's numbers
// without gradient buffers, shorter sequences in the buffers of a longer one, and the head
// over some positions only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "common/config.h"
#include "common/decoder.h"
#include "common/error.h"
#include "common/gpt2.h"
#include "common/gpt2_layout.h"
#include "common/sampler.h"
#include "tests/model/model_fixture.h"

using namespace gpt;

namespace {

ModelConfig sampler_model() {
  ModelConfig m;
  m.n_layer = 2, m.n_embd = 32, m.n_head = 4, m.block_size = 128, m.vocab_size = 256;
  return m;
}

// A batch-1 model of `window` positions with the initial weights of `seed`.
template <class A>
struct Sampler {
  GPT2<A> model;
  Sampler(int window, uint64_t seed, Precision precision)
      : model(sampler_model(), 1, window, Device::CPU, precision) {
    model.set_params(test::initial_weights<A>(sampler_model(), seed).data());
  }
  // The logits after the last token of `context` (left-aligned in the window, as generate does).
  std::vector<float> last_logits(const std::vector<int>& context) {
    std::vector<int32_t> input(size_t(model.seq_len()), 0);
    for (size_t i = 0; i < context.size(); ++i) input[i] = context[i];
    model.forward(input.data(), nullptr);
    std::vector<float> row(size_t(model.model().padded_vocab()));
    model.logits_row(int(context.size()) - 1, row.data());
    return row;
  }
  std::vector<int> sample(int tokens) {
    uint64_t counter = 0;
    return generate(model, {72, 105, 33}, SampleOptions{tokens, 1.0, 0, 5, {}}, counter);
  }
};

// Greedy sampling (top_k 1) appends, token after token, the argmax of the logits after
// the context so far: generate reads the row of the last token, not another.
void check_greedy_reads_last_row() {
  Sampler<float> s(16, 3, Precision::FP32);
  std::vector<int> context = {65};
  uint64_t counter = 0;
  const std::vector<int> sampled = generate(s.model, context, SampleOptions{6, 1.0, 1, 5, {}}, counter);
  REQUIRE(sampled.size() == 7);
  for (size_t n = 1; n < sampled.size(); ++n) {
    const std::vector<float> row = s.last_logits(std::vector<int>(sampled.begin(), sampled.begin() + long(n)));
    const auto best = std::max_element(row.begin(), row.begin() + sampler_model().vocab_size) - row.begin();
    INFO("token " << n);
    CHECK(sampled[n] == int(best));
  }
  CHECK(counter == 6);  // one draw per token
}

template <class A>
void check_short_window(Precision precision) {
  Sampler<A> whole(64, 1, precision), fitted(3 + 20, 1, precision);
  const std::vector<int> context = {72, 105, 33, 7, 200, 13, 13, 90};
  for (size_t len = 1; len <= context.size(); ++len) {
    const std::vector<int> part(context.begin(), context.begin() + long(len));
    const std::vector<float> a = whole.last_logits(part), b = fitted.last_logits(part);
    INFO("context of " << len << " tokens");
    CHECK(test::same_bits(a.data(), b.data(), a.size()));
  }
  CHECK(whole.sample(20) == fitted.sample(20));
  // Controls: other weights, and a window of 4 that the 8-token context overruns.
  Sampler<A> other(64, 2, precision), cut(4, 1, precision);
  CHECK(whole.sample(20) != other.sample(20));
  const std::vector<float> a = whole.last_logits(context);
  std::vector<int> last4(context.end() - 4, context.end());
  const std::vector<float> c = cut.last_logits(last4);
  CHECK_FALSE(test::same_bits(a.data(), c.data(), a.size()));
}

// The initial weights of `seed` for sampler_model(), in the master type of A's model.
template <class A>
std::vector<GradOf<A>> initial_weights(uint64_t seed) {
  return test::initial_weights<A>(sampler_model(), seed);
}

// Every position's logits (real vocabulary columns) of `tokens`, from the window's forward.
template <class A>
std::vector<std::vector<double>> window_logits(const std::vector<int>& tokens, Precision precision) {
  Sampler<A> s(int(tokens.size()), 1, precision);
  std::vector<int32_t> input(tokens.begin(), tokens.end());
  s.model.forward(input.data(), nullptr);
  std::vector<std::vector<double>> rows;
  std::vector<float> row(size_t(sampler_model().padded_vocab()));
  for (size_t t = 0; t < tokens.size(); ++t) {
    s.model.logits_row(int(t), row.data());
    rows.emplace_back(row.begin(), row.begin() + sampler_model().vocab_size);
  }
  return rows;
}

// The same from the cached decoder, one step per token.
template <class A>
std::vector<std::vector<double>> decoder_logits(const std::vector<int>& tokens, Precision precision) {
  CachedDecoder<A> decoder(sampler_model(), int(tokens.size()), Device::CPU, precision);
  const std::vector<GradOf<A>> weights = initial_weights<A>(1);
  decoder.model().set_params(weights.data());
  std::vector<std::vector<double>> rows;
  std::vector<float> row(size_t(sampler_model().padded_vocab()));
  for (const int token : tokens) {
    decoder.step(token, row.data());
    rows.emplace_back(row.begin(), row.begin() + sampler_model().vocab_size);
  }
  CHECK(decoder.length() == int(tokens.size()));
  return rows;
}

// max |a - b| over max |b|, row t of a against row t + shift of b.
double relative_error(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b,
                      size_t shift = 0) {
  double diff = 0, scale = 0;
  for (size_t t = 0; t + shift < b.size(); ++t)
    for (size_t v = 0; v < a[t].size(); ++v) {
      diff = std::max(diff, std::abs(a[t][v] - b[t + shift][v]));
      scale = std::max(scale, std::abs(b[t + shift][v]));
    }
  return diff / scale;
}

// 90 tokens: more than one tile of the CPU's flash attention (kCpuFlashTile keys), so the
// rescaling between key tiles is compared too.
std::vector<int> decoder_tokens() {
  std::vector<int> tokens;
  for (int i = 0; i < 90; ++i) tokens.push_back((i * 37 + 11) % 256);
  return tokens;
}
const std::vector<int> kTokens = decoder_tokens();

}  // namespace

// Bit for bit: every op runs on the step's one row as on that row of the window, and the
// key-block attention tiles the keys from position 0 as the window's flash attention does
// (common/decoder.h says why).
template <class A>
void check_steps_are_window_rows(Precision precision) {
  const auto window = window_logits<A>(kTokens, precision);
  const auto cached = decoder_logits<A>(kTokens, precision);
  CHECK(relative_error(cached, window) == 0.0);
  CHECK(relative_error(cached, window, 1) > 0.0);  // control: the next row
}

TEST_CASE("decoder: each step's logits are the window forward's row, bit for bit on the CPU", "[sampler]") {
  SECTION("fp64") { check_steps_are_window_rows<double>(Precision::FP64); }
  SECTION("fp32") { check_steps_are_window_rows<float>(Precision::FP32); }
  SECTION("bf16 storage") { check_steps_are_window_rows<bf16>(Precision::BF16); }
}

TEST_CASE("decoder: window_step runs a short context whole, left-aligned, as the plain sampler does",
          "[sampler]") {
  // What every token takes once the window slides, and on a GPU whose key-block kernels
  // cannot take the model's heads: row count - 1 of the window's forward.
  const auto window = window_logits<float>(kTokens, Precision::FP32);
  CachedDecoder<float> decoder(sampler_model(), int(kTokens.size()), Device::CPU, Precision::FP32);
  const std::vector<float> weights = initial_weights<float>(1);
  decoder.model().set_params(weights.data());
  std::vector<float> row(size_t(sampler_model().padded_vocab()));
  for (const int count : {1, 5, 70, int(kTokens.size())}) {
    decoder.window_step(kTokens.data(), count, row.data());
    const std::vector<double> got(row.begin(), row.begin() + sampler_model().vocab_size);
    INFO(count << " tokens");
    CHECK(got == window[size_t(count) - 1]);
    CHECK(got != window[size_t(count) % kTokens.size()]);  // control: another row
  }
}

TEST_CASE("decoder: generate with the cache samples the plain generate's tokens, its window sliding",
          "[sampler]") {
  // A window of 12 and 30 tokens after a 5-token prompt: the context outgrows the window
  // after 7 tokens, and the cache starts again for every token after that.
  const int window = 12;
  const std::vector<int> prompt = {72, 105, 33, 7, 200};
  // after_token is called once a token by both forms (the lead's reports to waiting
  // ranks ride on it, common/lead_work.h), after that token is drawn.
  // log_prob receives the sum of the drawn tokens' log-probabilities.
  std::vector<uint64_t> counter_at_call;
  uint64_t* counting = nullptr;
  double log_prob = 0;
  const SampleOptions opt{30, 1.0, 0, 11,
                          [&] {
                            counter_at_call.push_back(*counting);
                            return true;
                          },
                          &log_prob};
  Sampler<double> plain(window, 1, Precision::FP64);
  uint64_t plain_counter = 0;
  counting = &plain_counter;
  const std::vector<int> want = generate(plain.model, prompt, opt, plain_counter);
  std::vector<uint64_t> each_token(30);
  std::iota(each_token.begin(), each_token.end(), uint64_t(1));
  CHECK(counter_at_call == each_token);
  // The sum replayed here: token n's log-softmax (temperature 1, every token a candidate)
  // in the logits after the window's last tokens before it, in long double. Each term
  // is a double computed in another order (about 1e-15 of the log of the vocabulary),
  // so the 30 agree with generate's sum to far better than 1e-12 of it.
  std::vector<long double> token_log_p;
  for (size_t n = prompt.size(); n < want.size(); ++n) {
    const size_t first = n > size_t(window) ? n - size_t(window) : 0;
    const std::vector<float> row =
        plain.last_logits(std::vector<int>(want.begin() + long(first), want.begin() + long(n)));
    long double top = row[0], sum = 0;
    for (int i = 0; i < sampler_model().vocab_size; ++i) top = std::max<long double>(top, row[size_t(i)]);
    for (int i = 0; i < sampler_model().vocab_size; ++i) sum += std::exp((long double)row[size_t(i)] - top);
    token_log_p.push_back((long double)row[size_t(want[n])] - top - std::log(sum));
  }
  const double replayed = double(std::accumulate(token_log_p.begin(), token_log_p.end(), 0.0L));
  CHECK(log_prob == Approx(replayed).epsilon(1e-12));
  // Control: one token's term counted twice is off by far more.
  CHECK(log_prob + double(token_log_p[7]) != Approx(replayed).epsilon(1e-12));
  const double plain_log_prob = log_prob;

  const std::vector<double> weights = initial_weights<double>(1);
  CachedDecoder<double> decoder(sampler_model(), window, Device::CPU, Precision::FP64);
  decoder.model().set_params(weights.data());
  uint64_t counter = 0;
  counting = &counter;
  counter_at_call.clear();
  log_prob = 0;
  CHECK(generate(decoder, prompt, opt, counter) == want);
  CHECK(counter == plain_counter);
  CHECK(counter_at_call == each_token);
  CHECK(log_prob == plain_log_prob);  // the same logits, bit for bit: the same sum
  // after_token returning false ends the sample there: after 4 of the 30 tokens, the
  // first 4 of them.
  SampleOptions cut = opt;
  cut.after_token = [&] { return counter < 4; };
  counter = 0;
  log_prob = 0;
  const std::vector<int> short_sample = generate(decoder, prompt, cut, counter);
  CHECK(short_sample == std::vector<int>(want.begin(), want.begin() + std::ptrdiff_t(prompt.size() + 4)));
  CHECK(counter == 4);
  const long double first_four = std::accumulate(token_log_p.begin(), token_log_p.begin() + 4, 0.0L);
  CHECK(log_prob == Approx(double(first_four)).epsilon(1e-12));
  // Control: a cache one position short sees one token less once the context outgrows it.
  CachedDecoder<double> short_cache(sampler_model(), window - 1, Device::CPU, Precision::FP64);
  short_cache.model().set_params(weights.data());
  counter = 0;
  CHECK(generate(short_cache, prompt, opt, counter) != want);
}

TEST_CASE("sampler: a window of the prompt plus the sampled tokens samples what the whole seq_len does",
          "[sampler]") {
  SECTION("fp32") { check_short_window<float>(Precision::FP32); }
  SECTION("bf16 storage") { check_short_window<bf16>(Precision::BF16); }
}

TEST_CASE("sampler: greedy sampling appends the argmax of the last token's logits", "[sampler]") {
  check_greedy_reads_last_row();
}

TEST_CASE("sampler: sample_window is the prompt's bytes (1 when empty) plus sample_tokens, at most seq_len", "[sampler]") {
  Config cfg;
  cfg.tokenizer = "bytes", cfg.prompt = "abc", cfg.sample_tokens = 20;
  CHECK(sample_window(cfg, 64) == 23);
  CHECK(sample_window(cfg, 16) == 16);
  cfg.prompt = "";  // the start token alone
  CHECK(sample_window(cfg, 64) == 21);
}

TEST_CASE("sampler: top-k and temperature", "[sampler]") {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.0f};
  // top_k 1 is the argmax whatever the draw; a temperature near 0 too.
  for (double u : {0.0, 0.3, 0.999}) {
    CHECK(sample_token(logits.data(), 4, 1.0, 1, u) == 1);
    CHECK(sample_token(logits.data(), 4, 1e-6, 0, u) == 1);
  }
  // top_k 2 at temperature 1: weights e^0 and e^-1 for ids 1 and 3, so a draw below
  // 1 / (1 + e^-1) = 0.731 picks 1 and one above it picks 3; id 0 and 2 never.
  CHECK(sample_token(logits.data(), 4, 1.0, 2, 0.73) == 1);
  CHECK(sample_token(logits.data(), 4, 1.0, 2, 0.74) == 3);
  CHECK(sample_token(logits.data(), 4, 1.0, 2, 0.999) == 3);
  // The drawn token's log-probability among the candidates: with top_k 2, id 3's is
  // -1 - log(1 + e^-1); with all four at temperature 2 (logits halved), id 2's is
  // 0.5 - log(1 + e^1.5 + e^0.5 + e^1), from the draw that picks it (its interval of
  // the weights' running sum, in decreasing order 1, 3, 2, 0: after e^1.5 + e^1).
  double log_p = 0;
  CHECK(sample_token(logits.data(), 4, 1.0, 2, 0.74, &log_p) == 3);
  CHECK(log_p == Approx(-1.0 - std::log(1.0 + std::exp(-1.0))).epsilon(1e-12));
  const double all = std::exp(0.0) + std::exp(1.5) + std::exp(0.5) + std::exp(1.0);
  const double before_2 = (std::exp(1.5) + std::exp(1.0)) / all, width_2 = std::exp(0.5) / all;
  CHECK(sample_token(logits.data(), 4, 2.0, 0, before_2 + width_2 / 2, &log_p) == 2);
  CHECK(log_p == Approx(0.5 - std::log(all)).epsilon(1e-12));
  // A temperature of 0 would pick the least likely candidate (exp(0 / 0) is nan): refused.
  CHECK_THROWS_AS(sample_token(logits.data(), 4, 0.0, 0, 0.5), gpt::InternalError);
  // Logits that are not finite (a diverged model): refused, naming the token, not sampled.
  for (const float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> broken = logits;
    broken[2] = bad;
    CHECK_THROWS_WITH(sample_token(broken.data(), 4, 1.0, 0, 0.5), Catch::Contains("logit of token 2"));
  }
}

// A draw just below 1 can outlast every weight: the weights' sum rounds up, and the draw
// times that sum, less each weight in turn, stays above 0 (these logits, found by search,
// do that with the draw 1 - 2^-53; the test first checks that they still do, in its own
// doubles). The pick is then the last candidate with any weight, never the one after it
// whose weight underflowed to 0 (log-probability -inf: the old fall-through's pick).
TEST_CASE("sampler: a draw left past the last weight by rounding picks the last token with weight", "[sampler]") {
  const std::vector<float> logits = {1.7772181034088135f, 1.3809133768081665f, -0.9399451613426208f,
                                     -1.4494750499725342f, -1.4792511463165283f, -1.0e4f};
  const double uniform = 1.0 - 0x1p-53;
  double sum = 0;  // sample_token's arithmetic: the logits are in decreasing order already
  std::vector<double> w;
  for (float l : logits) sum += w.emplace_back(std::exp(double(l) - double(logits[0])));
  REQUIRE(w.back() == 0.0);
  double target = uniform * sum;
  for (double x : w) target -= x;
  REQUIRE(target > 0);  // the draw outlasts every weight
  double log_p = 0;
  CHECK(sample_token(logits.data(), int(logits.size()), 1.0, 0, uniform, &log_p) == 4);
  CHECK(log_p == std::log(w[4] / sum));
  CHECK(std::isfinite(log_p));
}

// Sampling and evaluation build their models inference_only: no gradient buffers (the
// weights' gradients, the logits' and the residual stream's), and the same arithmetic, so
// the same loss and logits bit for bit as a model that trains. Controls: backward is
// refused, and the memory saved is exactly those three buffers.
template <class A>
void check_inference_only(Precision precision) {
  const ModelConfig m = sampler_model();
  const int B = 2, T = 24;
  ModelSlice<A> inference;
  inference.inference_only = true;
  GPT2<A> trains(m, B, T, Device::CPU, precision), infers(m, B, T, Device::CPU, precision, true, inference);
  const std::vector<GradOf<A>> weights = initial_weights<A>(4);
  trains.set_params(weights.data());
  infers.set_params(weights.data());
  std::vector<int32_t> inputs(size_t(B) * T), targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t((i * 53 + 7) % 256);
    targets[i] = int32_t((i * 29 + 3) % 256);
  }
  const double trained_loss = double(trains.forward(inputs.data(), targets.data()));
  CHECK(double(infers.forward(inputs.data(), targets.data())) == trained_loss);
  CHECK(double(infers.evaluate(inputs.data(), targets.data())) == trained_loss);
  CHECK(test::same_bits(trains.logits(), infers.logits(), size_t(B) * T * m.padded_vocab()));
  CHECK(trains.grads().size() == size_t(trains.layout().total()));
  CHECK(infers.grads().empty());
  CHECK(infers.grad_bytes() == 0);
  const size_t d_logits = size_t(B) * T * m.padded_vocab() * sizeof(A), d_resid = size_t(B) * T * m.n_embd * sizeof(A);
  CHECK(trains.activation_bytes() - infers.activation_bytes() == d_logits + d_resid);
  CHECK_THROWS_AS(infers.backward(GradOf<A>(1)), InternalError);
  trains.backward(GradOf<A>(1));  // control: the training model's backward runs
}

TEST_CASE("inference-only model: the training model's loss and logits, bit for bit, without gradient buffers",
          "[sampler]") {
  SECTION("fp64") { check_inference_only<double>(Precision::FP64); }
  SECTION("fp32") { check_inference_only<float>(Precision::FP32); }
  SECTION("bf16 storage") { check_inference_only<bf16>(Precision::BF16); }
}

TEST_CASE("decoder: its one-token model holds no gradients", "[sampler]") {
  CachedDecoder<float> decoder(sampler_model(), 8, Device::CPU, Precision::FP32);
  CHECK(decoder.model().grads().empty());
  CHECK(decoder.model().grad_bytes() == 0);
}

// The multiple-choice scorer makes one model for its longest window and runs each forward
// only as long as its rows need (set_seq_len): a shorter sequence uses the first part of
// the same buffers, so its losses and logits are those of a model made that short, bit
// for bit, after a longer forward has filled the buffers and before the next one.
// Controls: the losses read with the longer stride differ; a length past the model's and
// a model that trains are refused.
template <class A>
void check_shorter_sequences(Precision precision) {
  const ModelConfig m = sampler_model();
  const int B = 3, T = 40, t = 17;
  ModelSlice<A> inference;
  inference.inference_only = true;
  GPT2<A> longest(m, B, T, Device::CPU, precision, true, inference);
  GPT2<A> made_short(m, B, t, Device::CPU, precision, true, inference);
  const std::vector<GradOf<A>> weights = initial_weights<A>(5);
  longest.set_params(weights.data());
  made_short.set_params(weights.data());
  auto tokens = [](int count, int mul, int add) {
    std::vector<int32_t> v(static_cast<size_t>(count));
    for (size_t i = 0; i < v.size(); ++i) v[i] = int32_t((i * size_t(mul) + size_t(add)) % 256);
    return v;
  };
  const std::vector<int32_t> long_in = tokens(B * T, 53, 7), long_tg = tokens(B * T, 29, 3);
  const std::vector<int32_t> short_in = tokens(B * t, 31, 5), short_tg = tokens(B * t, 17, 9);
  const double long_loss = double(longest.evaluate(long_in.data(), long_tg.data()));
  const std::vector<GradOf<A>> long_losses(longest.losses(), longest.losses() + size_t(B) * T);

  longest.set_seq_len(t);
  CHECK(longest.seq_len() == t);
  CHECK(longest.max_seq_len() == T);
  CHECK(double(longest.evaluate(short_in.data(), short_tg.data())) ==
        double(made_short.evaluate(short_in.data(), short_tg.data())));
  CHECK(test::same_bits(longest.losses(), made_short.losses(), size_t(B) * t));
  CHECK(test::same_bits(longest.logits(), made_short.logits(), size_t(B) * t * m.padded_vocab()));
  // Control: row 1 of the short forward read at the long stride is not row 1.
  CHECK(!test::same_bits(longest.losses() + T, made_short.losses() + t, size_t(t)));

  longest.set_seq_len(T);  // back to the whole length: the first forward's losses again
  CHECK(double(longest.evaluate(long_in.data(), long_tg.data())) == long_loss);
  CHECK(test::same_bits(longest.losses(), long_losses.data(), size_t(B) * T));

  CHECK_THROWS_AS(longest.set_seq_len(T + 1), InternalError);
  CHECK_THROWS_AS(longest.set_seq_len(0), InternalError);
  GPT2<A> trains(m, B, T, Device::CPU, precision);
  CHECK_THROWS_AS(trains.set_seq_len(t), InternalError);
}

TEST_CASE("inference-only model: set_seq_len runs shorter sequences in the same buffers, bit for bit", "[sampler]") {
  SECTION("fp64") { check_shorter_sequences<double>(Precision::FP64); }
  SECTION("fp32") { check_shorter_sequences<float>(Precision::FP32); }
  SECTION("bf16 storage") { check_shorter_sequences<bf16>(Precision::BF16); }
  SECTION("fp32 emulating bf16") { check_shorter_sequences<float>(Precision::BF16); }
}

// The scorer's head runs over the completions' positions only (evaluate_spans): each loss
// is the one the whole head computes at that position, bit for bit on the CPU (the head's
// ops compute a row on its own), in the spans' order, spans crossing from one sequence
// into the next included; the returned mean is theirs. Controls: the spans one position
// later give other losses; a span past the tokens and a model that trains are refused.
template <class A>
void check_spans(Precision precision) {
  const ModelConfig m = sampler_model();
  const int B = 3, T = 20;
  ModelSlice<A> inference;
  inference.inference_only = true;
  GPT2<A> model(m, B, T, Device::CPU, precision, true, inference);
  model.set_params(initial_weights<A>(6).data());
  std::vector<int32_t> inputs(size_t(B) * T), targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t((i * 41 + 3) % 256);
    targets[i] = int32_t((i * 23 + 8) % 256);
  }
  model.evaluate(inputs.data(), targets.data());
  const std::vector<GradOf<A>> whole(model.losses(), model.losses() + size_t(B) * T);
  const std::vector<ScoredSpan> spans = {{T + 4, 6}, {2, 1}, {2 * T - 3, 5}, {2 * T + 10, 9}};
  std::vector<GradOf<A>> want;
  for (const ScoredSpan& s : spans) want.insert(want.end(), whole.begin() + s.first, whole.begin() + s.first + s.count);
  GradOf<A> want_sum = 0;
  for (const GradOf<A> x : want) want_sum += x;

  const GradOf<A> mean = model.evaluate_spans(inputs.data(), targets.data(), spans);
  CHECK(test::same_bits(model.losses(), want.data(), want.size()));
  CHECK(double(mean) == double(want_sum / GradOf<A>(want.size())));
  std::vector<ScoredSpan> later = spans;
  for (ScoredSpan& s : later) ++s.first;
  model.evaluate_spans(inputs.data(), targets.data(), later);
  CHECK(!test::same_bits(model.losses(), want.data(), want.size()));  // control

  CHECK_THROWS_AS(model.evaluate_spans(inputs.data(), targets.data(), {{B * T - 2, 3}}), InternalError);
  GPT2<A> trains(m, B, T, Device::CPU, precision);
  CHECK_THROWS_AS(trains.evaluate_spans(inputs.data(), targets.data(), spans), InternalError);
}

TEST_CASE("inference-only model: evaluate_spans computes the head over the spans alone, bit for bit", "[sampler]") {
  SECTION("fp64") { check_spans<double>(Precision::FP64); }
  SECTION("fp32") { check_spans<float>(Precision::FP32); }
  SECTION("bf16 storage") { check_spans<bf16>(Precision::BF16); }
  SECTION("fp32 emulating bf16") { check_spans<float>(Precision::BF16); }
}

TEST_CASE("print_sample: every byte of the text, a NUL included, between its header and closing line",
          "[sampler]") {
  gpt::Config cfg;
  cfg.temperature = 0.8, cfg.top_k = 40;
  const std::string text("one\0two", 7);
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  gpt::print_sample(out, cfg, text, /*cut_short=*/false);
  gpt::print_sample(out, cfg, "", /*cut_short=*/true);
  std::rewind(out);
  std::string printed;
  for (int c; (c = std::fgetc(out)) != EOF;) printed.push_back(char(c));
  std::fclose(out);
  const std::string want = "---- sample (temperature 0.8, top-k 40) ----\n" + text + "\n----\n" +
                           "---- sample (temperature 0.8, top-k 40, cut short by a stop signal) ----\n\n----\n";
  CHECK(printed == want);
  // Control: "%s" would have stopped at the NUL.
  CHECK(printed.find("two") != std::string::npos);
}
