/// @file
/// Run configuration: one JSON file (--config) plus `--set key=value` overrides.
///
/// Every key is declared once, in config.cpp's key table (name, field, meaning; the
/// type and default follow from the field); `--help` and docs/config.md are made from
/// that table, and validate() holds the checks. Unknown
/// keys, wrong types and impossible values are UserErrors naming the key (exit 2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

struct ModelConfig {
  int n_layer = 2;
  int n_embd = 64;
  int n_head = 4;
  int block_size = 64;   ///< maximum sequence length (rows of the position embedding)
  int vocab_size = 256;  ///< real vocabulary; the model pads it to a multiple of 128
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int head_size() const { return n_embd / n_head; }
  bool operator==(const ModelConfig&) const = default;
};

struct Config {
  ModelConfig model;

  /// batch: batch_size sequences of seq_len tokens per optimizer step (the global batch),
  /// micro_batch_size sequences per forward/backward on one rank; the gradient
  /// accumulation steps follow: batch_size / (micro_batch_size * dp).
  int seq_len = 64;
  int batch_size = 8;
  int micro_batch_size = 8;

  /// optimisation
  int steps = 100;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;  ///< cosine decays to lr * min_lr_ratio
  int warmup_steps = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;  ///< global-norm clip; 0 disables
  std::string optimizer = "adamw";  ///< adamw | sgd (plain SGD: the equivalence tests' one-step check)
  double test_grad_scale = 1.0;     ///< tests only (stage 01): every gradient times this
  uint64_t seed = 1337;

  /// data
  std::string train_data = "data/fortunes/train.bin";  ///< a shard or a glob of shards
  std::string val_data = "data/fortunes/val.bin";
  int val_every = 50;  ///< steps between validations; 0 disables (except at the end)
  int val_batches = 8;

  /// runtime
  std::string device = "auto";  ///< auto | cpu | cuda
  std::string precision = "fp32";  ///< fp32 | bf16
  std::string gemm = "hand";       ///< hand | cublas | v1..v5 (GPU matmuls)
  int threads = 0;  ///< OpenMP threads; 0 = all cores
  std::string run_dir = "runs/default";
  std::string metrics_file = "";  ///< "" = `<run_dir>/metrics.jsonl`
  std::string trace_file = "";
  int log_every = 1;

  /// distributed (stages 02+): layout of the ranks and how gradients travel
  int dp = 0;                    ///< data-parallel ranks; 0 = the ranks left by tp, pp, cp
  int tp = 1;                    ///< tensor-parallel ranks
  int pp = 1;                    ///< pipeline-parallel ranks
  int cp = 1;                    ///< context-parallel ranks
  int virtual_stages = 1;        ///< model chunks per pipeline rank
  bool sequence_parallel = false;  ///< tensor parallelism: elementwise work on 1/tp of the rows
  int zero = 0;                  ///< ZeRO stage over the dp group in stages 06+ (02-05 are one each)
  std::string cp_split = "zigzag";  ///< context parallelism: zigzag (load-balanced) | contiguous
  std::string schedule;              ///< pipeline schedule of stage 09 ("": the stage's own)
  std::string comm = "auto";     ///< auto | mpi | nccl
  std::string allreduce = "ring";  ///< ring (stage 02's own) | backend (the library's)
  double bucket_mb = 4.0;        ///< gradient bucket size in MiB
  double comm_timeout_s = 60.0;  ///< a peer silent this long is reported lost

  /// checkpoints
  int checkpoint_every = 0;  ///< 0 = only at the end
  bool checkpoint_at_end = true;
  int keep_checkpoints = 2;
  std::string resume = "";  ///< "" = start fresh, "latest" = newest in run_dir, else a path

  /// sampling at the end
  int sample_tokens = 200;
  double temperature = 0.8;
  int top_k = 40;
  std::string prompt = "\n";

  /// derived
  int grad_accum(int dp_ranks = 1) const { return batch_size / (micro_batch_size * dp_ranks); }
  int64_t tokens_per_step() const { return int64_t(batch_size) * seq_len; }
  std::string metrics_path() const {
    return metrics_file.empty() ? run_dir + "/metrics.jsonl" : metrics_file;
  }
};

/// Parses argv: --config FILE, --set key=value (repeatable; "key=value" alone also
/// works), --help. Loads, overrides, validates; a problem is a UserError.
/// Returns false when --help was printed (the caller exits 0).
bool parse_args(int argc, char** argv, Config& cfg, const char* program);

/// Loading pieces, for tests and tools.
void apply_json_file(Config& cfg, const std::string& path);
void apply_override(Config& cfg, const std::string& key_equals_value);
void validate(const Config& cfg, int dp = 1);

/// JSON of every key (what the checkpoint manifest stores) and a Markdown table of
/// every key with its meaning (docs/config.md is generated from it).
std::string config_to_json(const Config& cfg);
void apply_json_text(Config& cfg, const std::string& json_text, const std::string& origin);
std::string config_reference_markdown();
std::string config_help_text();

}  // namespace gpt
