#include "common/choices_eval.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/device_array.h"
#include "common/error.h"

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

template <class A>
std::vector<ChoiceScore> score_choices(GPT2<A>& model, const std::vector<ChoiceExample>& examples,
                                       const std::function<void(size_t)>& after_batch) {
  using G = GradOf<A>;
  const int B = model.batch(), T = model.seq_len();
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  std::vector<G> losses(size_t(B) * T);
  std::vector<ChoiceScore> scores;
  scores.reserve(examples.size());

  size_t next = 0;
  while (next < examples.size()) {
    // As many whole examples as the batch's rows hold; the rows left over stay padding.
    size_t end = next;
    int rows = 0;
    while (end < examples.size() && rows + int(examples[end].completions.size()) <= B)
      rows += int(examples[end++].completions.size());
    invariant(end > next, "score_choices: an example with more completions than the batch has rows");

    std::fill(inputs.begin(), inputs.end(), 0);
    std::fill(targets.begin(), targets.end(), 0);
    // Row r of the batch: the example's context after its cut, then completion c.
    std::vector<int> cuts;  // per example of the batch
    int r = 0;
    for (size_t e = next; e < end; ++e) {
      const ChoiceExample& ex = examples[e];
      cuts.push_back(example_cut(ex, T));
      for (size_t c = 0; c < ex.completions.size(); ++c, ++r) {
        std::vector<int> row(ex.context.begin() + cuts.back(), ex.context.end());
        row.insert(row.end(), ex.completions[c].begin(), ex.completions[c].end());
        for (size_t t = 0; t + 1 < row.size(); ++t) {
          inputs[size_t(r) * T + t] = row[t];
          targets[size_t(r) * T + t] = row[t + 1];
        }
      }
    }
    model.evaluate(inputs.data(), targets.data());
    device_copy(Device::CPU, losses.data(), model.device(), model.losses(), losses.size() * sizeof(G));

    r = 0;
    for (size_t e = next; e < end; ++e) {
      const ChoiceExample& ex = examples[e];
      ChoiceScore s;
      s.index = ex.index;
      s.label = ex.label;
      s.context_cut = cuts[e - next];
      // The last kept context token, at position first, predicts the completion's first.
      const int first = int(ex.context.size()) - s.context_cut - 1;
      std::vector<double> mean;
      for (size_t c = 0; c < ex.completions.size(); ++c, ++r) {
        const int count = int(ex.completions[c].size());
        double sum = 0;
        for (int j = 0; j < count; ++j) sum += double(losses[size_t(r) * T + size_t(first + j)]);
        s.loss_sum.push_back(sum);
        s.tokens.push_back(count);
        mean.push_back(sum / count);
      }
      s.pred = argmin(s.loss_sum);
      s.pred_norm = argmin(mean);
      scores.push_back(std::move(s));
    }
    next = end;
    if (after_batch) after_batch(next);
  }
  return scores;
}

template std::vector<ChoiceScore> score_choices(GPT2<float>&, const std::vector<ChoiceExample>&,
                                                const std::function<void(size_t)>&);
template std::vector<ChoiceScore> score_choices(GPT2<double>&, const std::vector<ChoiceExample>&,
                                                const std::function<void(size_t)>&);
template std::vector<ChoiceScore> score_choices(GPT2<bf16>&, const std::vector<ChoiceExample>&,
                                                const std::function<void(size_t)>&);

}  // namespace gpt
