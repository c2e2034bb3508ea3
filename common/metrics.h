/// @file
/// Metrics: one JSON line per event in the run's metrics file (docs/metrics.md), and a
/// human progress line on the terminal.
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "common/memory.h"

namespace gpt {

struct ChoicesTally;  // common/choices_in_training.h

/// What one training step reports: a "train" line of the metrics file.
struct StepMetrics {
  int64_t step = 0;   ///< 1-based: the number of optimizer steps done after this one
  int64_t steps = 0;  ///< total planned
  /// @var loss
  /// mean training loss of the step's batch (cross-entropy, nats per token)
  /// @var lr
  /// learning rate of the step's update
  /// @var grad_norm
  /// global L2 norm of the gradient, before clipping
  /// @var ms
  /// wall time of the step, in milliseconds
  /// @var tokens_per_s
  /// tokens trained on per second: the step's tokens over its wall time
  double loss = 0, lr = 0, grad_norm = 0, ms = 0, tokens_per_s = 0;
  std::optional<double> mfu;  ///< only where the device's peak is known
};

/// The run's metrics file (JSON lines, flushed as written, so a crash keeps every
/// finished step) and the progress lines on stdout.
class MetricsLog {
 public:
  /// Appends to `path` (so a resumed run continues the same file); "" disables the file.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  /// Writes a "train" line (m, and the memory peaks mem); with print also the progress line.
  /// The first one of this log is preceded by a "start" line: the step this launch
  /// trains from (0 fresh, a resumed checkpoint's step), which tells a resume from a new run.
  void train_step(const StepMetrics& m, const MemoryLedger& mem, bool print);
  void validation(int64_t step, double val_loss);  ///< writes a "val" line and prints the loss
  /// Writes a "choices" line (the multiple-choice eval of `file`) and prints acc and acc_norm.
  void choices(int64_t step, const ChoicesTally& tally, const std::string& file);
  /// Writes a "sample" line with the generated text (bytes that are not UTF-8 replaced),
  /// its log-probability, the `tokens` drawn and whether a stop signal cut it short.
  void sample(int64_t step, const std::string& text, double log_prob, int tokens, bool cut_short);
  /// Writes a "stop" line: a stop signal (`signal`, as common/stop_request.h names it)
  /// ended the run after `step`, whose checkpoint is `checkpoint`.
  void stopped(int64_t step, const std::string& signal, const std::string& checkpoint);

 private:
  void write_line(const std::string& json);
  std::string path_;  // for the messages
  std::FILE* file_ = nullptr;
  bool started_ = false;  // whether the "start" line is written
};

}  // namespace gpt
