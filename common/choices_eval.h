/// @file
/// Multiple-choice evaluation, completion style (as llm.c's HellaSwag eval scores it):
/// each completion is read as the text that follows the context, and the model picks the
/// one it finds most likely.
/// ```
///   row_c  = context + completion_c                       (one row per completion)
///   loss_c = sum over the completion's tokens j of  -log p(row_c[j] | row_c[0..j-1])
///   pred      = argmin_c loss_c                 -> acc       (likeliest text)
///   pred_norm = argmin_c loss_c / |completion_c| -> acc_norm  (likeliest per token)
/// ```
/// The token before position j predicts it, so the losses that count are those of
/// positions ctx-1 .. ctx+m-2 of the model's input (ctx context tokens, m completion
/// tokens). An example whose longest row is longer than the window plus one loses its
/// first context tokens, the same number in every row: each completion is scored whole,
/// after the same context as the others, as much of it as the longest one leaves room for.
/// Rows of several examples share one forward (whole examples only); positions past a
/// row's end are padding. Only the completions' losses are read, so the head (ln_f, the
/// logits over the vocabulary, the loss) runs over those positions alone
/// (GPT2::evaluate_spans); the blocks run over every position, as attention needs them.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "common/choices_file.h"
#include "common/gpt2.h"

namespace gpt {

/// What the model made of one example.
struct ChoiceScore {
  int index = 0;                 ///< the example's index, as the file says
  int label = 0;                 ///< the right completion, as the file says
  std::vector<double> loss_sum;  ///< loss_c of each completion (summed in double)
  std::vector<int> tokens;       ///< |completion_c|
  int pred = 0;                  ///< argmin of loss_sum (the first of equal ones)
  int pred_norm = 0;             ///< argmin of loss_sum / tokens
  int context_cut = 0;           ///< context tokens left out of every row, for its longest to fit the window
};

/// The window a model needs to score every example whole: the longest row minus its last
/// token (only ever a target), at most max_window (the model's max_seq_len). A completion
/// longer than max_window cannot be scored whole: a UserError naming `source` (the file)
/// and the example.
int choices_window(const std::vector<ChoiceExample>& examples, int max_window, const std::string& source);

/// How many examples have context tokens left out to fit `window` (their longest row
/// is longer): score_choices scores those from the end of their context.
int examples_cut(const std::vector<ChoiceExample>& examples, int window);

/// Scores `examples` with the model of shape `model` whose compute weights are `weights`
/// (the whole model, in `device`'s memory), `rows` rows per forward (at least the most
/// completions of an example) in windows of at most `window` tokens (choices_window's:
/// every completion fits after one context token). The examples run in order of length,
/// each forward only as long as its longest row needs: the padding of short rows to the
/// longest of the file is not computed. On the CPU an example's scores do not depend on
/// the forward it shares or its length (every op computes a row on its own: see
/// common/decoder.h). Returns the scores in the examples' order; `after_batch` (if set) is
/// called with the number of examples scored so far after each forward.
template <class A>
std::vector<ChoiceScore> score_choices(const ModelConfig& model, const A* weights, Device device, Precision precision,
                                       int rows, int window, const std::vector<ChoiceExample>& examples,
                                       const std::function<void(size_t)>& after_batch = {});

}  // namespace gpt
