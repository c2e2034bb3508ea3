// eval_choices: a checkpoint's accuracy on a multiple-choice eval (HellaSwag) in llm.c's
// eval file format (common/choices_file.h), scored as common/choices_eval.h says.
//
//   build/bin/eval_choices CHECKPOINT EVAL.bin [--device D] [--precision P] [--batch ROWS]
//                          [--limit N] [--threads N] [--out FILE]     (or --name=VALUE)
//
// Checkpoints are whole tensors by name, so a checkpoint of any stage in any layout (or
// GPT-2's weights through `llmc_model import`) evaluates here on one device. llm.c's
// dev/data/hellaswag.py writes hellaswag_val.bin (10,042 examples, GPT-2 tokens).
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/checkpoint.h"
#include "common/checkpoint_weights.h"
#include "common/choices_eval.h"
#include "common/choices_file.h"
#include "common/cli.h"
#include "common/config.h"
#include "common/device.h"
#include "common/error.h"
#include "common/files.h"
#include "common/finite.h"
#include "common/gpt2.h"
#include "common/precision.h"
#include "common/tool_options.h"

namespace {

constexpr const char* kUsage =
    "usage: eval_choices CHECKPOINT EVAL.bin [options]\n"
    "\n"
    "The accuracy of a checkpoint (a step_N directory, or a run directory: its latest) on\n"
    "multiple-choice examples in llm.c's eval file format (HellaSwag: hellaswag_val.bin).\n"
    "Each completion is scored by the model's loss on its tokens after the context:\n"
    "  acc       the completion of lowest summed loss is the right one\n"
    "  acc_norm  the completion of lowest mean loss per token is the right one\n"
    "\n"
    "options (--name VALUE or --name=VALUE):\n"
    "  --device auto|cpu|cuda       where to run (default auto: a GPU when there is one)\n"
    "  --precision fp32|bf16|fp64   (default fp32; fp64 on the CPU only)\n"
    "  --batch ROWS                 rows per forward, one per completion (default 32)\n"
    "  --limit N                    the first N examples only (default all)\n"
    "  --threads N                  CPU threads (default OpenMP's: all cores)\n"
    "  --out FILE                   one JSON line per example (losses, predictions); FILE must not exist\n";

struct Options {
  std::string checkpoint, eval_file, device = "auto", precision = "fp32", out;
  int batch = 32, limit = 0, threads = 0;
};

Options parse(const std::vector<std::string>& args) {
  Options o;
  std::vector<std::string> positional;
  std::set<std::string> given;  // the options seen: one given twice is a mistake whichever was meant
  const std::set<std::string> known = {"--device", "--precision", "--batch", "--limit", "--threads", "--out"};
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) != 0) {
      positional.push_back(args[i]);
      continue;
    }
    // --name VALUE, or --name=VALUE
    const size_t equals = args[i].find('=');
    const std::string a = args[i].substr(0, equals);
    if (!known.count(a)) gpt::fail("unknown option '" + a + "'\n" + std::string(kUsage));
    if (equals == std::string::npos && i + 1 == args.size()) gpt::fail(a + " needs a value\n" + std::string(kUsage));
    if (!given.insert(a).second) gpt::fail(a + " is given twice; give each option once");
    const std::string v = equals == std::string::npos ? args[++i] : args[i].substr(equals + 1);
    if (a == "--device") o.device = v;
    else if (a == "--precision") o.precision = v;
    else if (a == "--batch") o.batch = gpt::positive_int_option(a, v);
    else if (a == "--limit") o.limit = gpt::positive_int_option(a, v);
    else if (a == "--threads") o.threads = gpt::positive_int_option(a, v);
    else if (a == "--out" && v.empty()) gpt::fail("--out needs a file name (it was empty)");
    else if (a == "--out") o.out = v, gpt::require_outside_checkpoint_dirs(v, "--out");
    else gpt::fail("unknown option '" + a + "'\n" + std::string(kUsage));
  }
  if (positional.size() != 2) {
    std::string given_text;
    for (const std::string& p : positional) given_text += " '" + p + "'";
    gpt::fail("expected CHECKPOINT and EVAL.bin, got " + std::to_string(positional.size()) + " argument" +
              (positional.size() == 1 ? "" : "s") + (given_text.empty() ? "" : ":" + given_text) + "\n" +
              std::string(kUsage));
  }
  o.checkpoint = positional[0];
  o.eval_file = positional[1];
  return o;
}

void write_scores(const std::string& path, const std::vector<gpt::ChoiceScore>& scores) {
  std::ofstream out(path);
  gpt::require(bool(out), "--out '" + path + "': cannot open for writing");
  for (const gpt::ChoiceScore& s : scores) {
    out << "{\"index\":" << s.index << ",\"label\":" << s.label << ",\"pred\":" << s.pred
        << ",\"pred_norm\":" << s.pred_norm << ",\"context_cut\":" << s.context_cut << ",\"tokens\":[";
    for (size_t c = 0; c < s.tokens.size(); ++c) out << (c ? "," : "") << s.tokens[c];
    out << "],\"loss_sum\":[";
    char number[32];
    for (size_t c = 0; c < s.loss_sum.size(); ++c) {
      std::snprintf(number, sizeof number, "%.17g", s.loss_sum[c]);
      out << (c ? "," : "") << (std::isfinite(s.loss_sum[c]) ? number : "null");  // JSON has no NaN or inf
    }
    out << "]}\n";
  }
  out.close();
  if (!out) {  // the file is this run's (it did not exist): a cut-short one would block the next try
    std::error_code ec;
    std::filesystem::remove(path, ec);
    gpt::fail("--out '" + path + "': write failed (disk full?); nothing is left at that path");
  }
}

template <class A>
int evaluate(const Options& o, const std::string& checkpoint, const gpt::ModelConfig& shape,
             const std::vector<gpt::ChoiceExample>& examples, gpt::Device device, gpt::Precision precision) {
  const int window = gpt::choices_window(examples, shape.block_size, "eval file '" + o.eval_file + "'");
  // Rows a forward: --batch, but no more than the file has (the scorer's buffers are sized
  // by it; an example's scores do not depend on what shares its forward).
  int64_t all_rows = 0;
  for (const gpt::ChoiceExample& ex : examples) all_rows += int64_t(ex.completions.size());
  const int rows = int(std::min<int64_t>(o.batch, all_rows));
  gpt::require(int64_t(rows) * window <= INT_MAX,
               "--batch " + std::to_string(o.batch) + ": " + std::to_string(rows) + " rows of the " +
                   std::to_string(window) + "-token window are more positions than an int counts");
  // The model that holds the weights runs no forward: one token, no gradient buffers; the
  // scorer's models read its weights (common/model_reader.h).
  gpt::ModelSlice<A> holding;
  holding.inference_only = true;
  gpt::GPT2<A> holder(shape, 1, 1, device, precision, /*own_weights=*/true, holding);
  const gpt::CheckpointState state = gpt::load_checkpoint_weights(holder, checkpoint);

  std::printf("eval_choices: %s (step %lld, %d layers, width %d, vocab %d) | %s, %zu examples | window %d | %s, %s\n",
              checkpoint.c_str(), static_cast<long long>(state.step), shape.n_layer, shape.n_embd, shape.vocab_size,
              o.eval_file.c_str(), examples.size(), window, gpt::device_description(device).c_str(),
              gpt::precision_name(precision));
  const auto start = std::chrono::steady_clock::now();
  double last_report = 0;
  auto progress = [&](size_t done) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s - last_report < 10 || done == examples.size()) return;
    last_report = s;
    std::printf("  %zu/%zu examples, %.0f s\n", done, examples.size(), s);
    std::fflush(stdout);
  };
  std::vector<gpt::ChoiceScore> scores;
  try {
    scores = gpt::score_choices(shape, holder.params().data(), device, precision, rows, window, examples, progress);
  } catch (const gpt::UserError& e) {
    // The memory checks speak of the trainer's keys; here the rows a forward are --batch's.
    if (!std::string_view(e.what()).starts_with("out of")) throw;
    gpt::fail("--batch " + std::to_string(o.batch) + " (" + std::to_string(rows) + " rows of " +
              std::to_string(window) + " tokens a forward): " + e.what() + " Here: lower --batch.");
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The lowest of NaN losses is no pick: weights that give them have nothing to report.
  for (const gpt::ChoiceScore& s : scores)
    for (size_t c = 0; c < s.loss_sum.size(); ++c)
      gpt::require_finite_result(s.loss_sum[c], "example " + std::to_string(s.index) + ", completion " +
                                                    std::to_string(c) + ": the summed loss",
                                 "the weights of " + checkpoint +
                                     " give no probabilities to compare (values too large for the arithmetic?)");
  int correct = 0, correct_norm = 0;
  double loss_sum = 0;  // the completions' loss per token, as the trainer's choices line logs it
  int64_t tokens = 0;
  for (const gpt::ChoiceScore& s : scores) {
    correct += s.pred == s.label;
    correct_norm += s.pred_norm == s.label;
    for (size_t c = 0; c < s.loss_sum.size(); ++c) loss_sum += s.loss_sum[c], tokens += s.tokens[c];
  }
  const int cut = gpt::examples_cut(examples, window);
  const double n = double(scores.size());
  std::printf("%zu examples in %.1f s: acc %.4f (lowest summed loss)  acc_norm %.4f (lowest mean loss per token)  "
              "loss %.6f (the completions' mean per token)\n",
              scores.size(), seconds, correct / n, correct_norm / n, tokens ? loss_sum / double(tokens) : 0.0);
  if (cut > 0)
    std::printf("%d examples had context tokens left out to fit the window of %d (block_size)\n", cut, window);
  if (!o.out.empty()) {
    write_scores(o.out, scores);
    std::printf("per-example scores: %s\n", o.out.c_str());
  }
  return 0;
}

int run(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (gpt::asks_for_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const Options o = parse(args);
  const gpt::Device device = gpt::resolve_device(o.device);
  const gpt::Precision precision = gpt::parse_precision(o.precision);
  gpt::require(!(precision == gpt::Precision::FP64 && device == gpt::Device::CUDA),
               "--precision fp64 runs on the CPU only (give --device cpu)");
  std::error_code ec;
  if (!o.out.empty()) {  // found now, not after the whole eval
    if (gpt::name_taken(o.out))
      gpt::fail("--out '" + o.out + "' exists; name a new file (nothing is overwritten)");
    gpt::create_parent_directories(o.out, "--out");
    if (!std::ofstream(o.out)) gpt::fail("--out '" + o.out + "': cannot create it: " + std::strerror(errno));
    std::filesystem::remove(o.out, ec);
  }
  gpt::require_thread_count(o.threads, "--threads");
  if (o.threads > 0) omp_set_num_threads(o.threads);

  const std::string checkpoint = gpt::checkpoint_or_latest(o.checkpoint);
  const gpt::ModelConfig shape = gpt::checkpoint_model(checkpoint);
  const std::vector<gpt::ChoiceExample> examples = gpt::read_choices_file(o.eval_file, shape.vocab_size, o.limit);
  for (size_t e = 0; e < examples.size(); ++e)
    gpt::require(int(examples[e].completions.size()) <= o.batch,
                 "--batch " + std::to_string(o.batch) + ": eval file '" + o.eval_file + "', example " +
                     std::to_string(e) + " has " + std::to_string(examples[e].completions.size()) +
                     " completions, and a batch holds an example's rows together: give --batch " +
                     std::to_string(examples[e].completions.size()) + " at least");

  if (precision == gpt::Precision::FP64) return evaluate<double>(o, checkpoint, shape, examples, device, precision);
  if (precision == gpt::Precision::BF16) return evaluate<gpt::bf16>(o, checkpoint, shape, examples, device, precision);
  return evaluate<float>(o, checkpoint, shape, examples, device, precision);
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("eval_choices", [&] { return run(argc, argv); });
}
