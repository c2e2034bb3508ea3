#include "common/metrics.h"

#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/choices_in_training.h"
#include "common/error.h"
#include "common/files.h"

namespace gpt {

namespace {

// Whether the file is empty or ends with '\n' (a missing file counts as empty).
bool ends_with_newline(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() <= 0) return true;
  in.seekg(-1, std::ios::end);
  char last = '\n';
  in.get(last);
  return last == '\n';
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  create_parent_directories(path, "metrics_file");
  // Appended to only when it is a metrics log already: every line a JSON object with a kind.
  const auto is_metrics_line = [](const std::string& first) {
    const nlohmann::json line = nlohmann::json::parse(first, nullptr, /*allow_exceptions=*/false);
    return line.is_object() && line.contains("kind");
  };
  require_own_output(path, "metrics_file", is_metrics_line,
                     "a metrics log (its first line is not a JSON object with a \"kind\")");
  file_ = std::fopen(path.c_str(), "ae");  // e: not inherited by a program the run starts
  require(file_ != nullptr, "metrics_file: cannot open '" + path + "' for appending: " + std::strerror(errno));
  // One writer at a time: the run directory's lock does not cover a metrics_file named
  // elsewhere, or another job's own log named as this one's, and two jobs appending to one
  // log would interleave their steps into what reads as several runs. flock(2), released
  // by the kernel however the holder ends; a file system without it goes unguarded. Only a
  // regular file: a lock on /dev/null or a terminal would hold for the whole machine.
  struct stat st {};
  const bool regular = ::fstat(fileno(file_), &st) == 0 && S_ISREG(st.st_mode);
  if (regular && ::flock(fileno(file_), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    std::fclose(file_);
    file_ = nullptr;
    fail("metrics_file '" + path + "' is being written by another job (it holds the file's lock); give this run "
         "another metrics_file, or wait for that job to end");
  }
  // A run killed mid-line (or stopped by a full disk) leaves its last line torn: end it,
  // so that this run's first line is a line of its own, readable, and the torn one stays
  // as it was.
  try {
    if (!ends_with_newline(path)) write_line("");
  } catch (...) {
    std::fclose(file_);  // a constructor that throws runs no destructor: release the file and its lock here
    file_ = nullptr;
    throw;
  }
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write_line(const std::string& json) {
  if (!file_) return;
  // fflush after every line: a crashed run keeps every step it finished. A line that
  // cannot be written (a disk full) stops the run rather than losing its record.
  const bool written = std::fputs(json.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF;
  if (!written || std::fflush(file_) != 0)
    fail("metrics_file: cannot write to '" + path_ + "': " + std::strerror(errno));
}

void MetricsLog::train_step(const StepMetrics& m, const MemoryLedger& mem, bool print) {
  if (!started_) write_line(nlohmann::json{{"kind", "start"}, {"step", m.step - 1}}.dump());
  started_ = true;
  nlohmann::json j = {{"kind", "train"}, {"step", m.step},         {"loss", m.loss},
                      {"lr", m.lr},      {"grad_norm", m.grad_norm}, {"ms", m.ms},
                      {"tokens_per_s", m.tokens_per_s}};
  j["mfu"] = m.mfu ? nlohmann::json(*m.mfu) : nlohmann::json(nullptr);
  j["mem"] = nlohmann::json::parse(mem.json());
  write_line(j.dump());
  if (print)
    std::printf("step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s\n",
                static_cast<long long>(m.step), static_cast<long long>(m.steps), m.loss, m.lr,
                m.grad_norm, m.ms, m.tokens_per_s);
  std::fflush(stdout);
}

void MetricsLog::validation(int64_t step, double val_loss) {
  write_line(nlohmann::json{{"kind", "val"}, {"step", step}, {"val_loss", val_loss}}.dump());
  std::printf("step %5lld | val loss %.4f\n", static_cast<long long>(step), val_loss);
  std::fflush(stdout);
}

void MetricsLog::choices(int64_t step, const ChoicesTally& t, const std::string& file) {
  write_line(nlohmann::json{{"kind", "choices"}, {"step", step}, {"file", file}, {"examples", t.examples},
                            {"correct", t.correct}, {"correct_norm", t.correct_norm}, {"acc", t.acc()},
                            {"acc_norm", t.acc_norm()}, {"loss", t.mean_loss()}, {"seconds", t.seconds}}
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  std::printf("step %5lld | choices acc %.4f | acc_norm %.4f | loss %.4f (%lld examples, %.1f s)\n",
              static_cast<long long>(step), t.acc(), t.acc_norm(), t.mean_loss(), static_cast<long long>(t.examples),
              t.seconds);
  std::fflush(stdout);
}

void MetricsLog::sample(int64_t step, const std::string& text, double log_prob, int tokens, bool cut_short) {
  // Bytes that are not valid UTF-8 would make dump() throw; replace them.
  write_line(nlohmann::json{{"kind", "sample"}, {"step", step}, {"text", text}, {"log_prob", log_prob},
                            {"tokens", tokens}, {"cut_short", cut_short}}
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void MetricsLog::stopped(int64_t step, const std::string& signal, const std::string& checkpoint) {
  write_line(nlohmann::json{{"kind", "stop"}, {"step", step}, {"signal", signal}, {"checkpoint", checkpoint}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace));  // a path need not be UTF-8
}

}  // namespace gpt
