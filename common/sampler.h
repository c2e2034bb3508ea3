/// @file
/// ```
/// Text generation from a trained model: temperature and top-k sampling.
///   p_i ∝ exp(z_i / temperature) over the k largest logits (all of them when k = 0)
/// ```
/// Draws come from the counter-based RNG at (seed, "sample", counter), so a run's
/// samples are reproducible and the counter is the only state a checkpoint keeps.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/decoder.h"
#include "common/gpt2.h"

namespace gpt {

/// How generate() samples.
struct SampleOptions {
  int tokens = 200;          ///< tokens to append to the context
  double temperature = 0.8;  ///< the logits are divided by it; must be > 0 (lower is greedier)
  int top_k = 40;            ///< sample among the k largest logits; 0 (or k > V) means all of them
  uint64_t seed = 0;         ///< the RNG key: draws are at (seed, "sample", counter)
  /// Called after each token is drawn (when set): a long sample's sign of life to ranks
  /// that wait for it (common/lead_work.h). It returns whether to go on: false ends the
  /// sample there, shorter than `tokens` (a stop signal, common/stop_request.h).
  std::function<bool()> after_token;
  /// When set, each drawn token's log-probability under the distribution it was drawn
  /// from is added to it: the sample's log-probability, a figure that moves with every
  /// bit of the logits, where the tokens move only when a draw falls the other way.
  double* log_prob = nullptr;
};

/// Extends `context` (at least one token) by opt.tokens tokens with a model of batch 1
/// (its seq_len is the window: only the last seq_len tokens are seen), running the whole
/// window for every token: the plain form, which the tests hold the cached one to.
/// `counter` advances by one per token.
template <class A>
std::vector<int> generate(GPT2<A>& model, std::vector<int> context, const SampleOptions& opt,
                          uint64_t& counter);

/// The same with a key/value cache (common/decoder.h): the window is decoder.capacity();
/// each token costs one step while the context fits the window; once it outgrows it, the
/// window slides and each token runs the window's last capacity() tokens whole
/// (CachedDecoder::window_step), as the plain form does. The tokens are the plain form's.
template <class A>
std::vector<int> generate(CachedDecoder<A>& decoder, std::vector<int> context, const SampleOptions& opt,
                          uint64_t& counter);

/// The end-of-run sample every stage prints and logs.
struct Sample {
  std::string text;       ///< the prompt (or the start token) and the tokens drawn, decoded
  double log_prob = 0.0;  ///< the drawn tokens' summed log-probabilities (SampleOptions::log_prob)
  int tokens = 0;         ///< the tokens drawn: cfg.sample_tokens, fewer where after_token ended the sample
  bool cut_short = false;  ///< after_token ended it (a stop signal) before its cfg.sample_tokens tokens
};

/// The end-of-run sample every stage prints: cfg.sample_tokens tokens after cfg.prompt
/// (encoded by cfg.tokenizer; an empty prompt starts from the tokenizer's start token)
/// from a cached decoder, decoded to text; `counter` as for generate; `after_token` as
/// SampleOptions' (none when empty).
template <class A>
Sample sample_text(CachedDecoder<A>& decoder, const Config& cfg, uint64_t& counter,
                   std::function<bool()> after_token = {});

/// Prints a sample_text to `out` (stdout) between a header (temperature, top-k, and whether
/// a stop signal cut it short) and a closing line. Every byte of it: a byte tokenizer's
/// text may hold a NUL, which would end a printf's "%s" there.
void print_sample(std::FILE* out, const Config& cfg, const std::string& text, bool cut_short);

/// The window sample_text's decoder needs: at most seq_len, and otherwise room for the
/// prompt (its bytes, as many as its tokens at least; 1 for the empty prompt's start token)
/// and cfg.sample_tokens. Attention is causal, so the positions after the last token never
/// change the logits the sampler reads: a window this long samples the same tokens as one
/// of seq_len, and its cache is no larger than the sample needs.
int sample_window(const Config& cfg, int seq_len);

/// Picks a token from one row of logits (first V columns): among the top_k largest (all
/// with top_k 0), with probability proportional to exp(logit / temperature), by the draw
/// `uniform` in [0, 1). temperature must be positive (an internal error otherwise); a
/// logit that is not finite is a UserError. `log_prob` (when set) receives the drawn
/// token's log-probability among the candidates.
int sample_token(const float* logits, int V, double temperature, int top_k, double uniform,
                 double* log_prob = nullptr);

}  // namespace gpt
