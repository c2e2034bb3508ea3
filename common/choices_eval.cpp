#include "common/choices_eval.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>

#include "common/device_array.h"
#include "common/error.h"
#include "common/model_reader.h"

namespace gpt {

namespace {

// The context tokens an example leaves out: as many as its longest row needs to fit the
// window (choices_window has checked that every completion fits after one context token).
int example_cut(const ChoiceExample& ex, int window) {
  int cut = 0;
  for (const std::vector<int>& completion : ex.completions)
    cut = std::max(cut, int(ex.context.size() + completion.size()) - 1 - window);
  invariant(cut < int(ex.context.size()), "score_choices: a completion longer than the window");
  return cut;
}

int argmin(const std::vector<double>& v) { return int(std::min_element(v.begin(), v.end()) - v.begin()); }

}  // namespace

int choices_window(const std::vector<ChoiceExample>& examples, int max_window, const std::string& source) {
  int longest = 1;
  for (size_t e = 0; e < examples.size(); ++e) {
    const ChoiceExample& ex = examples[e];
    for (size_t c = 0; c < ex.completions.size(); ++c) {
      const int m = int(ex.completions[c].size());
      if (m > max_window)
        fail(source + ", example " + std::to_string(e) + " (index " + std::to_string(ex.index) + "): completion " +
             std::to_string(c) + " has " + std::to_string(m) +
             " tokens, more than the model's max_seq_len (block_size) " + std::to_string(max_window) +
             ": it cannot be scored whole");
      longest = std::max(longest, int(ex.context.size()) + m - 1);
    }
  }
  return std::min(longest, max_window);
}

int examples_cut(const std::vector<ChoiceExample>& examples, int window) {
  int cut = 0;
  for (const ChoiceExample& ex : examples) cut += example_cut(ex, window) > 0;
  return cut;
}

template <class A>
std::vector<ChoiceScore> score_choices(const ModelConfig& model, const A* weights, Device device, Precision precision,
                                       int rows, int window, const std::vector<ChoiceExample>& examples,
                                       const std::function<void(size_t)>& after_batch) {
  using G = GradOf<A>;
  // Each example's cut and the positions its longest row needs (its last token is only a
  // target); the examples in order of that length, so that a forward's rows are alike.
  std::vector<int> cut(examples.size()), needs(examples.size());
  for (size_t e = 0; e < examples.size(); ++e) {
    cut[e] = example_cut(examples[e], window);
    for (const std::vector<int>& completion : examples[e].completions)
      needs[e] = std::max(needs[e], int(examples[e].context.size() + completion.size()) - cut[e] - 1);
  }
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return needs[a] < needs[b]; });

  // One model, made for the whole window; each forward runs only as many positions as
  // its longest row needs (GPT2::set_seq_len), in the first part of the same buffers.
  ModelReader<A> reader(model, weights, rows, window, device, precision);
  GPT2<A>& scorer = reader.model();
  std::vector<int32_t> inputs, targets;
  std::vector<G> losses;
  std::vector<ChoiceScore> scores(examples.size());
  size_t next = 0;
  while (next < order.size()) {
    // As many whole examples as the batch's rows hold; the rows left over stay padding.
    size_t end = next;
    int used = 0;
    while (end < order.size() && used + int(examples[order[end]].completions.size()) <= rows)
      used += int(examples[order[end++]].completions.size());
    invariant(end > next, "score_choices: an example with more completions than the batch has rows");
    const int T = needs[order[end - 1]];  // the longest of the forward (the order is by length)
    scorer.set_seq_len(T);
    inputs.assign(size_t(rows) * T, 0);
    targets.assign(size_t(rows) * T, 0);
    // Row r of the batch: the example's context after its cut, then completion c. The
    // last kept context token, at position first, predicts the completion's first: the
    // losses that count are the span [first, first + m) of the row; the head computes
    // only those (GPT2::evaluate_spans), one span after another.
    std::vector<ScoredSpan> spans;
    int r = 0;
    for (size_t i = next; i < end; ++i) {
      const ChoiceExample& ex = examples[order[i]];
      const int first = int(ex.context.size()) - cut[order[i]] - 1;
      for (size_t c = 0; c < ex.completions.size(); ++c, ++r) {
        std::vector<int> row(ex.context.begin() + cut[order[i]], ex.context.end());
        row.insert(row.end(), ex.completions[c].begin(), ex.completions[c].end());
        for (size_t t = 0; t + 1 < row.size(); ++t) {
          inputs[size_t(r) * T + t] = row[t];
          targets[size_t(r) * T + t] = row[t + 1];
        }
        spans.push_back({r * T + first, int(ex.completions[c].size())});
      }
    }
    scorer.evaluate_spans(inputs.data(), targets.data(), spans);
    size_t scored = 0;
    for (const ScoredSpan& span : spans) scored += size_t(span.count);
    losses.resize(scored);
    device_copy(Device::CPU, losses.data(), scorer.device(), scorer.losses(), scored * sizeof(G));

    size_t at = 0;  // the next completion's first loss, in the spans' order
    for (size_t i = next; i < end; ++i) {
      const ChoiceExample& ex = examples[order[i]];
      ChoiceScore& s = scores[order[i]];
      s.index = ex.index;
      s.label = ex.label;
      s.context_cut = cut[order[i]];
      std::vector<double> mean;
      for (size_t c = 0; c < ex.completions.size(); ++c) {
        const int count = int(ex.completions[c].size());
        double sum = 0;
        for (int j = 0; j < count; ++j) sum += double(losses[at++]);
        s.loss_sum.push_back(sum);
        s.tokens.push_back(count);
        mean.push_back(sum / count);
      }
      s.pred = argmin(s.loss_sum);
      s.pred_norm = argmin(mean);
    }
    next = end;
    if (after_batch) after_batch(next);
  }
  return scores;
}

template std::vector<ChoiceScore> score_choices(const ModelConfig&, const float*, Device, Precision, int, int,
                                                const std::vector<ChoiceExample>&,
                                                const std::function<void(size_t)>&);
template std::vector<ChoiceScore> score_choices(const ModelConfig&, const double*, Device, Precision, int, int,
                                                const std::vector<ChoiceExample>&,
                                                const std::function<void(size_t)>&);
template std::vector<ChoiceScore> score_choices(const ModelConfig&, const bf16*, Device, Precision, int, int,
                                                const std::vector<ChoiceExample>&,
                                                const std::function<void(size_t)>&);

}  // namespace gpt
