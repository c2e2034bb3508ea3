// bench_sampling: the end-of-run sample with the key/value cache (common/decoder.h)
// against the plain sampler, which runs the whole window again for every token
// (common/sampler.h), on the CPU in fp32 with a config's model and its initial weights.
//
//   build/bin/bench_sampling --config configs/gpt2-124m.json --set vocab_size=256 [--set key=value ...]
//
// Both extend the one-token context 10 (the byte tokenizer's "\n") by sample_tokens
// tokens (temperature, top_k and seed from the config) in a window of 1 + sample_tokens
// positions (at most seq_len): the window the trainer's sample uses for the prompt "\n"
// (sample_window). Each is timed once, after an untimed sample of 8 tokens, the first
// touch of the models' buffers. The cached sample runs one position per token while the
// context fits the window (past it, the window slides and the decoder runs it whole, as
// the plain sampler does, through a model it makes when the window first slides: in the
// timed run); the plain one runs the whole window per token (its forward over window
// positions, of which the causal attention lets the logits read only the first ones).
// Both must draw the same tokens: the benchmark says so, and exits 1 otherwise.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/config.h"
#include "common/decoder.h"
#include "common/error.h"
#include "common/gpt2.h"
#include "common/gpt2_layout.h"
#include "common/sampler.h"

using namespace gpt;

namespace {

// Seconds one call of `sample` takes.
template <class F>
double seconds_of(F&& sample) {
  const auto start = std::chrono::steady_clock::now();
  sample();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int bench(const Config& cfg) {
  // sample_window's for a one-token prompt, whatever prompt the config names.
  const int window = std::min(cfg.seq_len, 1 + cfg.sample_tokens);
  const ParamLayout layout(cfg.model);
  std::vector<float> weights(size_t(layout.total()));
  layout.init_range(cfg.seed, 0, layout.total(), weights.data());

  ModelSlice<float> inference;
  inference.inference_only = true;  // as the trainer's sampling models: no gradient buffers
  GPT2<float> plain(cfg.model, 1, window, Device::CPU, Precision::FP32, true, inference);
  plain.set_params(weights.data());
  CachedDecoder<float> cached(cfg.model, window, Device::CPU, Precision::FP32);
  cached.model().set_params(weights.data());

  const std::vector<int> context = {'\n'};
  const SampleOptions warm_up{8, cfg.temperature, cfg.top_k, cfg.seed, {}};
  const SampleOptions options{cfg.sample_tokens, cfg.temperature, cfg.top_k, cfg.seed, {}};
  std::vector<int> plain_tokens, cached_tokens;
  uint64_t counter = 0;
  generate(plain, context, warm_up, counter);
  counter = 0;
  generate(cached, context, warm_up, counter);
  counter = 0;
  const double plain_s = seconds_of([&] { plain_tokens = generate(plain, context, options, counter); });
  counter = 0;
  const double cached_s = seconds_of([&] { cached_tokens = generate(cached, context, options, counter); });

  std::printf("bench_sampling | cpu fp32 | %d threads | %.2fM parameters | layers %d, width %d, heads %d, "
              "vocab %d | %d tokens after a 1-token context, window %d\n",
              omp_get_max_threads(), double(layout.total()) / 1e6, cfg.model.n_layer, cfg.model.n_embd,
              cfg.model.n_head, cfg.model.vocab_size, cfg.sample_tokens, window);
  std::printf("%-40s %10s %12s\n", "sampler", "s", "ms/token");
  std::printf("%-40s %10.2f %12.1f\n", "plain (the window per token)", plain_s,
              1e3 * plain_s / cfg.sample_tokens);
  std::printf("%-40s %10.2f %12.1f\n", "key/value cache (a position per token)", cached_s,
              1e3 * cached_s / cfg.sample_tokens);
  std::printf("plain / cached: %.1fx\n", plain_s / cached_s);
  const bool same = plain_tokens == cached_tokens;
  std::printf("the same tokens: %s\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main("bench_sampling", [&] {
    Config cfg;
    if (!parse_args(argc, argv, cfg, "bench_sampling")) return 0;
    if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
    require(cfg.sample_tokens > 0, "sample_tokens: the benchmark samples at least 1 token (it is 0)");
    return bench(cfg);
  });
}
