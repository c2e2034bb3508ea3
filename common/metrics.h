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

struct StepMetrics {
  int64_t step = 0;   ///< 1-based: the number of optimizer steps done after this one
  int64_t steps = 0;  ///< total planned
  double loss = 0, lr = 0, grad_norm = 0, ms = 0, tokens_per_s = 0;
  std::optional<double> mfu;  ///< only where the device's peak is known
};

class MetricsLog {
 public:
  /// Appends to `path` (so a resumed run continues the same file); "" disables the file.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void train_step(const StepMetrics& m, const MemoryLedger& mem, bool print);
  void validation(int64_t step, double val_loss);
  void sample(int64_t step, const std::string& text);

 private:
  void write_line(const std::string& json);
  std::FILE* file_ = nullptr;
};

}  // namespace gpt
