// sample: text from a checkpoint, drawn as the trainer draws its end-of-run sample.
//
//   build/bin/sample CHECKPOINT [--samples N] [--set key=value ...]
//
// CHECKPOINT is a step_N directory, or a run directory (its latest). The sampling keys
// start as the checkpoint's run recorded them in its manifest (the config every
// checkpoint carries): prompt, sample_tokens, temperature, top_k, tokenizer, seed, the
// window seq_len and the precision. The draws go on from the run's sampling counter, so
// the checkpoint a run wrote at its end samples here the text that run printed after it
// (the trainer saves before it samples): the same tokens, and on the CPU the same
// log-probability to the last bit (common/decoder.h: a row's logits do not depend on the
// window). --set changes one of those keys, or device or threads, with the trainer's
// syntax and checks; the model's shape is the checkpoint's and cannot be set.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/checkpoint.h"
#include "common/checkpoint_weights.h"
#include "common/cli.h"
#include "common/config.h"
#include "common/decoder.h"
#include "common/device.h"
#include "common/error.h"
#include "common/files.h"
#include "common/precision.h"
#include "common/sampler.h"
#include "common/tool_options.h"

namespace {

constexpr const char* kUsage =
    "usage: sample CHECKPOINT [--samples N] [--set key=value ...]\n"
    "\n"
    "Text from a checkpoint (a step_N directory, or a run directory: its latest), drawn\n"
    "as the trainer draws its end-of-run sample. The keys below start as the checkpoint's\n"
    "run recorded them, and the draws go on from its sampling counter: a run's final\n"
    "checkpoint samples here the text the run printed after it.\n"
    "\n"
    "  --samples N        draw N samples one after another (default 1)\n"
    "  --set key=value    (or key=value) one of:\n"
    "      prompt, sample_tokens, temperature, top_k, tokenizer, seed   (docs/config.md)\n"
    "      seq_len     the window: the last seq_len tokens are seen (at most block_size)\n"
    "      precision   fp32, bf16, or fp64 (the CPU only)\n"
    "      device      auto (default), cpu or cuda\n"
    "      threads     CPU threads (0, the default: OpenMP's)\n";

// Keys taken from the checkpoint's recorded config when it has them.
const std::vector<std::string> kRecordedKeys = {"prompt", "sample_tokens", "temperature", "top_k", "tokenizer",
                                                "seed",   "seq_len",       "precision"};
// Keys --set may change: those, and where this process runs.
const std::set<std::string> kSettableKeys = {"prompt", "sample_tokens", "temperature", "top_k", "tokenizer",
                                             "seed",   "seq_len",       "precision",   "device", "threads"};

struct Options {
  std::string checkpoint;
  int samples = 1;
  std::vector<std::string> sets;  // key=value, in order
};

Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--samples" || a.rfind("--samples=", 0) == 0) {
      const bool joined = a != "--samples";
      if (!joined && i + 1 == argc) gpt::fail("--samples needs a value\n" + std::string(kUsage));
      o.samples = gpt::positive_int_option("--samples", joined ? a.substr(a.find('=') + 1) : argv[++i]);
    } else if (a == "--set") {
      if (i + 1 == argc) gpt::fail("--set needs key=value\n" + std::string(kUsage));
      o.sets.push_back(argv[++i]);
    } else if (a.rfind("--", 0) == 0) {
      gpt::fail("unknown option '" + a + "'\n" + std::string(kUsage));
    } else if (a.find('=') != std::string::npos && !positional.empty()) {
      o.sets.push_back(a);  // key=value after the checkpoint, as the trainer takes it
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 1)
    gpt::fail("expected one CHECKPOINT, got " + std::to_string(positional.size()) + "\n" + std::string(kUsage));
  o.checkpoint = positional[0];
  return o;
}

// The config the sample runs with: the checkpoint's shape, its run's recorded sampling
// keys (defaults where it recorded none), the device left to this machine, then --set.
gpt::Config sampling_config(const std::string& checkpoint, const std::vector<std::string>& sets) {
  gpt::Config cfg;
  cfg.model = gpt::checkpoint_model(checkpoint);
  cfg.device = "auto";  // the run's device need not be this machine's
  cfg.threads = 0;
  cfg.seq_len = std::min(cfg.seq_len, cfg.model.block_size);  // for a checkpoint that records none
  nlohmann::json recorded = nlohmann::json::object();  // the keys the checkpoint's run recorded
  if (const std::string text = gpt::checkpoint_config_json(checkpoint); !text.empty()) {
    const nlohmann::json all = nlohmann::json::parse(text);
    for (const std::string& key : kRecordedKeys)
      if (const auto it = all.find(key); it != all.end()) recorded[key] = *it;
    gpt::apply_json_text(cfg, recorded.dump(), checkpoint + "/manifest.json (its config)");
  }
  bool tokenizer_set = false, tokens_set = false, device_set = false;
  for (const std::string& kv : sets) {
    const std::string key = kv.substr(0, kv.find('='));
    if (!kSettableKeys.count(key)) {
      gpt::Config scratch;
      gpt::apply_override(scratch, kv);  // an unknown key: its error, with the nearest key's name
      gpt::fail("--set " + kv + ": sample does not read " + key +
                " (the model's shape is the checkpoint's; the keys it reads are in --help)");
    }
    gpt::apply_override(cfg, kv);
    tokenizer_set = tokenizer_set || key == "tokenizer";
    tokens_set = tokens_set || key == "sample_tokens";
    device_set = device_set || key == "device";
  }
  if (!device_set && cfg.precision == "fp64") cfg.device = "cpu";  // fp64 runs on the CPU only
  // A tokenizer file named by a relative path is found from where the run was started.
  if (!tokenizer_set && cfg.tokenizer != "bytes" && !gpt::name_taken(cfg.tokenizer))
    gpt::fail("tokenizer: the checkpoint's run used '" + cfg.tokenizer + "', which is not found from here; give "
              "--set tokenizer=FILE (the same vocabulary of " + std::to_string(cfg.model.vocab_size) + " tokens)");
  gpt::require(cfg.seq_len >= 1 && cfg.seq_len <= cfg.model.block_size,
               "seq_len=" + std::to_string(cfg.seq_len) + ": the window must be 1.." +
                   std::to_string(cfg.model.block_size) + " (the checkpoint's block_size)");
  gpt::require(cfg.sample_tokens > 0,
               "sample_tokens=" + std::to_string(cfg.sample_tokens) + ": nothing to sample" +
                   (tokens_set ? "" : " (the checkpoint's run sampled nothing)") + ": give --set sample_tokens=N");
  // Not the trainer's advice for a byte tokenizer on a larger vocabulary (to sample nothing):
  // sampling is what this tool is for.
  gpt::validate_sampling(cfg, "give --set tokenizer=FILE, the file of the checkpoint's vocabulary (llm.c's "
                              "gpt2_tokenizer.bin for GPT-2's 50257)");
  gpt::require_thread_count(cfg.threads, "threads");
  return cfg;
}

template <class A>
int draw(const gpt::Config& cfg, const std::string& checkpoint, int samples, gpt::Device device,
         gpt::Precision precision) {
  gpt::CachedDecoder<A> decoder(cfg.model, gpt::sample_window(cfg, cfg.seq_len), device, precision);
  const gpt::CheckpointState state = gpt::load_checkpoint_weights(decoder.model(), checkpoint);
  std::printf("sample: %s (step %lld, %d layers, width %d, vocab %d) | %s, %s | window %d | seed %llu, counter %llu\n",
              checkpoint.c_str(), static_cast<long long>(state.step), cfg.model.n_layer, cfg.model.n_embd,
              cfg.model.vocab_size, gpt::device_description(device).c_str(), gpt::precision_name(precision),
              decoder.capacity(), static_cast<unsigned long long>(cfg.seed),
              static_cast<unsigned long long>(state.sample_counter));
  uint64_t counter = state.sample_counter;
  for (int s = 0; s < samples; ++s) {
    const gpt::Sample drawn = gpt::sample_text(decoder, cfg, counter);
    gpt::print_sample(stdout, cfg, drawn.text, /*cut_short=*/false);
    // The figure that moves with every bit of the logits (SampleOptions::log_prob), as
    // the trainer's metrics log it.
    std::printf("log_prob %.17g\n", drawn.log_prob);
    std::fflush(stdout);
  }
  return 0;
}

int run(int argc, char** argv) {
  if (gpt::asks_for_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const Options o = parse(argc, argv);
  const std::string checkpoint = gpt::checkpoint_or_latest(o.checkpoint);
  const gpt::Config cfg = sampling_config(checkpoint, o.sets);
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  const gpt::Device device = gpt::resolve_device(cfg.device);
  const gpt::Precision precision = gpt::parse_precision(cfg.precision);
  gpt::require(!(precision == gpt::Precision::FP64 && device == gpt::Device::CUDA),
               "precision=fp64 runs on the CPU only (set device=cpu)");
  if (precision == gpt::Precision::FP64) return draw<double>(cfg, checkpoint, o.samples, device, precision);
  if (precision == gpt::Precision::BF16) return draw<gpt::bf16>(cfg, checkpoint, o.samples, device, precision);
  return draw<float>(cfg, checkpoint, o.samples, device, precision);
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("sample", [&] { return run(argc, argv); });
}
