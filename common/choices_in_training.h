/// @file
/// The multiple-choice eval (common/choices_eval.h) during a training run, as llm.c logs
/// HellaSwag next to the validation loss. At every validation (each val_every steps and
/// at the end) every rank of the job scores a share of the examples, example e on rank
/// e mod ranks, with a whole copy of the model's weights, and the counts are added over
/// the job:
/// ```
///   acc      = #(examples whose lowest summed completion loss is the label's) / examples
///   acc_norm = #(examples whose lowest mean loss per token is the label's)    / examples
///   loss     = sum of every completion token's loss / completion tokens
/// ```
/// An example's scores depend on nothing else in its forward (its rows are independent),
/// so on the CPU acc and acc_norm equal what build/bin/eval_choices reports for the
/// checkpoint of the same step, whatever the layout and the number of ranks; the loss
/// is a sum, added in another order on other rank counts.
///
/// The whole weights a rank receives and the scoring model (which reads them in place,
/// at most 32 rows of the window a forward) are made for each evaluation and freed after
/// it, counted as MemKind::Eval: training holds none of it between evaluations. Every
/// rank holds a whole model's compute weights meanwhile, on top of its own share.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/choices_file.h"
#include "common/comm.h"
#include "common/config.h"
#include "common/device.h"
#include "common/precision.h"

namespace gpt {

/// What one evaluation found, added over the ranks.
struct ChoicesTally {
  int64_t examples = 0;      ///< examples scored
  int64_t correct = 0;       ///< of them, picked right by the lowest summed loss (acc)
  int64_t correct_norm = 0;  ///< picked right by the lowest mean loss per token (acc_norm)
  double loss_sum = 0;       ///< the loss summed over every completion token of every example
  int64_t tokens = 0;        ///< the completion tokens loss_sum counts
  double seconds = 0;        ///< the evaluation's wall time, until the last rank's share was added
  double acc() const { return examples ? double(correct) / double(examples) : 0.0; }  ///< correct / examples
  double acc_norm() const { return examples ? double(correct_norm) / double(examples) : 0.0; }  ///< the same, normed
  double mean_loss() const { return tokens ? loss_sum / double(tokens) : 0.0; }  ///< loss_sum / tokens
};

/// The eval file of a run (Config::eval_choices) and this rank's share of its examples.
class ChoicesInTraining {
 public:
  /// Reads cfg.eval_choices (its first eval_choices_limit examples, all when 0) and keeps
  /// the examples of rank `rank` of `ranks`; holds nothing when eval_choices is empty. A
  /// bad file is a UserError naming it (validate() has found it before).
  ChoicesInTraining(const Config& cfg, int rank, int ranks);

  bool enabled() const { return !file_.empty(); }  ///< whether the run names an eval file
  const std::string& file() const { return file_; }  ///< the eval file

  /// Scores this rank's examples with `weights` (the whole model's compute weights, in
  /// `device`'s memory, stored as A) and adds the tallies over `world` (nullptr: one rank,
  /// nothing to add). Collective over world: every rank calls it, with or without examples.
  template <class A>
  ChoicesTally score(const A* weights, const ModelConfig& model, Device device, Precision precision,
                     Communicator* world) const;

 private:
  std::string file_;
  std::vector<ChoiceExample> mine_;  // examples e with e % ranks == rank
  int window_ = 0;                   // the tokens every example needs (choices_window)
  int rows_ = 0;                     // rows per forward
};

}  // namespace gpt
