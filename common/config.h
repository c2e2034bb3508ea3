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

/// The shape of the GPT-2 model: what a checkpoint must match to be loaded into it.
struct ModelConfig {
  int n_layer = 2;  ///< transformer blocks
  int n_embd = 64;  ///< width of the residual stream (channels per token), C
  int n_head = 4;   ///< attention heads per block; must divide n_embd
  int block_size = 64;   ///< maximum sequence length (rows of the position embedding)
  int vocab_size = 256;  ///< real vocabulary; the model pads it to a multiple of 128
  /// Rows of wte and columns of the logits, Vp: vocab_size rounded up to a multiple of 128.
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int head_size() const { return n_embd / n_head; }  ///< channels per attention head
  bool operator==(const ModelConfig&) const = default;  ///< every field equal
};

/// Everything a run is configured by, with the defaults a run gets when neither the
/// --config file nor a --set names the key. Each field is one key of config.cpp's table,
/// under its own name (model.n_layer is the key n_layer); validate() holds the limits.
struct Config {
  ModelConfig model;  ///< the model's shape (keys n_layer, n_embd, n_head, block_size, vocab_size)

  // batch: batch_size sequences of seq_len tokens per optimizer step (the global batch),
  // micro_batch_size sequences per forward/backward on one rank; the gradient
  // accumulation steps follow: batch_size / (micro_batch_size * dp).
  int seq_len = 64;  ///< tokens per training sequence, 1..block_size
  /// The global batch: sequences per optimizer step, all ranks together; a multiple of
  /// micro_batch_size * dp.
  int batch_size = 8;
  int micro_batch_size = 8;  ///< sequences per forward/backward on one rank

  // optimisation
  int steps = 100;  ///< optimizer steps to train; 0 only evaluates and samples
  double lr = 1e-3;  ///< peak learning rate, reached at the end of the warm-up
  double min_lr_ratio = 0.1;  ///< the schedule decays to lr * min_lr_ratio (constant: unused)
  int warmup_steps = 10;  ///< steps of linear learning-rate warm-up
  std::string lr_schedule = "cosine";  ///< after the warm-up: cosine, linear, constant or wsd
  double lr_decay_fraction = 0.2;  ///< wsd: the share of the steps after the warm-up spent decaying
  double weight_decay = 0.1;  ///< AdamW's decoupled decay, of 2-D weights and embeddings only
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  /// @var beta1
  /// AdamW's decay rate of the first moment, in [0, 1)
  /// @var beta2
  /// AdamW's decay rate of the second moment, in [0, 1)
  /// @var adam_eps
  /// AdamW's epsilon, added to the root of the second moment; > 0
  double grad_clip = 1.0;  ///< global-norm clip; 0 disables
  std::string optimizer = "adamw";  ///< adamw | sgd (plain SGD: the equivalence tests' one-step check)
  double test_grad_scale = 1.0;     ///< tests only (stage 01): every gradient times this
  uint64_t seed = 1337;  ///< seed of parameter initialisation and sampling

  // data
  std::string train_data = "data/fortunes/train.bin";  ///< a shard or a glob of shards
  std::string val_data = "data/fortunes/val.bin";  ///< validation tokens: a shard or a glob of shards
  int val_every = 50;  ///< steps between validations; 0 disables (except at the end)
  /// Micro-batches (of micro_batch_size sequences) per validation: the same fixed windows
  /// on every run.
  int val_batches = 8;
  /// A multiple-choice eval file in llm.c's format (HellaSwag; common/choices_file.h),
  /// scored at every validation; "" = none.
  std::string eval_choices = "";
  int eval_choices_limit = 0;  ///< score the first N examples of eval_choices only; 0 = all

  // runtime
  std::string device = "auto";  ///< auto | cpu | cuda
  std::string precision = "fp32";  ///< fp32 | bf16 | fp64 (stage 01 on the CPU: the ground truth)
  std::string gemm = "hand";       ///< hand | cublas | v1..v5 (GPU matmuls)
  int threads = 0;  ///< OpenMP threads; 0 = all cores
  std::string run_dir = "runs/default";  ///< directory of metrics, traces and checkpoints; not empty
  std::string metrics_file = "";  ///< "" = `<run_dir>/metrics.jsonl`
  std::string trace_file = "";  ///< Chrome/Perfetto trace file; "" = no trace
  int log_every = 1;  ///< steps between progress lines on the terminal, >= 1

  // distributed (stages 02+): layout of the ranks and how gradients travel
  int dp = 0;                    ///< data-parallel ranks; 0 = the ranks left by tp, pp, cp
  int tp = 1;                    ///< tensor-parallel ranks
  int pp = 1;                    ///< pipeline-parallel ranks
  int cp = 1;                    ///< context-parallel ranks
  int virtual_stages = 1;        ///< model chunks per pipeline rank
  bool sequence_parallel = false;  ///< tensor parallelism: elementwise work on 1/tp of the rows
  /// ZeRO stage 0..3 over the data-parallel ranks in stages 06+ (dp x cp in 10 and 11);
  /// stages 03-05 are ZeRO-1, -2 and -3 by construction.
  int zero = 0;
  bool zero3_prefetch = true;    ///< ZeRO-3: gather the next unit on a thread while this one computes
  std::string cp_split = "zigzag";  ///< context parallelism: zigzag (load-balanced) | contiguous
  std::string schedule;              ///< pipeline schedule of stages 09 and 11 ("": the stage's own)
  std::string activation_checkpointing = "none";  ///< none | selective | full (common/recompute.h; stage 11)
  std::string comm = "auto";     ///< auto | mpi | nccl
  std::string allreduce = "ring";  ///< ring (stage 02's own) | backend (the library's)
  double bucket_mb = 4.0;        ///< gradient bucket size in MiB
  double comm_timeout_s = 60.0;  ///< a peer silent this long is reported lost
  /// The same during a checkpoint save, when the ranks wait on rank 0's writes, fsyncs
  /// and read-back, which grow with the model and the disk (comm_timeout_s if larger).
  double save_timeout_s = 1800.0;

  // checkpoints
  int checkpoint_every = 0;  ///< 0 = only at the end
  bool checkpoint_at_end = true;  ///< write a checkpoint after the last step
  int keep_checkpoints = 2;  ///< newest checkpoints kept in run_dir; 0 keeps all
  std::string resume = "";  ///< "" = start fresh, "latest" = newest in run_dir, else a path

  // sampling at the end
  int sample_tokens = 200;  ///< tokens sampled after training; 0 = no sample
  double temperature = 0.8;  ///< divides the logits before sampling; > 0, lower is greedier
  int top_k = 40;  ///< sample among the k most likely tokens; 0 = all tokens
  std::string prompt = "\n";  ///< text the sample continues
  /// "bytes" (a token per byte) or a tokenizer file in llm.c's format (common/tokenizer.h)
  std::string tokenizer = "bytes";

  // derived
  /// Micro-batches per optimizer step on each rank: batch_size / (micro_batch_size *
  /// dp_ranks), whole once validate(cfg, dp_ranks) has passed.
  int grad_accum(int dp_ranks = 1) const { return batch_size / (micro_batch_size * dp_ranks); }
  int64_t tokens_per_step() const { return int64_t(batch_size) * seq_len; }  ///< global tokens per optimizer step
  /// Where the metrics go: metrics_file, or `<run_dir>/metrics.jsonl` when that is empty.
  std::string metrics_path() const {
    return metrics_file.empty() ? run_dir + "/metrics.jsonl" : metrics_file;
  }
};

/// The config part of a command line, collected before anything is read.
struct ConfigArgs {
  std::string config_file;             ///< --config FILE (or --config=FILE), once; empty: none
  std::vector<std::string> overrides;  ///< --set key=value and bare key=value, in their order
  std::vector<std::string> rest;       ///< the other arguments, in order: a tool's own options and values
};
/// Sorts argv[1..] into a ConfigArgs, reading no file; a --config given twice or without
/// its file, or a --set without its value, is a UserError.
ConfigArgs read_config_args(int argc, char** argv);
/// Loads args' file into cfg, then applies its overrides in order; does not validate.
void apply_config_args(Config& cfg, const ConfigArgs& args);

/// Parses argv: --config FILE, --set key=value (repeatable; "key=value" alone also
/// works), --help. Loads, overrides, validates; a problem is a UserError.
/// Returns false when --help was printed (the caller exits 0).
bool parse_args(int argc, char** argv, Config& cfg, const char* program);

/// Loading pieces, for tests and tools.
/// The keys of the JSON object in the file at `path` override cfg's; an
/// unreadable file or any bad key leaves cfg as it was and throws a UserError.
void apply_json_file(Config& cfg, const std::string& path);
/// Sets one key from "key=value" text (the whole value must parse as the key's type; a
/// string takes it as is, empty included); a UserError names the key and what was wrong.
void apply_override(Config& cfg, const std::string& key_equals_value);
/// Checks every key's limits and that batch_size divides into micro-batches over `dp`
/// data-parallel ranks; the first violation is a UserError naming key, value and reason.
/// Without `this_machine` the checks against this machine's memory are skipped: a plan
/// for other machines (build/bin/memory_plan) makes none of them.
void validate(const Config& cfg, int dp = 1, bool this_machine = true);

/// The sampling keys alone (sample_tokens, temperature, top_k, and the tokenizer and
/// prompt against vocab_size), as validate() checks them: for a tool that samples a
/// checkpoint without training. A problem is a UserError naming the key; `bytes_fix` is
/// the advice for a byte tokenizer on a vocabulary above 256 (the trainer's by default).
void validate_sampling(const Config& cfg,
                       const std::string& bytes_fix = "name this vocabulary's tokenizer file (llm.c's "
                                                      "gpt2_tokenizer.bin for GPT-2's 50257), or set sample_tokens=0");

/// Refuses (UserError naming `key`) a thread count below 0 or above 8 per core of this
/// machine: more only slow a run down, and tens of thousands fail to start or crash OpenMP.
/// 0 means OpenMP's default. validate() checks the `threads` key with it; tools their flag.
void require_thread_count(int threads, const std::string& key);

/// JSON of every key (what the checkpoint manifest stores).
std::string config_to_json(const Config& cfg);
/// apply_json_file's work on text already read: `origin` (a file's name, a manifest)
/// starts every message. Keys are flat and their JSON types must match exactly (an int
/// key takes neither 4.0 nor "4"); all or nothing, a UserError on the first bad key.
void apply_json_text(Config& cfg, const std::string& json_text, const std::string& origin);
/// The Markdown table of docs/config.md: every key with its type, default and meaning.
std::string config_reference_markdown();
/// The text of --help: usage, how the layers override, and every key with its type,
/// default and meaning. Its usage line names `train`; parse_args puts the program's name there.
std::string config_help_text();

}  // namespace gpt
