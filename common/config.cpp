// Run configuration: the key table, JSON and --set parsing, validation, help and docs.
//
// Everything a user can configure is listed once, in kKeys below: the name used in
// JSON files and in --set, where the value lives in a Config, and a one-line meaning.
// The type of a key is the type of its field, and its default is whatever a
// default-constructed Config holds, so neither can drift from config.h. Loading,
// overriding, printing (config_to_json), --help and the Markdown reference in
// docs/config.md are all loops over this one table; adding a Config field means adding
// one row here (and, when it has limits, one check in validate()).
//
// The config is formed in layers, each overriding the one before:
//   defaults (config.h)  <  the JSON file of --config  <  each --set key=value, in order.
#include "common/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>
#include <system_error>
#include <thread>
#include <variant>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/choices_eval.h"
#include "common/choices_file.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/data.h"
#include "common/error.h"
#include "common/files.h"
#include "common/gpt2_layout.h"
#include "common/host_memory.h"
#include "common/json_input.h"
#include "common/launcher.h"
#include "common/precision.h"
#include "common/recompute.h"
#include "common/tokenizer.h"
#include "common/unicode.h"

namespace gpt {
namespace {

// ordered_json keeps keys in insertion order, so config_to_json lists them in table
// order (model first, then batch, ...) rather than alphabetically.
using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr int kThreadsPerCoreLimit = 8;      // `threads` above this many per core is refused
constexpr double kCommTimeoutLimitS = 1e9;   // `comm_timeout_s` at most (31 years)
// `bucket_mb` at most: a bucket's fp32 gradients are one MPI call's count, an int
// (8191 MiB is 2,147,221,504 floats; 8192 would be 2^31).
constexpr double kBucketLimitMb = 8191;

// ---------------------------------------------------------------------------------
// The key table
// ---------------------------------------------------------------------------------

// A typed pointer to one field of a Config. The alternative held tells the key's type,
// and std::visit lets one generic piece of code handle all five types.
using FieldPtr = std::variant<int*, uint64_t*, double*, bool*, std::string*>;

struct Key {
  const char* name;              // as written in JSON and in --set
  FieldPtr (*field)(Config&);    // where the value lives in a given Config
  const char* meaning;           // one line, for --help and docs/config.md
};

// Meanings are one line of plain text: they appear in --help and in a Markdown table
// (so no '<' or '`' that Markdown would interpret).
//
// FIELD(model.n_layer) is a captureless lambda that returns &cfg.model.n_layer for the
// Config it is given. Captureless lambdas convert to plain function pointers, so the
// table below is a constant array with no per-row boilerplate.
#define FIELD(member) [](Config& c) -> FieldPtr { return &c.member; }

constexpr Key kKeys[] = {
    // model shape
    {"n_layer", FIELD(model.n_layer), "number of transformer blocks"},
    {"n_embd", FIELD(model.n_embd), "width of the residual stream (channels per token)"},
    {"n_head", FIELD(model.n_head), "attention heads per block; must divide n_embd"},
    {"block_size", FIELD(model.block_size),
     "maximum sequence length (rows of the position embedding)"},
    {"vocab_size", FIELD(model.vocab_size), "vocabulary size, at most 65536 (tokens are uint16)"},
    // batch
    {"seq_len", FIELD(seq_len), "tokens per training sequence, 1..block_size"},
    {"batch_size", FIELD(batch_size), "global batch: sequences per optimizer step, all ranks together"},
    {"micro_batch_size", FIELD(micro_batch_size), "sequences per forward/backward on one rank"},
    // optimisation
    {"steps", FIELD(steps), "optimizer steps to train (0: only evaluate and sample)"},
    {"lr", FIELD(lr), "peak learning rate, reached after warmup"},
    {"min_lr_ratio", FIELD(min_lr_ratio), "the schedule's decay ends at lr * min_lr_ratio (all but constant)"},
    {"warmup_steps", FIELD(warmup_steps), "steps of linear learning-rate warmup"},
    {"lr_schedule", FIELD(lr_schedule),
     "after the warmup: cosine, linear (both from lr down to lr * min_lr_ratio at steps), constant (lr), or wsd "
     "(warmup-stable-decay: lr, then over the last lr_decay_fraction of the steps after the warmup down to "
     "lr * min_lr_ratio)"},
    {"lr_decay_fraction", FIELD(lr_decay_fraction),
     "lr_schedule=wsd: the share of the steps after the warmup spent decaying, in (0, 1]"},
    {"weight_decay", FIELD(weight_decay), "AdamW weight decay (of 2-D weights and embeddings)"},
    {"beta1", FIELD(beta1), "AdamW decay rate of the first moment"},
    {"beta2", FIELD(beta2), "AdamW decay rate of the second moment"},
    {"adam_eps", FIELD(adam_eps), "AdamW epsilon added to the root of the second moment"},
    {"grad_clip", FIELD(grad_clip), "clip the global gradient norm to this value (0 disables)"},
    {"optimizer", FIELD(optimizer), "adamw, or sgd: p -= lr * g (no moments, no decay; the one-step equivalence check)"},
    {"test_grad_scale", FIELD(test_grad_scale),
     "tests only, stage 01: every gradient times this (a negative control of the equivalence tests); 1 otherwise"},
    {"seed", FIELD(seed), "seed of parameter initialisation, the training data's order and sampling"},
    // data
    {"train_data", FIELD(train_data), "training token shard, or a glob of shards"},
    {"val_data", FIELD(val_data), "validation token shard, or a glob of shards; may be empty when val_batches is 0"},
    {"val_every", FIELD(val_every), "steps between validations (0: only at the end)"},
    {"val_batches", FIELD(val_batches), "micro-batches (micro_batch_size sequences each) per validation; the same fixed windows on every run, each at most once (val_batches x micro_batch_size <= the windows of val_data)"},
    {"eval_choices", FIELD(eval_choices), "a multiple-choice eval file in llm.c's format (HellaSwag: hellaswag_val.bin) scored at every validation and at the end, acc and acc_norm logged (empty: none)"},
    {"eval_choices_limit", FIELD(eval_choices_limit), "score only the first N examples of eval_choices (0: all)"},
    // runtime
    {"device", FIELD(device), "auto, cpu or cuda (auto: cuda when a GPU is present)"},
    {"precision", FIELD(precision), "fp32, bf16 (bf16 activations, fp32 master weights) or fp64 (stage 01 on the CPU: the ground truth)"},
    {"gemm", FIELD(gemm), "matmuls on the GPU: hand (the fastest hand-written version for the device), cublas (cuBLASLt baseline), or v1..v5 (one version of kernels/cuda/gemm/); ignored on the CPU"},
    {"threads", FIELD(threads), "OpenMP threads per rank (0: OpenMP's default: OMP_NUM_THREADS, else all cores; at most 8 per core)"},
    {"run_dir", FIELD(run_dir), "directory for metrics and checkpoints"},
    {"metrics_file", FIELD(metrics_file), "JSON-lines metrics file, appended to (empty: metrics.jsonl in run_dir); an existing file must be a metrics log"},
    {"trace_file", FIELD(trace_file), "Chrome/Perfetto trace: stage 01 writes this file, stages 02+ one per rank, this path + .rankN.json for world rank N, and an earlier job's rank traces there are removed as the job starts (empty: no trace); an existing file is replaced only if it is a trace"},
    {"log_every", FIELD(log_every), "steps between progress lines on the terminal"},
    // distributed
    {"dp", FIELD(dp), "data-parallel ranks (0: the job's ranks / (tp * pp * cp)); stages 02+"},
    {"tp", FIELD(tp), "tensor-parallel ranks (1: none); dp x pp x cp x tp = ranks"},
    {"pp", FIELD(pp), "pipeline-parallel ranks (1: none)"},
    {"cp", FIELD(cp), "context-parallel ranks (1: none)"},
    {"virtual_stages", FIELD(virtual_stages),
     "model chunks per pipeline rank (interleaved schedules; 1: one); pp x virtual_stages at most n_layer"},
    {"sequence_parallel", FIELD(sequence_parallel),
     "tensor parallelism: layernorms, residuals and the embedding's sum on 1/tp of the rows each (seq_len / cp must divide by tp); stages 06+"},
    {"cp_split", FIELD(cp_split),
     "context parallelism: zigzag (2 cp chunks, rank r holds r and 2cp-1-r: equal causal work) or contiguous (cp chunks); stages 10 and 11"},
    {"schedule", FIELD(schedule),
     "pipeline schedule: gpipe, 1f1b, interleaved (virtual_stages chunks per rank) or zb-h1 (zero bubble); empty: the stage's own (07 gpipe, 08 1f1b, 09 and 11 interleaved); stages 09 and 11 read it"},
    {"activation_checkpointing", FIELD(activation_checkpointing),
     "activations recomputed in the backward instead of kept per micro-batch: none; selective (ln_1, ln_2 and the GELU's output rebuilt, 6 of a block's 16 C values a row, for a few elementwise passes); full (each block's forward run again from its kept input: 1 C a row kept, about a third more compute); stage 11 reads it"},
    {"zero", FIELD(zero), "ZeRO stage over the data-parallel group, 0..3 (stages 06+; stages 03-05 are ZeRO-1, -2, -3 by construction)"},
    {"zero3_prefetch", FIELD(zero3_prefetch),
     "ZeRO-3 (stage 05, and zero=3 in stages 06+): gather the next unit on a thread while this one computes; false gathers each unit on the main thread when a pass needs it (the same bits; one unit fewer in memory, every gather exposed in the trace)"},
    {"comm", FIELD(comm), "communication backend of stages 02+: auto, mpi or nccl (stage 01 has no peers)"},
    {"allreduce", FIELD(allreduce), "gradient all-reduce of stage 02: ring (written out) or backend"},
    {"bucket_mb", FIELD(bucket_mb),
     "gradient bucket size in MiB (one all-reduce or reduce-scatter per bucket; stages 02+, stage 01 has no peers)"},
    {"comm_timeout_s", FIELD(comm_timeout_s), "seconds without an answer before a peer is reported lost (1 to 1e9)"},
    {"save_timeout_s", FIELD(save_timeout_s),
     "the same while a checkpoint is saved (rank 0's writes and read-back, waited for by the others), and "
     "between two of the lead rank's reports on its end-of-run sample (a report every quarter of it: the sample "
     "may take any time); comm_timeout_s if larger; 1 to 1e9"},
    // checkpoints
    {"checkpoint_every", FIELD(checkpoint_every), "steps between checkpoints (0: only at the end)"},
    {"checkpoint_at_end", FIELD(checkpoint_at_end), "write a checkpoint after the last step (not when it would rewrite, untrained, the checkpoint the run resumed); false still saves a last step that checkpoint_every falls on"},
    {"keep_checkpoints", FIELD(keep_checkpoints), "newest checkpoints kept in run_dir (0: keep all)"},
    {"resume", FIELD(resume), "checkpoint to resume: a path, latest (newest in run_dir) or empty"},
    // sampling
    {"sample_tokens", FIELD(sample_tokens), "tokens to sample after training (0: no sample)"},
    {"temperature", FIELD(temperature), "sampling temperature (> 0; lower is greedier)"},
    {"top_k", FIELD(top_k), "sample among the k most likely tokens (0: all tokens)"},
    {"prompt", FIELD(prompt), "text the sample starts from (empty: the tokenizer's start token, a newline or end-of-text)"},
    {"tokenizer", FIELD(tokenizer),
     "how the prompt is encoded and the sample decoded: bytes (a token per byte, vocab_size at most 256), or a tokenizer file in llm.c's format (gpt2_tokenizer.bin: GPT-2's BPE) with vocab_size tokens, checked when named even if nothing is sampled"},
};

#undef FIELD

const Key* find_key(std::string_view name) {
  for (const Key& k : kKeys)
    if (name == k.name) return &k;
  return nullptr;
}

// ---------------------------------------------------------------------------------
// Per-type helpers. Each is overloaded on the field type; std::visit on a FieldPtr
// picks the right one.
// ---------------------------------------------------------------------------------

const char* type_name(const int*) { return "int"; }
const char* type_name(const uint64_t*) { return "uint64"; }
const char* type_name(const double*) { return "double"; }
const char* type_name(const bool*) { return "bool"; }
const char* type_name(const std::string*) { return "string"; }

const char* type_of(const Key& key) {
  Config scratch;
  return std::visit([](auto* p) { return type_name(p); }, key.field(scratch));
}

// The value of a key as JSON. The accessors hand out mutable pointers, so reading goes
// through a copy; that keeps the callers' Config const without a const_cast.
Json value_of(const Key& key, Config copy) {
  return std::visit([](auto* p) { return Json(*p); }, key.field(copy));
}

// Values are shown the way they would be written in a config file: strings quoted and
// escaped ("\n"), doubles in their shortest exact form (1e-08, 0.95).
std::string show(const Json& j) { return j.dump(); }
std::string show(double x) { return Json(x).dump(); }

// A short description of what a JSON value is, for "expected int, got ..." messages.
std::string describe(const Json& j) {
  std::string text = j.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "bool " + text;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer " + text;
    case Json::value_t::number_float: return "float " + text;  // 2.0 too: not an integer
    case Json::value_t::string: return "string " + text;
    case Json::value_t::array: return "array " + text;
    case Json::value_t::object: return "object " + text;
    default: return text;
  }
}

// --- reading a value from JSON ------------------------------------------------------
// `where` is "<origin>: <key>", the prefix of every message. The JSON type must match
// the key's type exactly (an int key does not take 4.0 or "4"): a config file is read by
// more than this program, and silent conversions are where surprises come from.

[[noreturn]] void wrong_type(const std::string& where, const char* expected, const Json& j) {
  fail(where + ": expected " + expected + ", got " + describe(j));
}

void read_json(int& out, const Json& j, const std::string& where) {
  if (!j.is_number_integer()) wrong_type(where, "int", j);
  // nlohmann stores non-negative integers as unsigned, negative ones as signed; both
  // must fit an int, which is what the field is.
  bool fits = j.is_number_unsigned()
                  ? j.get<uint64_t>() <= uint64_t(std::numeric_limits<int>::max())
                  : j.get<int64_t>() >= std::numeric_limits<int>::min() &&
                        j.get<int64_t>() <= std::numeric_limits<int>::max();
  if (!fits) fail(where + ": " + j.dump() + " is out of range for int");
  out = j.get<int>();
}

void read_json(uint64_t& out, const Json& j, const std::string& where) {
  if (!j.is_number_unsigned()) wrong_type(where, "uint64 (an integer >= 0)", j);
  out = j.get<uint64_t>();
}

void read_json(double& out, const Json& j, const std::string& where) {
  if (!j.is_number()) wrong_type(where, "double", j);  // integers are fine: 1 means 1.0
  out = j.get<double>();
}

void read_json(bool& out, const Json& j, const std::string& where) {
  if (!j.is_boolean()) wrong_type(where, "bool (true or false)", j);
  out = j.get<bool>();
}

void read_json(std::string& out, const Json& j, const std::string& where) {
  if (!j.is_string()) wrong_type(where, "string", j);
  out = j.get<std::string>();
}

// --- reading a value from --set text -------------------------------------------------
// The whole text must be the value: "4x" is not an int, " 4" is not either. `what` is
// "--set key=value", the prefix of every message.

template <class T>
void parse_number(T& out, std::string_view text, const std::string& what, const char* type) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range)
    fail(what + ": '" + std::string(text) + "' is out of range for " + type);
  if (ec != std::errc() || ptr != end || text.empty())
    fail(what + ": '" + std::string(text) + "' is not " + type);
  out = value;
}

void parse_text(int& out, std::string_view text, const std::string& what) {
  parse_number(out, text, what, "an int");
}

void parse_text(uint64_t& out, std::string_view text, const std::string& what) {
  parse_number(out, text, what, "a uint64 (an integer >= 0)");
}

void parse_text(double& out, std::string_view text, const std::string& what) {
  double value = 0;
  parse_number(value, text, what, "a number");
  // from_chars accepts "inf" and "nan"; JSON cannot hold them and no key wants them.
  if (!std::isfinite(value)) fail(what + ": '" + std::string(text) + "' is not a finite number");
  out = value;
}

void parse_text(bool& out, std::string_view text, const std::string& what) {
  if (text == "true" || text == "1") {
    out = true;
  } else if (text == "false" || text == "0") {
    out = false;
  } else {
    fail(what + ": '" + std::string(text) + "' is not a bool (true, false, 1 or 0)");
  }
}

void parse_text(std::string& out, std::string_view text, const std::string&) {
  out = std::string(text);  // taken as-is: an empty value is a valid empty string
}

// --- unknown keys -----------------------------------------------------------------------

// Levenshtein distance: the fewest single-character insertions, deletions and
// substitutions that turn a into b. Two rows of the usual DP table suffice.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// " (did you mean 'n_layer'?)" for a near miss, or "" when nothing is close.
std::string suggestion(std::string_view unknown) {
  // Keys are flat: "model.n_layer" is written "n_layer".
  size_t dot = unknown.rfind('.');
  if (dot != std::string_view::npos && find_key(unknown.substr(dot + 1)))
    return " (keys are flat: did you mean '" + std::string(unknown.substr(dot + 1)) + "'?)";
  const Key* best = nullptr;
  size_t best_distance = 3;  // only suggest within distance 2
  for (const Key& k : kKeys) {
    size_t d = edit_distance(unknown, k.name);
    if (d < best_distance) best = &k, best_distance = d;
  }
  return best ? std::string(" (did you mean '") + best->name + "'?)" : "";
}

// A key as a message can show it: control characters (a NUL would end the message where
// it is printed) written as \xNN.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
      continue;
    }
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\x%02X", byte);
    out += escaped;
  }
  return out;
}

[[noreturn]] void unknown_key(const std::string& where, std::string_view key) {
  fail(where + ": unknown key '" + printable(key) + "'" + suggestion(key) +
       "; run with --help for the list of keys");
}

// --- validation helpers -------------------------------------------------------------------
// Each check is written so that the value passes only when the condition holds; a NaN
// (which compares false with everything) therefore fails rather than slipping through.

void check(bool ok, const char* key, const std::string& value, const std::string& reason) {
  if (!ok) fail(std::string(key) + "=" + value + ": " + reason);
}
void check_int(bool ok, const char* key, int64_t value, const std::string& reason) {
  check(ok, key, std::to_string(value), reason);
}
void check_double(bool ok, const char* key, double value, const std::string& reason) {
  check(ok, key, show(value), reason);
}

// The most this process could hold: the machine's memory or its cgroup's limit (host_memory.h).
HostRoom memory_capacity() { return host_capacity().value_or(HostRoom{0, ""}); }

// A model too large for this machine (or its container) fails here, before its layout (a
// name and a shape for each of its 12 n_layer + 4 tensors) and its buffers are built.
// Every rank holds its share of the weights, their gradients and the optimizer's state, in
// fp32: 16 bytes a parameter with AdamW's two moments, 8 with SGD (twice that in fp64,
// every buffer a double). The least share of any stage is 1/(tp pp dp) (ZeRO-3's; stage 05
// is ZeRO-3 without the zero key), and the ranks a launcher started on this machine hold
// theirs side by side: when those shares exceed the memory this job may hold
// (host_capacity), it cannot run, whatever the stage. `dp` is the mesh's; before MPI has
// started (parse_args) it is not known, and the launcher's count of ranks gives it, as
// the mesh will (dp x tp x pp x cp = ranks).
// With eval_choices every rank also holds, while the eval runs, a whole copy of the
// compute weights (4 bytes a parameter, 2 in bf16, 8 in fp64): a run whose shares fit but
// whose eval does not would otherwise stop at its first validation.
void require_memory_for_weights(const Config& cfg, int dp) {
  const ModelConfig& m = cfg.model;
  // In double: the axes are not checked yet, and three of 2^30 pass int64's end.
  const double model_ranks = double(std::max(cfg.tp, 1)) * std::max(cfg.pp, 1) * std::max(cfg.cp, 1);
  if (const int ranks = launcher_world_size(); model_ranks <= ranks && ranks % int(model_ranks) == 0)
    dp = std::max(dp, ranks / int(model_ranks));
  const int here = launcher_local_size();  // this rank's share is one of `here` on this machine
  const double params = gpt2_param_count(m, m.padded_vocab());
  const double share = double(std::max(cfg.tp, 1)) * std::max(cfg.pp, 1) * std::max(dp, 1);
  const bool fp64 = cfg.precision == "fp64";
  const double bytes_each = (cfg.optimizer == "sgd" ? 8 : 16) * (fp64 ? 2 : 1);
  const double bytes = bytes_each * params / share;  // one rank's
  const HostRoom memory = memory_capacity();
  const double eval_each = cfg.precision == "bf16" ? 2 : cfg.precision == "fp64" ? 8 : 4;
  const double eval_bytes = cfg.eval_choices.empty() ? 0.0 : eval_each * params;
  const std::string ranks_here = here > 1 ? " x " + std::to_string(here) + " ranks on this machine" : "";
  if (memory.bytes > 0 && here * bytes <= double(memory.bytes) && here * (bytes + eval_bytes) > double(memory.bytes)) {
    char text[384];
    std::snprintf(text, sizeof text,
                  ": every rank holds a whole copy of the model's %.3g parameters while it scores (%.3g GB), and "
                  "with this rank's %.3g GB of training state%s that is more than the %.3g GB of %s",
                  params, eval_bytes / 1e9, bytes / 1e9, ranks_here.c_str(), double(memory.bytes) / 1e9,
                  memory.source.c_str());
    fail("eval_choices=" + cfg.eval_choices + text + "; evaluate the checkpoints afterwards with eval_choices");
  }
  if (memory.bytes > 0 && here * bytes > double(memory.bytes)) {
    char text[384];
    std::snprintf(text, sizeof text,
                  "%.3g parameters; this rank's share of them (1/%.0f) needs %.3g GB for the weights, their "
                  "gradients and the optimizer's state (%.0f bytes each, %s)%s, more than the %.3g GB of %s",
                  params, share, bytes / 1e9, bytes_each, fp64 ? "fp64" : "fp32", ranks_here.c_str(),
                  double(memory.bytes) / 1e9, memory.source.c_str());
    fail("n_layer=" + std::to_string(m.n_layer) + ", n_embd=" + std::to_string(m.n_embd) +
         ", vocab_size=" + std::to_string(m.vocab_size) + ", block_size=" + std::to_string(m.block_size) + ": " +
         text);
  }
}

// The head's logits and their gradient: a micro-batch's rows x the padded vocabulary in
// fp32 (doubles in fp64; its tp share of the vocabulary, its cp share of the tokens), on
// the rank that computes the loss. Larger than the machine (or its container), the run
// would be killed for memory without a word, so it fails here.
void require_memory_for_logits(const Config& cfg) {
  const double rows = double(cfg.micro_batch_size) * cfg.seq_len / std::max(cfg.cp, 1);
  const double bytes_each = cfg.precision == "fp64" ? 8 : 4;
  const double bytes = 2 * bytes_each * rows * double(cfg.model.padded_vocab()) / std::max(cfg.tp, 1);
  const HostRoom memory = memory_capacity();
  if (memory.bytes > 0 && bytes > double(memory.bytes)) {
    char text[256];
    std::snprintf(text, sizeof text,
                  ": the logits of a micro-batch and their gradient need %.3g GB, more than the %.3g GB of %s "
                  "(a smaller micro_batch_size accumulates more micro-batches instead)",
                  bytes / 1e9, double(memory.bytes) / 1e9, memory.source.c_str());
    fail("micro_batch_size=" + std::to_string(cfg.micro_batch_size) + " x seq_len=" + std::to_string(cfg.seq_len) +
         " x padded vocabulary " + std::to_string(cfg.model.padded_vocab()) + text);
  }
}

// Whatever the machine (memory_plan plans for others): a rank's byte counts are size_t
// and int64 sums, which a model of absurd size would wrap, printing small figures for a
// model no machine holds. So a coarse size of the whole run as if on one rank, taken in
// double, must stay below 2^60 bytes (1 EiB; 8x below where int64 wraps, far above any
// machine). It is not a strict bound of every buffer (the recompute scratch, an eval's
// copy of the weights), but of the order of all of them, with that much room:
//   weights + gradients + moments   32 bytes (fp64, AdamW) x parameters
//   activations                     every micro-batch of the batch in flight (GPipe at
//                                   dp 1) x rows x 8 bytes x (n_layer (32 C + 2 n_head T) + 4 V)
// (a block keeps about 32 C values a row and at most n_head T attention probabilities;
// the head its logits and their gradient, V each).
void require_countable_sizes(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  constexpr double kLimit = 1152921504606846976.0;  // 2^60
  const double params = gpt2_param_count(m, m.padded_vocab());
  const double rows = double(cfg.micro_batch_size) * cfg.seq_len;
  const double micro_batches = double(cfg.batch_size) / cfg.micro_batch_size;
  const double per_row = double(m.n_layer) * (32.0 * m.n_embd + 2.0 * m.n_head * cfg.seq_len) +
                         4.0 * double(m.padded_vocab());
  const double bytes = 32 * params + micro_batches * rows * 8 * per_row;
  if (bytes >= kLimit) {
    char text[384];
    std::snprintf(text, sizeof text,
                  "%.3g parameters, %d layers of width %d, batch_size %d in micro-batches of %d x %d tokens: its "
                  "training state on one rank would be some %.3g bytes, past 2^60 (1 EiB), where this program's "
                  "byte counts are no longer safe from overflow",
                  params, m.n_layer, m.n_embd, cfg.batch_size, cfg.micro_batch_size, cfg.seq_len, bytes);
    fail(std::string("the model is too large to plan or run: ") + text);
  }
}

// The sample is decoded by the tokenizer, so every id the model can emit must be one of
// its tokens (a larger vocabulary would print garbage after a whole training run), and
// the ids the sample starts from must be the model's. A bad tokenizer file fails here,
// naming it; `bytes_fix` is the advice for a byte tokenizer on a larger vocabulary.
void check_tokenizer(const Config& cfg, const std::string& bytes_fix) {
  const int V = cfg.model.vocab_size;
  const Tokenizer tokenizer = Tokenizer::named(cfg.tokenizer);
  if (cfg.tokenizer == "bytes" && V > kByteVocab)
    fail("tokenizer=bytes decodes the ids 0..255 only, but vocab_size=" + std::to_string(V) + ": " + bytes_fix);
  if (cfg.tokenizer != "bytes" && tokenizer.vocab_size() != V)
    fail("tokenizer=" + cfg.tokenizer + " has " + std::to_string(tokenizer.vocab_size()) +
         " tokens, but vocab_size=" + std::to_string(V) + ": the model and the tokenizer must share one vocabulary");
  // A vocabulary smaller than the tokenizer's (bytes only, by the checks above) lacks ids.
  for (const int id : tokenizer.encode_prompt(cfg.prompt)) {
    if (id < V) continue;
    if (cfg.prompt.empty())
      fail("prompt is empty, so the sample would start from the tokenizer's start token " + std::to_string(id) +
           " (" + (cfg.tokenizer == "bytes" ? "the newline" : "end-of-text") + "), which is not a token of vocab_size=" +
           std::to_string(V));
    fail("prompt: it encodes to token " + std::to_string(id) + ", outside vocab_size=" + std::to_string(V) +
         " (with tokenizer=bytes a prompt's bytes are its token ids)");
  }
}

// Every string key must be UTF-8 without NUL: the checkpoint manifest records the config
// as JSON, which holds UTF-8 only (a path with other bytes would fail the first save,
// after the steps before it were trained), and a NUL would cut a path short where the
// system reads it.
void check_text_keys(const Config& cfg) {
  Config copy = cfg;
  for (const Key& key : kKeys) {
    const FieldPtr field = key.field(copy);
    const std::string* const* text = std::get_if<std::string*>(&field);
    if (!text) continue;
    try {
      decode_utf8(**text, key.name);
    } catch (const UserError& e) {
      fail(std::string(e.what()) + " (the checkpoint manifest records the config as JSON, which holds UTF-8 only)");
    }
    const size_t nul = (*text)->find('\0');
    if (nul != std::string::npos)
      fail(std::string(key.name) + " holds a NUL character at byte " + std::to_string(nul) +
           " (a path or text cannot hold one)");
  }
}

// The metrics log and the trace must be two files: a trace written at the end would
// replace the log (stage 01 writes trace_file itself, stages 02+ trace_file.rankN.json).
void require_distinct_outputs(const Config& cfg) {
  if (cfg.trace_file.empty()) return;
  const fs::path metrics =
      cfg.metrics_file.empty() ? fs::path(cfg.run_dir) / "metrics.jsonl" : fs::path(cfg.metrics_file);
  const std::string log = resolved_path(metrics).string(), trace = resolved_path(cfg.trace_file).string();
  const bool rank_trace = log.starts_with(trace + ".rank") && log.ends_with(".json");
  if (log == trace || rank_trace)
    fail("metrics_file '" + metrics.string() + "' is " + (rank_trace ? "a rank's trace of" : "the same file as") +
         " trace_file '" + cfg.trace_file + "': the trace would replace the metrics log; name two files");
}

// A file the run writes (metrics_file, trace_file) or reads (train_data, val_data,
// eval_choices, a tokenizer file) must not lie inside one of run_dir's checkpoint
// directories (a step entry, is_step_entry_name: step_N/, and its .tmp and .old forms): a
// save of that step replaces the directory whole, pruning deletes it, and either takes
// the file along. A data key may be a glob: every file it matches is checked too.
void require_outside_checkpoints(const std::string& path, const char* key, const std::string& run_dir,
                                 bool glob = false) {
  if (path.empty()) return;
  const fs::path dir = resolved_path(run_dir);
  const auto refuse_inside = [&](const std::string& file) {
    const fs::path inside = resolved_path(file).lexically_relative(dir);
    if (inside.empty() || std::distance(inside.begin(), inside.end()) < 2) return;  // elsewhere, or run_dir itself
    const std::string first = inside.begin()->string();
    if (is_step_entry_name(first))
      fail(std::string(key) + "='" + path + "'" + (file == path ? "" : " matches '" + file + "', which") +
           " lies inside " + (dir / first).string() + ", a checkpoint directory of run_dir: a save replaces it "
           "whole and pruning deletes it, with the file in it; put the file in run_dir itself or elsewhere");
  };
  refuse_inside(path);
  if (!glob || path.find_first_of("*?[") == std::string::npos) return;
  std::vector<std::string> files;
  try {
    files = expand_shards(path);
  } catch (const UserError&) {  // nothing matches: the loader says so, naming the key
  }
  for (const std::string& file : files) refuse_inside(file);
}

// run_dir itself must not lie inside another run's checkpoint directory: that run's next
// save of the step, or its pruning, would take this whole run with it. Such a directory
// is a step_ entry (step_N, step_N.tmp, step_N.old) that is a checkpoint (it holds
// manifest.json) or lies in a run directory (beside a run's lock file, common/run_lock.h).
// A directory of another name is left alone: no run saves over it or prunes it.
void require_run_dir_outside_checkpoints(const std::string& run_dir) {
  const std::string dir = enclosing_checkpoint(run_dir);  // common/files.h
  if (dir.empty()) return;
  std::error_code ec;
  const bool checkpoint = fs::is_regular_file(fs::path(dir) / "manifest.json", ec);
  fail("run_dir='" + run_dir + "' lies inside " + dir + ", " +
       (checkpoint ? "a checkpoint" : "a checkpoint directory of another run") +
       ": that run's saves replace the directory whole and its pruning deletes it, with this run's "
       "checkpoints and metrics in it; choose a run_dir outside it");
}

}  // namespace

// -------------------------------------------------------------------------------------------
// Loading
// -------------------------------------------------------------------------------------------

void apply_json_text(Config& cfg, const std::string& json_text, const std::string& origin) {
  Json doc;
  try {
    doc = parse_json_input<Json>(json_text, [&](const std::string& reason) { fail(origin + ": " + reason); });
  } catch (const Json::parse_error& e) {
    fail(origin + ": invalid JSON: " + json_reason(e));
  } catch (const Json::out_of_range& e) {  // a number beyond a double's range, such as 1e400
    fail(origin + ": " + json_reason(e) + " (no key takes a number beyond a double's range)");
  }
  if (!doc.is_object())
    fail(origin + ": expected a JSON object of key: value pairs, got " + describe(doc));

  // Values go into a copy first, so a file with an error leaves cfg untouched.
  Config result = cfg;
  for (const auto& [name, value] : doc.items()) {
    const Key* key = find_key(name);
    if (!key) {
      if (value.is_object())  // e.g. "model": {"n_layer": 4}
        fail(origin + ": unknown key '" + printable(name) + "': keys are flat (write \"n_layer\": 4, not " +
             "\"model\": {\"n_layer\": 4}); run with --help for the list of keys");
      unknown_key(origin, name);
    }
    std::string where = origin + ": " + name;
    std::visit([&](auto* p) { read_json(*p, value, where); }, key->field(result));
  }
  cfg = result;
}

// Any readable file, not only a regular one: `--config <(jq ... base.json)` hands the
// trainer a pipe. (So a named pipe that nothing writes to waits for its writer, as `cat`
// would.)
void apply_json_file(Config& cfg, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail("config file '" + path + "' is a directory, not a JSON file");
  std::ifstream in(path, std::ios::binary);
  // A failed open leaves the reason in errno (on POSIX systems, where this runs).
  if (!in) fail("cannot read config file '" + path + "': " + std::strerror(errno));
  // Read up to a bound: a config holds some tens of keys, and a path such as /dev/zero
  // would otherwise be read until memory runs out.
  constexpr size_t kConfigLimit = size_t(1) << 20;
  std::string text(kConfigLimit + 1, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  if (in.bad()) fail("cannot read config file '" + path + "': read error");
  if (size_t(in.gcount()) > kConfigLimit)
    fail("config file '" + path + "' is over 1 MiB long: a config is a small JSON object of keys; is it the "
         "right file?");
  text.resize(size_t(in.gcount()));
  apply_json_text(cfg, text, "config file '" + path + "'");
}

void apply_override(Config& cfg, const std::string& key_equals_value) {
  std::string what = "--set " + key_equals_value;
  size_t eq = key_equals_value.find('=');
  if (eq == std::string::npos || eq == 0)
    fail(what + ": expected key=value (for example --set lr=3e-4)");
  std::string_view text = key_equals_value;
  std::string_view name = text.substr(0, eq), value = text.substr(eq + 1);
  const Key* key = find_key(name);
  if (!key) unknown_key(what, name);
  std::visit([&](auto* p) { parse_text(*p, value, what); }, key->field(cfg));
}

namespace {

// Under a launcher (mpirun, srun) every rank parses the same command line; the first
// prints what all would.
bool first_rank_or_alone() {
  return launcher_rank() <= 0;
}

}  // namespace

ConfigArgs read_config_args(int argc, char** argv) {
  ConfigArgs args;
  bool have_config = false;
  auto set_config = [&](std::string path) {
    if (path.empty()) fail("--config needs a file name: --config FILE");
    if (have_config)
      fail("--config given twice ('" + args.config_file + "' and '" + path +
           "'); use one file and --set for changes");
    args.config_file = std::move(path);
    have_config = true;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config") {
      if (i + 1 >= argc) fail("--config needs a file name: --config FILE");
      set_config(argv[++i]);
    } else if (arg.starts_with("--config=")) {
      set_config(arg.substr(std::strlen("--config=")));
    } else if (arg == "--set") {
      if (i + 1 >= argc) fail("--set needs a value: --set key=value");
      args.overrides.push_back(argv[++i]);
    } else if (!arg.starts_with("-") && arg.find('=') != std::string::npos) {
      args.overrides.push_back(arg);  // bare key=value, the same as --set key=value
    } else {
      args.rest.push_back(arg);
    }
  }
  return args;
}

void apply_config_args(Config& cfg, const ConfigArgs& args) {
  // The file is the base and the overrides go on top in the order given, wherever
  // --config stood on the command line.
  if (!args.config_file.empty()) apply_json_file(cfg, args.config_file);
  for (const std::string& o : args.overrides) apply_override(cfg, o);
}

bool parse_args(int argc, char** argv, Config& cfg, const char* program) {
  if (asks_for_help(argc, argv)) {
    std::string text = config_help_text();
    // The usage line names the binary that was actually run.
    if (program && *program && text.starts_with("usage: train"))
      text = "usage: " + std::string(program) + text.substr(std::strlen("usage: train"));
    if (first_rank_or_alone()) std::fputs(text.c_str(), stdout);
    return false;
  }

  const ConfigArgs args = read_config_args(argc, argv);
  if (!args.rest.empty())
    fail("unknown argument '" + args.rest.front() + "'; usage: " + (program ? program : "train") +
         " [--config FILE] [--set key=value]... (see --help)");
  apply_config_args(cfg, args);
  validate(cfg);
  return true;
}

// -------------------------------------------------------------------------------------------
// Validation: each rule names the key, its value and the reason.
// -------------------------------------------------------------------------------------------

void require_thread_count(int threads, const std::string& key) {
  if (threads < 0) fail(key + "=" + std::to_string(threads) + ": must be >= 0 (0: all cores)");
  // More threads than a few per core only slow a run down, and tens of thousands fail to
  // start (the system's limit on threads) or crash OpenMP.
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const auto at_most = [&](const std::string& what) {
    fail(what + ": must be at most " + std::to_string(kThreadsPerCoreLimit) + " per core of this machine (" +
         std::to_string(cores) + " cores)");
  };
  if (threads > kThreadsPerCoreLimit * cores) at_most(key + "=" + std::to_string(threads));
  // 0 leaves the count to OpenMP, which reads OMP_NUM_THREADS (its first number: the
  // outermost level's): the same limit holds there.
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (threads != 0 || env == nullptr) return;
  const std::string text(env);
  int64_t first = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), first);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && first > kThreadsPerCoreLimit * cores))
    at_most("OMP_NUM_THREADS=" + text + " (the threads taken when " + key + "=0)");
}

void validate(const Config& cfg, int dp, bool this_machine) {
  const ModelConfig& m = cfg.model;
  // First: the checks below quote string values through JSON, which throws on bytes that
  // are not UTF-8.
  check_text_keys(cfg);

  // Model shape.
  check_int(m.n_layer > 0, "n_layer", m.n_layer, "must be positive");
  check_int(m.n_embd > 0, "n_embd", m.n_embd, "must be positive");
  check_int(m.n_head > 0, "n_head", m.n_head, "must be positive");
  check_int(m.block_size > 0, "block_size", m.block_size, "must be positive");
  check_int(m.vocab_size > 0, "vocab_size", m.vocab_size, "must be positive");
  check_int(m.vocab_size <= 65536, "vocab_size", m.vocab_size,
            "must be at most 65536 (token shards store tokens as uint16)");
  if (m.n_embd % m.n_head != 0)
    fail("n_head=" + std::to_string(m.n_head) + " does not divide n_embd=" +
         std::to_string(m.n_embd) + " (every head gets n_embd / n_head channels)");
  if (this_machine) require_memory_for_weights(cfg, dp);
  // A mesh is numbered by int ranks (MPI's): its size must fit one, or the products of the
  // axes here and in the driver would wrap. The product is taken in double, which holds
  // four ints' (< 2^124) and is exact up to 2^53. Axes below 1 are refused further down.
  const double mesh_ranks = double(std::max(cfg.dp, 1)) * std::max(cfg.tp, 1) * std::max(cfg.pp, 1) *
                            std::max(cfg.cp, 1);
  if (mesh_ranks > std::numeric_limits<int>::max() && cfg.dp >= 0 && cfg.tp >= 1 && cfg.pp >= 1 && cfg.cp >= 1)
    fail("dp=" + std::to_string(cfg.dp) + " x tp=" + std::to_string(cfg.tp) + " x pp=" + std::to_string(cfg.pp) +
         " x cp=" + std::to_string(cfg.cp) + " is more ranks than a job can have (MPI numbers them with an int, "
         "at most 2^31 - 1)");

  // Batch. The global batch is fixed by the config; the layout only decides how it is
  // cut, so it must cut evenly: batch_size = micro_batch_size * grad_accum * dp.
  check_int(cfg.seq_len >= 1 && cfg.seq_len <= m.block_size, "seq_len", cfg.seq_len,
            "must be in [1, block_size=" + std::to_string(m.block_size) +
                "] (the position embedding has block_size rows)");
  check_int(cfg.batch_size > 0, "batch_size", cfg.batch_size, "must be positive");
  check_int(cfg.micro_batch_size > 0, "micro_batch_size", cfg.micro_batch_size, "must be positive");
  // The ops take an activation's row count (micro-batch x sequence) as an int.
  check_int(int64_t(cfg.micro_batch_size) * cfg.seq_len <= std::numeric_limits<int>::max(), "micro_batch_size",
            cfg.micro_batch_size,
            "times seq_len=" + std::to_string(cfg.seq_len) + " must be at most 2^31 - 1 (an activation's rows)");
  if (dp < 1) fail("data-parallel degree dp=" + std::to_string(dp) + " must be positive");
  int64_t per_micro_step = int64_t(cfg.micro_batch_size) * dp;  // int64: no overflow
  // Said without dp where no dp could help: a first check runs before the mesh is known.
  if (cfg.batch_size % cfg.micro_batch_size != 0)
    fail("batch_size=" + std::to_string(cfg.batch_size) + " is not a multiple of micro_batch_size=" +
         std::to_string(cfg.micro_batch_size) +
         " (batch_size = micro_batch_size * grad_accum * dp, with a whole grad_accum >= 1)");
  if (cfg.batch_size % per_micro_step != 0)
    fail("batch_size=" + std::to_string(cfg.batch_size) +
         " is not a multiple of micro_batch_size * dp = " + std::to_string(cfg.micro_batch_size) +
         " * " + std::to_string(dp) + " = " + std::to_string(per_micro_step) +
         " (batch_size = micro_batch_size * grad_accum * dp, with a whole grad_accum >= 1)");
  require_countable_sizes(cfg);  // the model shape and the batch checked above
  if (this_machine) require_memory_for_logits(cfg);

  // Optimisation.
  check_int(cfg.steps >= 0, "steps", cfg.steps, "must be >= 0 (0 only evaluates and samples)");
  check_double(cfg.lr > 0, "lr", cfg.lr, "must be positive");
  check_double(cfg.min_lr_ratio >= 0 && cfg.min_lr_ratio <= 1, "min_lr_ratio", cfg.min_lr_ratio,
               "must be in [0, 1]");
  check_int(cfg.warmup_steps >= 0, "warmup_steps", cfg.warmup_steps, "must be >= 0");
  check(cfg.lr_schedule == "cosine" || cfg.lr_schedule == "linear" || cfg.lr_schedule == "constant" ||
            cfg.lr_schedule == "wsd",
        "lr_schedule", show(Json(cfg.lr_schedule)), "must be cosine, linear, constant or wsd");
  check_double(cfg.lr_decay_fraction > 0 && cfg.lr_decay_fraction <= 1, "lr_decay_fraction", cfg.lr_decay_fraction,
               "must be in (0, 1]: the share of the steps after the warmup spent decaying (lr_schedule=wsd)");
  check_double(cfg.weight_decay >= 0, "weight_decay", cfg.weight_decay, "must be >= 0");
  // AdamW's step scales a decayed weight by 1 - lr weight_decay (before the gradient's
  // term): at 1 or more every step would zero it or flip its sign, a run that only diverges.
  // (SGD applies no decay, so any lr goes with it.)
  check_double(cfg.optimizer != "adamw" || cfg.lr * cfg.weight_decay < 1, "weight_decay", cfg.weight_decay,
               "times lr=" + show(cfg.lr) + " must be below 1: each step multiplies a decayed weight by "
               "1 - lr * weight_decay, which would zero it or flip its sign");
  check_double(cfg.beta1 >= 0 && cfg.beta1 < 1, "beta1", cfg.beta1, "must be in [0, 1)");
  check_double(cfg.beta2 >= 0 && cfg.beta2 < 1, "beta2", cfg.beta2, "must be in [0, 1)");
  check_double(cfg.adam_eps > 0, "adam_eps", cfg.adam_eps, "must be positive");
  check_double(cfg.grad_clip >= 0, "grad_clip", cfg.grad_clip, "must be >= 0 (0 disables clipping)");
  check(cfg.optimizer == "adamw" || cfg.optimizer == "sgd", "optimizer", show(Json(cfg.optimizer)),
        "must be adamw or sgd");
  check_double(cfg.test_grad_scale > 0, "test_grad_scale", cfg.test_grad_scale, "must be positive");

  // Data and logging.
  check_int(cfg.val_every >= 0, "val_every", cfg.val_every, "must be >= 0 (0: only at the end)");
  check_int(cfg.val_batches >= 0, "val_batches", cfg.val_batches, "must be >= 0");
  check_int(cfg.log_every >= 1, "log_every", cfg.log_every, "must be >= 1");

  // Runtime. precision's check is parse_precision's, so the accepted names live in one place.
  check(cfg.device == "auto" || cfg.device == "cpu" || cfg.device == "cuda", "device",
        show(Json(cfg.device)), "must be auto, cpu or cuda");
  parse_precision(cfg.precision);
  check(cfg.gemm == "hand" || cfg.gemm == "cublas" ||
            (cfg.gemm.size() == 2 && cfg.gemm[0] == 'v' && cfg.gemm[1] >= '1' && cfg.gemm[1] <= '5'),
        "gemm", show(Json(cfg.gemm)), "must be hand, cublas or v1..v5");
  require_thread_count(cfg.threads, "threads");
  check(!cfg.run_dir.empty(), "run_dir", "\"\"", "must not be empty");
  check(!cfg.tokenizer.empty(), "tokenizer", "\"\"", "must not be empty (bytes, or a tokenizer file)");
  require_run_dir_outside_checkpoints(cfg.run_dir);
  require_outside_checkpoints(cfg.metrics_file, "metrics_file", cfg.run_dir);
  require_outside_checkpoints(cfg.trace_file, "trace_file", cfg.run_dir);
  require_outside_checkpoints(cfg.train_data, "train_data", cfg.run_dir, /*glob=*/true);
  require_outside_checkpoints(cfg.val_data, "val_data", cfg.run_dir, /*glob=*/true);
  require_outside_checkpoints(cfg.eval_choices, "eval_choices", cfg.run_dir);
  if (cfg.tokenizer != "bytes") require_outside_checkpoints(cfg.tokenizer, "tokenizer", cfg.run_dir);
  require_distinct_outputs(cfg);

  // Distributed.
  check_int(cfg.dp >= 0, "dp", cfg.dp, "must be >= 0 (0: every rank)");
  check_int(cfg.tp >= 1, "tp", cfg.tp, "must be >= 1");
  check_int(cfg.pp >= 1, "pp", cfg.pp, "must be >= 1");
  check_int(cfg.cp >= 1, "cp", cfg.cp, "must be >= 1");
  check_int(cfg.virtual_stages >= 1 && cfg.virtual_stages <= m.n_layer, "virtual_stages", cfg.virtual_stages,
            "must be between 1 and n_layer=" + std::to_string(m.n_layer) + " (each chunk holds at least one layer)");
  check_int(cfg.zero >= 0 && cfg.zero <= 3, "zero", cfg.zero, "must be 0, 1, 2 or 3");
  parse_recompute(cfg.activation_checkpointing);  // the accepted names live there
  check(cfg.comm == "auto" || cfg.comm == "mpi" || cfg.comm == "nccl", "comm",
        show(Json(cfg.comm)), "must be auto, mpi or nccl");
  // Refused here, not only where a job builds its communicator, so that stage 01, which
  // builds none, does not take it without a word.
  check(!(cfg.comm == "nccl" && cfg.device == "cpu"), "comm", show(Json(cfg.comm)), kNcclNeedsGpu);
  check(cfg.allreduce == "ring" || cfg.allreduce == "backend", "allreduce",
        show(Json(cfg.allreduce)), "must be ring or backend");
  check_double(cfg.bucket_mb > 0, "bucket_mb", cfg.bucket_mb, "must be positive");
  check_double(cfg.bucket_mb <= kBucketLimitMb, "bucket_mb", cfg.bucket_mb,
               "must be at most " + std::to_string(int64_t(kBucketLimitMb)) +
                   " MiB (a bucket is one MPI call, whose count of floats is an int)");
  check_double(cfg.comm_timeout_s >= 1, "comm_timeout_s", cfg.comm_timeout_s,
               "must be at least 1 second (healthy ranks reach a collective up to seconds apart: a shorter "
               "wait would report them lost)");
  check_double(cfg.comm_timeout_s <= kCommTimeoutLimitS, "comm_timeout_s", cfg.comm_timeout_s,
               "must be at most " + show(kCommTimeoutLimitS) + " seconds (31 years)");
  check_double(cfg.save_timeout_s >= 1 && cfg.save_timeout_s <= kCommTimeoutLimitS, "save_timeout_s",
               cfg.save_timeout_s, "must be at least 1 and at most " + show(kCommTimeoutLimitS) + " seconds");

  // Checkpoints.
  check_int(cfg.checkpoint_every >= 0, "checkpoint_every", cfg.checkpoint_every,
            "must be >= 0 (0: only at the end)");
  check_int(cfg.keep_checkpoints >= 0, "keep_checkpoints", cfg.keep_checkpoints,
            "must be >= 0 (0: keep all)");

  // The multiple-choice eval: its file read and checked now, not at the first validation.
  check_int(cfg.eval_choices_limit >= 0, "eval_choices_limit", cfg.eval_choices_limit, "must be >= 0 (0: all examples)");
  if (!cfg.eval_choices.empty()) {
    try {
      // The examples the run scores (the first eval_choices_limit) must fit block_size.
      choices_window(read_choices_file(cfg.eval_choices, m.vocab_size, cfg.eval_choices_limit), m.block_size,
                     "eval file '" + cfg.eval_choices + "'");
    } catch (const UserError& e) {
      fail(std::string("eval_choices: ") + e.what());
    }
  } else if (cfg.eval_choices_limit > 0)
    fail("eval_choices_limit=" + std::to_string(cfg.eval_choices_limit) +
         ": eval_choices is empty, so there is nothing to limit; name an eval file or leave it 0");

  check(!cfg.train_data.empty(), "train_data", "\"\"",
        "is empty: name the training shards (a file, or a glob of them)");
  validate_sampling(cfg);
}

void validate_sampling(const Config& cfg, const std::string& bytes_fix) {
  check_int(cfg.sample_tokens >= 0, "sample_tokens", cfg.sample_tokens, "must be >= 0");
  // A tokenizer file that is named is checked even when this run samples nothing: a
  // later resume that samples would otherwise find its typo at the end of a run.
  if (cfg.sample_tokens > 0 || cfg.tokenizer != "bytes") check_tokenizer(cfg, bytes_fix);
  check_double(cfg.temperature > 0, "temperature", cfg.temperature, "must be positive");
  check_int(cfg.top_k >= 0, "top_k", cfg.top_k, "must be >= 0 (0: no top-k)");
}

// -------------------------------------------------------------------------------------------
// Printing
// -------------------------------------------------------------------------------------------

std::string config_to_json(const Config& cfg) {
  Json out = Json::object();
  for (const Key& k : kKeys) out[k.name] = value_of(k, cfg);
  return out.dump(2);
}

std::string config_reference_markdown() {
  // A '|' inside a cell would end the cell; escape it (GitHub renders \| as |).
  auto cell = [](std::string s) {
    for (size_t at = s.find('|'); at != std::string::npos; at = s.find('|', at + 2))
      s.replace(at, 1, "\\|");
    return s;
  };
  const Config defaults;
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const Key& k : kKeys) {
    out += "| `" + std::string(k.name) + "` | " + type_of(k) + " | `" +
           cell(show(value_of(k, defaults))) + "` | " + cell(k.meaning) + " |\n";
  }
  return out;
}

std::string config_help_text() {
  std::string out =
      "usage: train [--config FILE] [--set key=value]...\n"
      "\n"
      "The run configuration is built in layers, each overriding the one before:\n"
      "the defaults below, then the JSON object in --config FILE, then every\n"
      "--set key=value (a bare key=value works too) in the order given.\n"
      "batch_size is the global batch in sequences:\n"
      "  batch_size = micro_batch_size * grad_accum * dp.\n"
      "\n"
      "options:\n"
      "  --config FILE      JSON file of {\"key\": value, ...}\n"
      "  --set key=value    override one key (repeatable)\n"
      "  --help, -h         print this help and exit\n"
      "\n"
      "keys (type, default, meaning):\n";

  // Columns sized to the longest name and type; a long default (a path) would push the
  // meanings far right, so it gets the meaning on its own line instead.
  const Config defaults;
  size_t name_width = 0, type_width = 0;
  for (const Key& k : kKeys) {
    name_width = std::max(name_width, std::strlen(k.name));
    type_width = std::max(type_width, std::strlen(type_of(k)));
  }
  const size_t default_width = 8;
  auto pad = [](std::string s, size_t width) {
    if (s.size() < width) s.resize(width, ' ');
    return s;
  };
  for (const Key& k : kKeys) {
    std::string value = show(value_of(k, defaults));
    std::string line = "  " + pad(k.name, name_width) + "  " + pad(type_of(k), type_width) + "  ";
    if (value.size() <= default_width) {
      line += pad(value, default_width) + "  " + k.meaning;
    } else {
      size_t meaning_column = line.size() + default_width + 2;
      line += value + "\n" + std::string(meaning_column, ' ') + k.meaning;
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace gpt
