/// @file
/// ```
/// Text generation from a trained model: temperature and top-k sampling.
///   p_i ∝ exp(z_i / temperature) over the k largest logits (all of them when k = 0)
/// ```
/// Draws come from the counter-based RNG at (seed, "sample", counter), so a run's
/// samples are reproducible and the counter is the only state a checkpoint keeps.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/gpt2.h"

namespace gpt {

/// How generate() samples.
struct SampleOptions {
  int tokens = 200;          ///< tokens to append to the context
  double temperature = 0.8;  ///< the logits are divided by it; must be > 0 (lower is greedier)
  int top_k = 40;            ///< sample among the k largest logits; 0 (or k > V) means all of them
  uint64_t seed = 0;         ///< the RNG key: draws are at (seed, "sample", counter)
};

/// Extends `context` (at least one token) by opt.tokens tokens with a model of batch 1
/// (its seq_len is the window: only the last seq_len tokens are seen). `counter`
/// advances by one per token.
template <class A>
std::vector<int> generate(GPT2<A>& model, std::vector<int> context, const SampleOptions& opt,
                          uint64_t& counter);

/// The end-of-run sample every stage prints: cfg.sample_tokens tokens after cfg.prompt
/// (encoded by cfg.tokenizer; an empty prompt starts from the tokenizer's start token)
/// from a batch-1 model, decoded to text; `counter` as for generate.
template <class A>
std::string sample_text(GPT2<A>& model, const Config& cfg, uint64_t& counter);

/// The window of the model sample_text needs: at most seq_len, and otherwise room for the
/// prompt (its bytes, as many as its tokens at least; 1 for the empty prompt's start token)
/// and cfg.sample_tokens. Attention is causal, so the positions after the last token never
/// change the logits the sampler reads: a model of this window samples the same tokens as
/// one of seq_len, with less work per token (GPT-2 124M's 200 tokens: 201 positions, not 1024).
int sample_window(const Config& cfg, int seq_len);

/// Picks a token from one row of logits (first V columns).
int sample_token(const float* logits, int V, double temperature, int top_k, double uniform);

}  // namespace gpt
