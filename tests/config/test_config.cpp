// Tests of the run configuration: loading a JSON file, --set overrides and their order,
// every kind of user error (each must be a UserError whose message names the key), the
// JSON round trip the checkpoint manifest relies on, and that docs/config.md still
// holds the current key reference.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/error.h"
#include "common/gpt2_layout.h"
#include "common/host_memory.h"

using gpt::Config;
using gpt::UserError;
using Catch::Contains;

namespace {

// Writes `text` to a file in the test's scratch directory and returns its path.
std::string write_file(const std::string& name, const std::string& text) {
  std::string path = std::string(GPT_TEST_SCRATCH_DIR) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// Calls parse_args as main() would, with argv[0] = "train".
bool parse(Config& cfg, std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);  // argv[argc] is a null pointer, as in a real main()
  return gpt::parse_args(int(args.size()), argv.data(), cfg, "train");
}

Config with(const std::vector<std::string>& overrides) {
  Config cfg;
  for (const std::string& o : overrides) gpt::apply_override(cfg, o);
  return cfg;
}

// Every field compared by hand rather than through the key table, so a field the table
// forgot to list shows up here as a failed round trip.
void require_same(const Config& a, const Config& b) {
  CHECK(a.model == b.model);
  CHECK(a.seq_len == b.seq_len);
  CHECK(a.batch_size == b.batch_size);
  CHECK(a.micro_batch_size == b.micro_batch_size);
  CHECK(a.steps == b.steps);
  CHECK(a.lr == b.lr);
  CHECK(a.min_lr_ratio == b.min_lr_ratio);
  CHECK(a.warmup_steps == b.warmup_steps);
  CHECK(a.lr_schedule == b.lr_schedule);
  CHECK(a.lr_decay_fraction == b.lr_decay_fraction);
  CHECK(a.weight_decay == b.weight_decay);
  CHECK(a.beta1 == b.beta1);
  CHECK(a.beta2 == b.beta2);
  CHECK(a.adam_eps == b.adam_eps);
  CHECK(a.grad_clip == b.grad_clip);
  CHECK(a.seed == b.seed);
  CHECK(a.train_data == b.train_data);
  CHECK(a.val_data == b.val_data);
  CHECK(a.val_every == b.val_every);
  CHECK(a.val_batches == b.val_batches);
  CHECK(a.eval_choices == b.eval_choices);
  CHECK(a.eval_choices_limit == b.eval_choices_limit);
  CHECK(a.device == b.device);
  CHECK(a.precision == b.precision);
  CHECK(a.threads == b.threads);
  CHECK(a.run_dir == b.run_dir);
  CHECK(a.metrics_file == b.metrics_file);
  CHECK(a.trace_file == b.trace_file);
  CHECK(a.log_every == b.log_every);
  CHECK(a.dp == b.dp);
  CHECK(a.tp == b.tp);
  CHECK(a.pp == b.pp);
  CHECK(a.cp == b.cp);
  CHECK(a.virtual_stages == b.virtual_stages);
  CHECK(a.schedule == b.schedule);
  CHECK(a.activation_checkpointing == b.activation_checkpointing);
  CHECK(a.sequence_parallel == b.sequence_parallel);
  CHECK(a.zero == b.zero);
  CHECK(a.zero3_prefetch == b.zero3_prefetch);
  CHECK(a.cp_split == b.cp_split);
  CHECK(a.comm == b.comm);
  CHECK(a.allreduce == b.allreduce);
  CHECK(a.bucket_mb == b.bucket_mb);
  CHECK(a.comm_timeout_s == b.comm_timeout_s);
  CHECK(a.save_timeout_s == b.save_timeout_s);
  CHECK(a.checkpoint_every == b.checkpoint_every);
  CHECK(a.checkpoint_at_end == b.checkpoint_at_end);
  CHECK(a.keep_checkpoints == b.keep_checkpoints);
  CHECK(a.resume == b.resume);
  CHECK(a.sample_tokens == b.sample_tokens);
  CHECK(a.temperature == b.temperature);
  CHECK(a.top_k == b.top_k);
  CHECK(a.prompt == b.prompt);
  CHECK(a.tokenizer == b.tokenizer);
}

}  // namespace

TEST_CASE("the defaults are a valid config") {
  Config cfg;
  REQUIRE_NOTHROW(gpt::validate(cfg));
  REQUIRE(cfg.grad_accum() == 1);
  REQUIRE(cfg.metrics_path() == "runs/default/metrics.jsonl");
}

// The parameter counts of the four released GPT-2 checkpoints (gpt2, gpt2-medium,
// gpt2-large, gpt2-xl: 124M, 355M, 774M, 1558M), as Hugging Face transformers' model
// cards count them: tied embeddings, the vocabulary unpadded. Each config's shape must
// give its model's count through the layout's formula, a head size of 64 as all four
// have, and a batch its micro-batches divide.
TEST_CASE("the GPT-2 configs have the released models' shapes and parameter counts") {
  const struct {
    const char* file;
    double params;
  } released[] = {{"gpt2-124m.json", 124439808}, {"gpt2-350m.json", 354823168},
                  {"gpt2-774m.json", 774030080}, {"gpt2-1558m.json", 1557611200}};
  for (const auto& r : released) {
    Config cfg;  // the file's keys and types (validate() wants its data and tokenizer files, absent here)
    REQUIRE_NOTHROW(gpt::apply_json_file(cfg, std::string(GPT_SOURCE_DIR) + "/configs/" + r.file));
    INFO(r.file);
    CHECK(gpt::gpt2_param_count(cfg.model, cfg.model.vocab_size) == r.params);
    CHECK(cfg.model.vocab_size == 50257);
    CHECK(cfg.model.block_size == 1024);
    CHECK(cfg.model.n_embd == 64 * cfg.model.n_head);
    CHECK(cfg.seq_len <= cfg.model.block_size);
    CHECK(cfg.batch_size % cfg.micro_batch_size == 0);
  }
  // The count is the formula's, not a constant: another width misses its model's count.
  Config wider;
  gpt::apply_json_file(wider, std::string(GPT_SOURCE_DIR) + "/configs/gpt2-350m.json");
  gpt::apply_override(wider, "n_embd=1088");
  CHECK(gpt::gpt2_param_count(wider.model, wider.model.vocab_size) != 354823168);
}

TEST_CASE("a config file sets keys of every type and leaves the rest at their defaults") {
  std::string path = write_file("every_type.json", R"({
    "n_layer": 4, "n_embd": 128, "n_head": 8,
    "lr": 3e-4, "weight_decay": 0,
    "seed": 18446744073709551615,
    "checkpoint_at_end": false,
    "device": "cpu", "precision": "bf16"
  })");
  Config cfg;
  gpt::apply_json_file(cfg, path);
  CHECK(cfg.model.n_layer == 4);
  CHECK(cfg.model.n_embd == 128);
  CHECK(cfg.model.n_head == 8);
  CHECK(cfg.lr == 3e-4);
  CHECK(cfg.weight_decay == 0.0);  // an integer is a fine double
  CHECK(cfg.seed == 18446744073709551615ull);
  CHECK(cfg.checkpoint_at_end == false);
  CHECK(cfg.device == "cpu");
  CHECK(cfg.precision == "bf16");
  CHECK(cfg.steps == Config{}.steps);
  CHECK(cfg.model.vocab_size == Config{}.model.vocab_size);
  REQUIRE_NOTHROW(gpt::validate(cfg));
}

TEST_CASE("parse_args: the file first, then every --set in the order given") {
  std::string path = write_file("base.json", R"({"n_layer": 4, "lr": 0.0003, "steps": 50})");

  SECTION("--set overrides the file even when written before --config") {
    Config cfg;
    REQUIRE(parse(cfg, {"--set", "lr=0.01", "--config", path, "--set", "steps=7"}));
    CHECK(cfg.lr == 0.01);
    CHECK(cfg.steps == 7);
    CHECK(cfg.model.n_layer == 4);  // from the file
  }
  SECTION("later overrides win; bare key=value is the same as --set") {
    Config cfg;
    REQUIRE(parse(cfg, {"--config=" + path, "--set", "n_layer=6", "n_layer=8"}));
    CHECK(cfg.model.n_layer == 8);
  }
  SECTION("no arguments: the defaults") {
    Config cfg;
    REQUIRE(parse(cfg, {}));
    require_same(cfg, Config{});
  }
  SECTION("--help prints and returns false, even beside a bad argument") {
    Config cfg;
    REQUIRE_FALSE(parse(cfg, {"--bogus", "--help"}));
    REQUIRE_FALSE(parse(cfg, {"-h"}));
  }
  SECTION("the result is validated") {
    Config cfg;
    REQUIRE_THROWS_WITH(parse(cfg, {"--config", path, "--set", "n_head=5"}),
                        Contains("n_head=5 does not divide n_embd=64"));
  }
}

TEST_CASE("--set parses the value by the key's type") {
  CHECK(with({"n_layer=12"}).model.n_layer == 12);
  CHECK(with({"n_layer=-3"}).model.n_layer == -3);  // parses; validate() rejects it
  CHECK(with({"seed=18446744073709551615"}).seed == 18446744073709551615ull);
  CHECK(with({"lr=1e-4"}).lr == 1e-4);
  CHECK(with({"lr=2"}).lr == 2.0);
  CHECK(with({"checkpoint_at_end=false"}).checkpoint_at_end == false);
  CHECK(with({"checkpoint_at_end=0"}).checkpoint_at_end == false);
  CHECK(with({"checkpoint_at_end=0", "checkpoint_at_end=true"}).checkpoint_at_end == true);
  CHECK(with({"checkpoint_at_end=0", "checkpoint_at_end=1"}).checkpoint_at_end == true);
  CHECK(with({"prompt=a=b"}).prompt == "a=b");  // split at the first '=' only
  CHECK(with({"run_dir=runs/x y"}).run_dir == "runs/x y");
  CHECK(with({"metrics_file=runs/m.jsonl", "metrics_file="}).metrics_file.empty());
}

TEST_CASE("unknown keys are errors that name the key") {
  SECTION("in a file, with the file and a suggestion") {
    std::string path = write_file("typo.json", R"({"n_layers": 4})");
    Config cfg;
    REQUIRE_THROWS_AS(gpt::apply_json_file(cfg, path), UserError);
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("n_layers"));
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("typo.json"));
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("did you mean 'n_layer'"));
  }
  SECTION("in --set") {
    Config cfg;
    REQUIRE_THROWS_AS(gpt::apply_override(cfg, "learning_rate=0.1"), UserError);
    REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "learning_rate=0.1"), Contains("learning_rate"));
    REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "n_embed=32"), Contains("did you mean 'n_embd'"));
    REQUIRE_THROWS_WITH(parse(cfg, {"--set", "warmup=5"}), Contains("warmup"));
  }
  SECTION("a key holding control characters is shown escaped, whole") {
    Config cfg;
    // A NUL would end the message where it is printed: 'a' instead of the key.
    REQUIRE_THROWS_WITH(gpt::apply_json_text(cfg, R"({"a\u0000b\tc": 1})", "test"),
                        Contains("unknown key 'a\\x00b\\x09c'"));
  }
  SECTION("nested or prefixed model keys: the keys are flat") {
    Config cfg;
    REQUIRE_THROWS_WITH(gpt::apply_json_text(cfg, R"({"model": {"n_layer": 4}})", "test"),
                        Contains("'model'") && Contains("flat"));
    REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "model.n_layer=4"),
                        Contains("model.n_layer") && Contains("'n_layer'"));
  }
}

TEST_CASE("wrong JSON types are errors naming the key, the expected and the given type") {
  Config cfg;
  auto load = [&](const std::string& text) { gpt::apply_json_text(cfg, text, "test.json"); };
  REQUIRE_THROWS_AS(load(R"({"n_layer": "4"})"), UserError);
  REQUIRE_THROWS_WITH(load(R"({"n_layer": "4"})"),
                      Contains("n_layer") && Contains("expected int") && Contains("string"));
  REQUIRE_THROWS_WITH(load(R"({"n_layer": 2.5})"), Contains("n_layer") && Contains("expected int"));
  REQUIRE_THROWS_WITH(load(R"({"n_layer": 3000000000})"),
                      Contains("n_layer") && Contains("out of range"));
  REQUIRE_THROWS_WITH(load(R"({"lr": "fast"})"), Contains("lr") && Contains("expected double"));
  REQUIRE_THROWS_WITH(load(R"({"seed": -1})"), Contains("seed") && Contains("uint64"));
  REQUIRE_THROWS_WITH(load(R"({"checkpoint_at_end": 1})"),
                      Contains("checkpoint_at_end") && Contains("expected bool"));
  REQUIRE_THROWS_WITH(load(R"({"device": null})"), Contains("device") && Contains("expected string"));
  REQUIRE_THROWS_WITH(load(R"([1, 2])"), Contains("test.json") && Contains("object"));
}

TEST_CASE("a file with an error leaves the config untouched") {
  Config cfg;
  REQUIRE_THROWS(gpt::apply_json_text(cfg, R"({"n_layer": 9, "n_head": "x"})", "test.json"));
  CHECK(cfg.model.n_layer == Config{}.model.n_layer);
}

TEST_CASE("bad --set values are errors naming the key and the value") {
  Config cfg;
  REQUIRE_THROWS_AS(gpt::apply_override(cfg, "n_layer=four"), UserError);
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "n_layer=four"),
                      Contains("n_layer") && Contains("four"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "n_layer=4x"), Contains("n_layer") && Contains("4x"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "n_layer=2.0"), Contains("n_layer"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "n_layer="), Contains("n_layer"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "n_layer=3000000000"),
                      Contains("n_layer") && Contains("out of range"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "seed=-1"), Contains("seed"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "lr=fast"), Contains("lr") && Contains("fast"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "lr=nan"), Contains("lr") && Contains("nan"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "checkpoint_at_end=yes"),
                      Contains("checkpoint_at_end") && Contains("yes"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "n_layer"), Contains("key=value"));
  REQUIRE_THROWS_WITH(gpt::apply_override(cfg, "=4"), Contains("key=value"));
  CHECK(cfg.model.n_layer == Config{}.model.n_layer);  // nothing was half-applied
}

TEST_CASE("impossible values are errors naming the key and the reason") {
  SECTION("n_head must divide n_embd") {
    REQUIRE_THROWS_AS(gpt::validate(with({"n_head=5"})), UserError);
    REQUIRE_THROWS_WITH(gpt::validate(with({"n_head=5"})),
                        Contains("n_head=5 does not divide n_embd=64"));
  }
  SECTION("seq_len must fit the position embedding") {
    REQUIRE_THROWS_WITH(gpt::validate(with({"seq_len=128"})),
                        Contains("seq_len=128") && Contains("block_size=64"));
    REQUIRE_NOTHROW(gpt::validate(with({"seq_len=64"})));
  }
  SECTION("batch_size must split into micro-batches over the data-parallel ranks") {
    Config cfg = with({"batch_size=12", "micro_batch_size=8"});
    REQUIRE_THROWS_AS(gpt::validate(cfg), UserError);
    REQUIRE_THROWS_WITH(gpt::validate(cfg), Contains("batch_size=12") && Contains("micro_batch_size"));
    // No dp could help there, so none is named, whatever dp the check is given.
    REQUIRE_THROWS_WITH(gpt::validate(cfg, 2), Contains("batch_size=12 is not a multiple of micro_batch_size=8 ("));

    Config two = with({"batch_size=8", "micro_batch_size=4"});
    REQUIRE_NOTHROW(gpt::validate(two, 2));
    REQUIRE(two.grad_accum(2) == 1);
    REQUIRE_NOTHROW(gpt::validate(two, 1));
    REQUIRE(two.grad_accum(1) == 2);
    REQUIRE_THROWS_WITH(gpt::validate(two, 3), Contains("batch_size=8 is not a multiple of micro_batch_size * dp = "
                                                        "4 * 3 = 12"));
    REQUIRE_THROWS_WITH(gpt::validate(two, 4), Contains("batch_size"));  // grad_accum 0.5
  }
  SECTION("precision and device come from short lists") {
    REQUIRE_THROWS_AS(gpt::validate(with({"precision=fp16"})), UserError);
    REQUIRE_THROWS_WITH(gpt::validate(with({"precision=fp16"})),
                        Contains("precision") && Contains("fp16"));
    REQUIRE_THROWS_AS(gpt::validate(with({"device=gpu"})), UserError);
    REQUIRE_THROWS_WITH(gpt::validate(with({"device=gpu"})), Contains("device") && Contains("gpu"));
    REQUIRE_NOTHROW(gpt::validate(with({"device=cuda", "precision=bf16"})));
  }
  SECTION("activation_checkpointing is none, selective or full") {
    // "true" was the key's value when it was a switch: it is refused with the three names.
    REQUIRE_THROWS_WITH(gpt::validate(with({"activation_checkpointing=true"})),
                        Contains("activation_checkpointing") && Contains("'true'") &&
                            Contains("none, selective or full"));
    for (const char* mode : {"none", "selective", "full"})
      REQUIRE_NOTHROW(gpt::validate(with({std::string("activation_checkpointing=") + mode})));
  }
  SECTION("every other range check names its key") {
    // {override that breaks the rule, key the message must name}
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"n_layer=0", "n_layer"},         {"n_embd=0", "n_embd"},
        {"n_head=0", "n_head"},           {"block_size=0", "block_size"},
        {"vocab_size=0", "vocab_size"},   {"vocab_size=65537", "vocab_size"},
        {"seq_len=0", "seq_len"},         {"batch_size=0", "batch_size"},
        {"micro_batch_size=0", "micro_batch_size"},
        {"steps=-1", "steps"},            {"lr=0", "lr"},
        {"lr=-1e-3", "lr"},               {"min_lr_ratio=1.5", "min_lr_ratio"},
        {"min_lr_ratio=-0.1", "min_lr_ratio"},
        {"warmup_steps=-1", "warmup_steps"}, {"weight_decay=-0.1", "weight_decay"},
        {"beta1=1", "beta1"},             {"beta2=-0.5", "beta2"},
        {"adam_eps=0", "adam_eps"},       {"grad_clip=-1", "grad_clip"},
        {"val_every=-1", "val_every"},    {"val_batches=-1", "val_batches"},
        {"checkpoint_every=-1", "checkpoint_every"}, {"log_every=0", "log_every"},
        {"keep_checkpoints=-1", "keep_checkpoints"}, {"threads=-1", "threads"},
        {"sample_tokens=-1", "sample_tokens"},       {"temperature=0", "temperature"},
        {"top_k=-1", "top_k"},            {"run_dir=", "run_dir"},
        {"comm_timeout_s=0.5", "comm_timeout_s"}, {"comm_timeout_s=1.1e9", "comm_timeout_s"},
        {"save_timeout_s=0.5", "save_timeout_s"}, {"save_timeout_s=1.1e9", "save_timeout_s"},
        {"threads=100000", "threads"},    {"bucket_mb=1e300", "bucket_mb"},
        {"eval_choices_limit=-1", "eval_choices_limit"}, {"eval_choices_limit=2", "eval_choices_limit"},
        {"eval_choices=no_such_eval.bin", "eval_choices"},
        {"lr_schedule=cos", "lr_schedule"}, {"lr_schedule=", "lr_schedule"},
        {"lr_decay_fraction=0", "lr_decay_fraction"}, {"lr_decay_fraction=1.01", "lr_decay_fraction"},
        {"weight_decay=1e300", "weight_decay"},
    };
    for (const auto& [override_text, key] : cases) {
      INFO("--set " << override_text);
      Config cfg = with({override_text});
      REQUIRE_THROWS_AS(gpt::validate(cfg), UserError);
      REQUIRE_THROWS_WITH(gpt::validate(cfg), Contains(key));
    }
    // The edges that are allowed.
    REQUIRE_NOTHROW(gpt::validate(with({"steps=0", "warmup_steps=0", "grad_clip=0", "top_k=0",
                                        "min_lr_ratio=0", "beta1=0", "vocab_size=65536",
                                        "val_every=0", "keep_checkpoints=0", "sample_tokens=0"})));
    REQUIRE_NOTHROW(gpt::validate(with({"min_lr_ratio=1"})));
    for (const char* schedule : {"lr_schedule=cosine", "lr_schedule=linear", "lr_schedule=constant", "lr_schedule=wsd"})
      REQUIRE_NOTHROW(gpt::validate(with({schedule, "lr_decay_fraction=1"})));
    REQUIRE_NOTHROW(gpt::validate(with({"comm_timeout_s=1e9", "threads=8"})));  // 8 per core, one core at least
    REQUIRE_NOTHROW(gpt::validate(with({"bucket_mb=8191"})));  // 2^31 - 262144 floats: MPI's int counts them
    REQUIRE_THROWS_WITH(gpt::validate(with({"bucket_mb=8192"})), Contains("bucket_mb") && Contains("8191"));
    // weight_decay against lr: lr * weight_decay must stay below 1 (each step scales a
    // decayed weight by 1 - lr * weight_decay); just below is allowed, 1 exactly is not.
    REQUIRE_NOTHROW(gpt::validate(with({"lr=0.5", "weight_decay=1.99"})));
    REQUIRE_THROWS_WITH(gpt::validate(with({"lr=0.5", "weight_decay=2"})),
                        Contains("weight_decay=2") && Contains("lr=0.5") && Contains("below 1"));
    REQUIRE_NOTHROW(gpt::validate(with({"optimizer=sgd", "lr=20"})));  // SGD decays nothing
    // comm=nccl with device=cpu: refused by every stage, naming the key (with a GPU it is allowed).
    REQUIRE_THROWS_WITH(gpt::validate(with({"device=cpu", "comm=nccl"})),
                        Contains("comm=\"nccl\"") && Contains("device=cpu"));
    REQUIRE_NOTHROW(gpt::validate(with({"device=cuda", "comm=nccl"})));
    REQUIRE_NOTHROW(gpt::validate(with({"device=cpu", "comm=mpi"})));
  }
  SECTION("text keys are UTF-8 without NUL (the checkpoint manifest stores them as JSON)") {
    // A Latin-1 path, a stray byte, a character cut off: each names its key.
    // The keys whose other checks quote their value (device, gemm, optimizer) too: the
    // UTF-8 check runs before those, whose JSON quoting would throw a library error.
    for (const std::string bad : {"run_dir=/tmp/lat\xe9", "prompt=\xff", "train_data=x\xe2\x82", "device=\xff",
                                  "gemm=\xfe", "optimizer=\xff"}) {
      INFO("--set " << bad);
      const std::string key = bad.substr(0, bad.find('='));
      REQUIRE_THROWS_AS(gpt::validate(with({bad})), gpt::UserError);
      REQUIRE_THROWS_WITH(gpt::validate(with({bad})), Contains(key) && Contains("UTF-8"));
    }
    Config nul = with({});
    nul.val_data = std::string("data/val.bin\0junk", 17);
    REQUIRE_THROWS_WITH(gpt::validate(nul), Contains("val_data") && Contains("NUL"));
    REQUIRE_NOTHROW(gpt::validate(with({"prompt=caf\xc3\xa9 \xe2\x82\xac"})));  // café €: UTF-8 is fine
  }
}

TEST_CASE("files that cannot be read or parsed are errors naming the file") {
  Config cfg;
  SECTION("missing file") {
    std::string path = std::string(GPT_TEST_SCRATCH_DIR) + "/no_such_config.json";
    REQUIRE_THROWS_AS(gpt::apply_json_file(cfg, path), UserError);
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("no_such_config.json"));
    REQUIRE_THROWS_WITH(parse(cfg, {"--config", path}), Contains("no_such_config.json"));
  }
  SECTION("malformed JSON: the file and where the parser stopped") {
    std::string path = write_file("malformed.json", "{\n  \"n_layer\": 4,\n}\n");
    REQUIRE_THROWS_AS(gpt::apply_json_file(cfg, path), UserError);
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path),
                        Contains("malformed.json") && Contains("line 3"));
  }
  SECTION("a number beyond a double's range: the file, not an internal error") {
    std::string path = write_file("overflow.json", "{\"lr\": 1e400}");
    REQUIRE_THROWS_AS(gpt::apply_json_file(cfg, path), UserError);
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("overflow.json") && Contains("1e400"));
  }
  // Below the smallest double, nlohmann reads 0 without a word: grad_clip or weight_decay
  // switched off. Zeros written as zeros, small normal numbers and text in strings pass.
  SECTION("a nonzero number below a double's range: the file and the number, not a silent 0") {
    std::string path = write_file("underflow.json", "{\"weight_decay\": 0.1, \"grad_clip\": 1e-400}");
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("underflow.json") && Contains("1e-400") &&
                                                             Contains("would be read as 0"));
    path = write_file("underflow_mantissa.json", "{\"lr\": -0.00005e-330}");
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("-0.00005e-330"));
    path = write_file("zeros.json", "{\"grad_clip\": 0e5, \"weight_decay\": -0.0, \"lr\": 1e-300, "
                                    "\"run_dir\": \"runs/\\\"1e-400\"}");
    Config read = cfg;
    REQUIRE_NOTHROW(gpt::apply_json_file(read, path));
    CHECK(read.grad_clip == 0.0);
    CHECK(read.lr == 1e-300);
    CHECK(read.run_dir == "runs/\"1e-400");
    // Text that is no JSON is called that, though a scan for numbers would read `0-1` as one.
    path = write_file("not_a_number.json", "{\"lr\": 0-1}");
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("not_a_number.json': invalid JSON") &&
                                                             !Contains("would be read as 0"));
  }
  // A value's nesting, which quoting it would recurse through (nlohmann's dump: 100,000
  // levels overflowed the stack), and bytes after a NUL, which nlohmann would not read.
  SECTION("nested deeper than 64 levels, or a NUL byte: the file, not a crash or a silent cut") {
    const std::string deep = "{\"steps\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
    std::string path = write_file("deep.json", deep);
    REQUIRE_THROWS_AS(gpt::apply_json_file(cfg, path), UserError);
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("deep.json") && Contains("nested deeper than 64"));
    // 64 levels parse (and are then the wrong type for steps); 65 do not.
    path = write_file("deep64.json", "{\"steps\": " + std::string(63, '[') + std::string(63, ']') + "}");
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("steps") && !Contains("nested deeper"));
    path = write_file("deep65.json", "{\"steps\": " + std::string(64, '[') + std::string(64, ']') + "}");
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("nested deeper than 64"));
    path = write_file("nul.json", std::string("{\"steps\": 1}\0{\"lr\": \"garbage\", bogus", 36));
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("nul.json") && Contains("a NUL byte at offset 12"));
  }
  // Read up to 1 MiB: /dev/zero (or a data shard named by mistake) was read until memory
  // ran out. A file of exactly 1 MiB still parses.
  SECTION("over 1 MiB, or endless: the file and its size, not the memory of the machine") {
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, "/dev/zero"), Contains("'/dev/zero' is over 1 MiB long"));
    std::string path = write_file("mebibyte.json", std::string((1 << 20) - 2, ' ') + "{}");
    REQUIRE_NOTHROW(gpt::apply_json_file(cfg, path));
    path = write_file("over.json", std::string((1 << 20) - 1, ' ') + "{}");
    REQUIRE_THROWS_WITH(gpt::apply_json_file(cfg, path), Contains("over.json' is over 1 MiB long"));
  }
  SECTION("bad command lines") {
    REQUIRE_THROWS_AS(parse(cfg, {"--bogus"}), UserError);
    REQUIRE_THROWS_WITH(parse(cfg, {"--bogus"}), Contains("--bogus"));
    REQUIRE_THROWS_WITH(parse(cfg, {"configs/tiny.json"}), Contains("configs/tiny.json"));
    REQUIRE_THROWS_WITH(parse(cfg, {"--config"}), Contains("--config"));
    REQUIRE_THROWS_WITH(parse(cfg, {"--set"}), Contains("--set"));
    std::string path = write_file("empty_object.json", "{}");
    REQUIRE_THROWS_WITH(parse(cfg, {"--config", path, "--config", path}), Contains("twice"));
    REQUIRE_THROWS_WITH(parse(cfg, {"--config="}), Contains("--config needs a file name"));
  }
}

TEST_CASE("read_config_args: a tool's own options pass through, the config's are read as parse_args reads them") {
  const std::string path = write_file("tool.json", R"({"n_layer": 4, "steps": 50})");
  std::vector<std::string> words = {"tool", "--ranks", "8", "--set", "steps=7", "--config", path, "n_layer=6",
                                    "--by-rank"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  const gpt::ConfigArgs args = gpt::read_config_args(int(argv.size()), argv.data());
  CHECK(args.config_file == path);
  CHECK(args.overrides == std::vector<std::string>{"steps=7", "n_layer=6"});
  CHECK(args.rest == std::vector<std::string>{"--ranks", "8", "--by-rank"});
  Config cfg;
  gpt::apply_config_args(cfg, args);
  CHECK(cfg.steps == 7);              // the override, though written before --config
  CHECK(cfg.model.n_layer == 6);      // the file's 4, overridden
  CHECK(cfg.lr == Config{}.lr);       // untouched
}

TEST_CASE("config_to_json round-trips through apply_json_text to an equal config") {
  // Every field away from its default, so a key the JSON forgot cannot pass by luck.
  Config original = with({"n_layer=3", "n_embd=96", "n_head=6", "block_size=128",
                          "vocab_size=50257", "seq_len=96", "batch_size=32",
                          "micro_batch_size=4", "steps=1234", "lr=6e-4", "min_lr_ratio=0.05", "lr_schedule=wsd",
                          "lr_decay_fraction=0.3",
                          "warmup_steps=7", "weight_decay=0.01", "beta1=0.85", "beta2=0.999",
                          "adam_eps=1.5e-9", "grad_clip=0.5", "seed=18446744073709551615",
                          "train_data=a/*.bin", "val_data=b.bin", "val_every=3",
                          "val_batches=2", "eval_choices=h.bin", "eval_choices_limit=9", "device=cpu", "precision=bf16", "threads=3",
                          "run_dir=runs/rt", "metrics_file=m.jsonl", "trace_file=t.json",
                          "log_every=5", "checkpoint_every=9", "checkpoint_at_end=false",
                          "keep_checkpoints=4", "resume=latest", "dp=3", "comm=mpi", "allreduce=backend",
                          "bucket_mb=0.5", "comm_timeout_s=5", "save_timeout_s=90", "sample_tokens=17",
                          "temperature=1.3", "top_k=0", "schedule=zb-h1", "cp_split=contiguous", "activation_checkpointing=full",
                          "prompt=\"quoted\"\t\\ \xc3\xa9", "tokenizer=data/gpt2_tokenizer.bin"});
  original.lr = 0.1 + 0.2;  // a double with no short decimal form must survive exactly
  std::string json = gpt::config_to_json(original);

  Config loaded;
  gpt::apply_json_text(loaded, json, "round trip");
  require_same(loaded, original);
  CHECK(gpt::config_to_json(loaded) == json);
  CHECK(json.find("\n  \"n_layer\": 3,") != std::string::npos);  // pretty, 2-space indent
}

TEST_CASE("every key can be set from the text it prints as, and is documented") {
  nlohmann::json keys = nlohmann::json::parse(gpt::config_to_json(Config{}));
  REQUIRE(keys.size() == 61);  // one per Config field (ModelConfig has five)
  std::string help = gpt::config_help_text();
  std::string markdown = gpt::config_reference_markdown();
  CHECK(help.starts_with("usage: train [--config FILE] [--set key=value]..."));
  Config cfg;
  for (const auto& [key, value] : keys.items()) {
    INFO("key " << key);
    std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    REQUIRE_NOTHROW(gpt::apply_override(cfg, key + "=" + text));
    CHECK(help.find("  " + key + " ") != std::string::npos);
    CHECK(markdown.find("| `" + key + "` |") != std::string::npos);
  }
  require_same(cfg, Config{});
}

namespace {
// Sets a launcher's environment variables for one scope, and removes them after it.
struct LauncherEnvironment {
  LauncherEnvironment(const char* world_size, const char* local_size) {
    ::setenv("OMPI_COMM_WORLD_SIZE", world_size, 1);
    ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", local_size, 1);
  }
  ~LauncherEnvironment() {
    ::unsetenv("OMPI_COMM_WORLD_SIZE");
    ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  }
};
}  // namespace

TEST_CASE("config: the weights' memory check takes dp from the launcher and adds the shares of the ranks on "
          "this machine", "[config]") {
  // Before MPI starts, validate() knows no mesh: a job of 4 ranks at tp = pp = cp = 1 has
  // dp = 4, and a model whose state is 2.5 times the memory this process may hold fits a
  // rank's ZeRO-3 share (0.625 of it) when the 4 ranks are on 4 machines. The controls:
  // the same model alone (1 rank), its 4 ranks on this one machine (together 2.5x), and
  // cp = 2 (dp = 2: 1.25x a rank) are refused. Other checks that fail later (the data
  // files) are not this check: the memory refusal names the optimizer's state.
  const std::optional<gpt::HostRoom> room = gpt::host_capacity();
  if (!room || room->bytes == 0) {
    WARN("no memory figure on this system: nothing to check");
    return;
  }
  Config cfg;
  cfg.model.n_embd = 1024;
  cfg.model.n_head = 16;
  cfg.model.n_layer = 1;
  const double per_layer_and_rest = gpt::gpt2_param_count(cfg.model, cfg.model.padded_vocab());
  cfg.model.n_layer = 2;
  const double per_layer = gpt::gpt2_param_count(cfg.model, cfg.model.padded_vocab()) - per_layer_and_rest;
  const double state_bytes_each = 16;  // AdamW, fp32: the weight, its gradient, two moments
  cfg.model.n_layer = int(2.5 * double(room->bytes) / state_bytes_each / per_layer) + 1;
  const auto refused_for_memory = [&]() -> std::string {
    try {
      validate(cfg);
    } catch (const gpt::UserError& e) {
      const std::string what = e.what();
      if (what.find("the optimizer's state") != std::string::npos) return what;
    }
    return "";
  };
  {
    const LauncherEnvironment four_machines("4", "1");
    CHECK(refused_for_memory().empty());
  }
  CHECK_FALSE(refused_for_memory().empty());  // one rank alone
  {
    const LauncherEnvironment one_machine("4", "4");
    const std::string what = refused_for_memory();
    CHECK(what.find("x 4 ranks on this machine") != std::string::npos);
  }
  {
    const LauncherEnvironment four_machines("4", "1");
    cfg.cp = 2;  // cp ranks hold the same weights: dp = 2, a share of 1/2
    CHECK(refused_for_memory().find("(1/2)") != std::string::npos);
  }
}

TEST_CASE("docs/config.md holds the current key reference", "[docs]") {
  // The reference table in the docs is generated; this test keeps it from going stale.
  // To refresh it:  GPT_UPDATE_DOCS=1 build/bin/test_config "[docs]"
  const std::string path = std::string(GPT_SOURCE_DIR) + "/docs/config.md";
  const std::string marker = "<!-- key reference: generated by config_reference_markdown()";
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string docs = buffer.str();
  std::string table = gpt::config_reference_markdown();

  const char* update = std::getenv("GPT_UPDATE_DOCS");
  if (update && std::string(update) == "1" && docs.find(table) == std::string::npos) {
    // Keep everything up to the end of the marker line and put the current table after it.
    size_t at = docs.find(marker);
    REQUIRE(at != std::string::npos);
    size_t line_end = docs.find('\n', at);
    REQUIRE(line_end != std::string::npos);
    docs = docs.substr(0, line_end + 1) + "\n" + table;
    std::ofstream(path) << docs;
    WARN("rewrote the key table in " << path);
  }
  INFO("docs/config.md does not contain the current output of config_reference_markdown(); "
       "refresh it with: GPT_UPDATE_DOCS=1 build/bin/test_config \"[docs]\"");
  CHECK(docs.find(table) != std::string::npos);
}
