// The multiple-choice eval during training; see choices_in_training.h.
#include "common/choices_in_training.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/choices_eval.h"
#include "common/error.h"
#include "common/finite.h"
#include "common/memory.h"

namespace gpt {

ChoicesInTraining::ChoicesInTraining(const Config& cfg, int rank, int ranks) {
  if (cfg.eval_choices.empty()) return;
  file_ = cfg.eval_choices;
  std::vector<ChoiceExample> all = read_choices_file(file_, cfg.model.vocab_size, cfg.eval_choices_limit);
  window_ = choices_window(all, cfg.model.block_size, "eval_choices '" + file_ + "'");
  // Rows per forward: at most kMaxRows (eval_choices' default batch) and no more tokens
  // than a training micro-batch, which bounds the scoring model's activations and logits
  // (rows x window x the padded vocabulary), but an example's rows together, however many.
  constexpr int64_t kMaxRows = 32;
  size_t most = 0;
  for (const ChoiceExample& ex : all) most = std::max(most, ex.completions.size());
  const int64_t fit = std::min(kMaxRows, int64_t(cfg.micro_batch_size) * cfg.seq_len / window_);
  rows_ = std::max(int(most), int(fit));
  if (rank == 0) {
    std::printf("eval_choices: %zu examples of %s at every validation, %d-token window, %d rows a forward, "
                "%zu per rank\n", all.size(), file_.c_str(), window_, rows_, (all.size() + size_t(ranks) - 1) / size_t(ranks));
    if (const int cut = examples_cut(all, window_); cut > 0)
      std::printf("eval_choices: %d examples have context tokens left out to fit the window of %d (block_size)\n",
                  cut, window_);
    // Positions past seq_len are never trained: what the model makes of them is noise.
    if (window_ > cfg.seq_len)
      std::printf("note: the longest eval example needs %d positions, more than the seq_len=%d this run trains "
                  "at: its positions %d.. are untrained\n", window_, cfg.seq_len, cfg.seq_len);
  }
  for (size_t e = size_t(rank); e < all.size(); e += size_t(ranks)) mine_.push_back(std::move(all[e]));
}

template <class A>
ChoicesTally ChoicesInTraining::score(const A* weights, const ModelConfig& model, Device device, Precision precision,
                                      Communicator* world) const {
  invariant(enabled(), "ChoicesInTraining::score without an eval file");
  const auto start = std::chrono::steady_clock::now();
  const MemScope scope(MemKind::Eval);
  ChoicesTally tally;
  if (!mine_.empty()) {
    invariant(weights != nullptr, "ChoicesInTraining::score: this rank has examples but received no weights");
    for (const ChoiceScore& s : score_choices(model, weights, device, precision, rows_, window_, mine_)) {
      ++tally.examples;
      tally.correct += s.pred == s.label;
      tally.correct_norm += s.pred_norm == s.label;
      for (size_t c = 0; c < s.loss_sum.size(); ++c) tally.loss_sum += s.loss_sum[c], tally.tokens += s.tokens[c];
    }
  }
  if (world && world->size() > 1) {
    // Counts in doubles: exact up to 2^53.
    double sums[5] = {double(tally.examples), double(tally.correct), double(tally.correct_norm), tally.loss_sum,
                      double(tally.tokens)};
    world->all_reduce(sums, 5, DType::F64);
    tally = {int64_t(sums[0]), int64_t(sums[1]), int64_t(sums[2]), sums[3], int64_t(sums[4])};
  }
  // A completion's loss that is not a number (weights diverged, or too large for the
  // arithmetic) makes the sum so on every rank: the picks among NaN losses mean nothing.
  require_finite_result(tally.loss_sum, "the multiple-choice eval of " + file_ + ": the completions' summed loss",
                        "the weights give no probabilities to compare (they have diverged: lower lr?); the run stops, "
                        "and no checkpoint is written of them");
  tally.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return tally;
}

template ChoicesTally ChoicesInTraining::score(const float*, const ModelConfig&, Device, Precision,
                                               Communicator*) const;
template ChoicesTally ChoicesInTraining::score(const double*, const ModelConfig&, Device, Precision,
                                               Communicator*) const;
template ChoicesTally ChoicesInTraining::score(const bf16*, const ModelConfig&, Device, Precision,
                                               Communicator*) const;

}  // namespace gpt
