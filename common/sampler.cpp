#include "common/sampler.h"

#include "common/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <utility>

#include "common/error.h"
#include "common/rng.h"

namespace gpt {

int sample_token(const float* logits, int V, double temperature, int top_k, double uniform, double* log_prob) {
  // exp((l - top) / T) at T <= 0 is nan for the top logit, and every draw would fall
  // through to the least likely candidate; a nan logit breaks the ordering below (and
  // an infinite one gives inf - inf).
  invariant(temperature > 0, "sample_token: temperature " + std::to_string(temperature) + " is not positive");
  for (int i = 0; i < V; ++i)
    if (!std::isfinite(logits[i]))
      fail("sampling: the model's logit of token " + std::to_string(i) + " is " + std::to_string(logits[i]) +
           ": its weights hold no finite model");
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  int k = (top_k <= 0 || top_k > V) ? V : top_k;
  // The k largest logits, in decreasing order (ties broken by id, deterministically).
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> w(k);
  const double top = logits[ids[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += w[i] = std::exp((logits[ids[i]] - top) / temperature);
  double target = uniform * sum;
  int pick = -1;
  for (int i = 0; i < k && pick < 0; ++i) {
    target -= w[i];
    if (target <= 0) pick = i;
  }
  // Rounding can leave a sliver of the draw past the last weight: the last candidate
  // that has any weight then (one whose exp underflowed to 0 is never drawn).
  if (pick < 0)
    for (pick = k - 1; pick > 0 && w[pick] == 0; --pick) {
    }
  if (log_prob) *log_prob = std::log(w[pick] / sum);
  return ids[pick];
}

namespace {
// One step of generation, after a forward: draws the next token from the last position's
// logits `row`, appends it to `context`, adds its log-probability to opt.log_prob, and
// returns whether to go on (opt.after_token's answer).
bool append_drawn(const float* row, int V, const SampleOptions& opt, uint64_t stream, uint64_t& counter,
                  std::vector<int>& context) {
  double log_p = 0.0;
  context.push_back(sample_token(row, V, opt.temperature, opt.top_k, uniform_at(opt.seed, stream, counter++), &log_p));
  if (opt.log_prob) *opt.log_prob += log_p;
  return !opt.after_token || opt.after_token();
}
}  // namespace

template <class A>
std::vector<int> generate(GPT2<A>& model, std::vector<int> context, const SampleOptions& opt,
                          uint64_t& counter) {
  const int window = model.seq_len(), V = model.model().vocab_size;
  invariant(!context.empty(), "generate: the context needs at least one token");
  std::vector<int32_t> input(window);
  std::vector<float> row(size_t(model.model().padded_vocab()));
  const uint64_t stream = stream_id("sample");
  for (int n = 0; n < opt.tokens; ++n) {
    // The last `window` tokens, left-aligned; causal attention ignores what follows.
    const int len = std::min<int>(window, int(context.size()));
    const int start = int(context.size()) - len;
    for (int i = 0; i < window; ++i) input[i] = i < len ? context[start + i] : 0;
    model.forward(input.data(), nullptr);
    model.logits_row(len - 1, row.data());
    if (!append_drawn(row.data(), V, opt, stream, counter, context)) break;
  }
  return context;
}

template <class A>
std::vector<int> generate(CachedDecoder<A>& decoder, std::vector<int> context, const SampleOptions& opt,
                          uint64_t& counter) {
  const int window = decoder.capacity(), V = decoder.model().model().vocab_size;
  invariant(!context.empty(), "generate: the context needs at least one token");
  std::vector<float> row(size_t(decoder.model().model().padded_vocab()));
  const uint64_t stream = stream_id("sample");
  decoder.reset();  // the cache holds context[0, decoder.length())
  for (int n = 0; n < opt.tokens; ++n) {
    if (decoder.uses_cache() && context.size() <= size_t(window)) {
      while (size_t(decoder.length()) < context.size()) decoder.step(context[size_t(decoder.length())], row.data());
    } else {  // the window has slid on (or the cache cannot run): its last tokens, whole
      const size_t count = std::min(context.size(), size_t(window));
      decoder.window_step(context.data() + (context.size() - count), int(count), row.data());
    }
    if (!append_drawn(row.data(), V, opt, stream, counter, context)) break;
  }
  return context;
}

template <class A>
Sample sample_text(CachedDecoder<A>& decoder, const Config& cfg, uint64_t& counter,
                   std::function<bool()> after_token) {
  const Tokenizer tokenizer = Tokenizer::named(cfg.tokenizer);
  const std::vector<int> context = tokenizer.encode_prompt(cfg.prompt);
  Sample sample;
  const SampleOptions opt{cfg.sample_tokens, cfg.temperature, cfg.top_k, cfg.seed, std::move(after_token),
                          &sample.log_prob};
  const std::vector<int> tokens = generate(decoder, context, opt, counter);
  sample.tokens = int(tokens.size() - context.size());
  sample.cut_short = sample.tokens < cfg.sample_tokens;
  sample.text = tokenizer.decode(tokens);
  return sample;
}

void print_sample(std::FILE* out, const Config& cfg, const std::string& text, bool cut_short) {
  std::fprintf(out, "---- sample (temperature %g, top-k %d%s) ----\n", cfg.temperature, cfg.top_k,
               cut_short ? ", cut short by a stop signal" : "");
  std::fwrite(text.data(), 1, text.size(), out);
  std::fprintf(out, "\n----\n");
}

int sample_window(const Config& cfg, int seq_len) {
  // Every token of an encoded prompt covers at least one of its bytes, and an empty prompt
  // is the start token alone: a bound on its tokens without loading the tokenizer here.
  const int64_t prompt_tokens = std::max<int64_t>(1, int64_t(cfg.prompt.size()));
  return int(std::min<int64_t>(seq_len, prompt_tokens + cfg.sample_tokens));
}

template Sample sample_text(CachedDecoder<float>&, const Config&, uint64_t&, std::function<bool()>);
template Sample sample_text(CachedDecoder<double>&, const Config&, uint64_t&, std::function<bool()>);
template Sample sample_text(CachedDecoder<bf16>&, const Config&, uint64_t&, std::function<bool()>);
template std::vector<int> generate(CachedDecoder<float>&, std::vector<int>, const SampleOptions&, uint64_t&);
template std::vector<int> generate(CachedDecoder<double>&, std::vector<int>, const SampleOptions&, uint64_t&);
template std::vector<int> generate(CachedDecoder<bf16>&, std::vector<int>, const SampleOptions&, uint64_t&);
template std::vector<int> generate(GPT2<float>&, std::vector<int>, const SampleOptions&, uint64_t&);
template std::vector<int> generate(GPT2<double>&, std::vector<int>, const SampleOptions&, uint64_t&);
template std::vector<int> generate(GPT2<bf16>&, std::vector<int>, const SampleOptions&, uint64_t&);

}  // namespace gpt
