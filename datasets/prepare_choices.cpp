// prepare_choices: a multiple-choice eval in llm.c's eval file format (common/choices_file.h)
// from HellaSwag's published JSON lines, tokenized by the project's own tokenizer, as
// llm.c's dev/data/hellaswag.py writes hellaswag_val.bin with tiktoken's GPT-2 encoding.
//
//   build/bin/prepare_choices hellaswag_val.jsonl hellaswag_val.bin --tokenizer gpt2_tokenizer.bin
//
// Each line is an object with "ctx" (the context), "endings" (the completions) and
// "label" (the right one); other fields are ignored. The context is encoded as it is and
// each ending after a space, the text that follows the context:
//   row_c = encode(ctx) + encode(" " + endings[c])
// Example i of the output is the i-th object of the input (blank lines skipped).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/choices_file.h"
#include "common/cli.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json_input.h"
#include "common/tokenizer.h"
#include "common/tool_options.h"

namespace {

constexpr const char* kUsage =
    "usage: prepare_choices EXAMPLES.jsonl OUT.bin --tokenizer FILE|bytes [--limit N]\n"
    "\n"
    "Writes multiple-choice examples (HellaSwag's JSON lines: \"ctx\", \"endings\", \"label\"\n"
    "per line) in llm.c's eval file format, for build/bin/eval_choices and the trainer's\n"
    "eval_choices key: the context tokenized as it is, each ending after a space.\n"
    "\n"
    "  --tokenizer FILE   the model's tokenizer, a file in llm.c's format (gpt2_tokenizer.bin\n"
    "                     for GPT-2), or bytes (a token per byte); required\n"
    "  --limit N          the first N examples only (default all)\n"
    "  --help             print this message\n"
    "OUT.bin must not exist (nothing is overwritten).\n";

struct Options {
  std::string input, output, tokenizer;
  int limit = 0;
};

Options parse(const std::vector<std::string>& args) {
  Options o;
  std::vector<std::string> files;
  std::set<std::string> given;  // the options seen: one given twice is a mistake whichever was meant
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--tokenizer" || a == "--limit") {
      if (i + 1 == args.size()) gpt::fail(a + " needs a value");
      if (!given.insert(a).second) gpt::fail(a + " is given twice; give it once");
      const std::string& v = args[++i];
      if (a == "--tokenizer") {
        o.tokenizer = v;
      } else {
        o.limit = gpt::positive_int_option(a, v);
      }
    } else if (a.starts_with("--")) {
      gpt::fail("unknown option '" + a + "' (see --help)");
    } else {
      files.push_back(a);
    }
  }
  if (files.size() != 2)
    gpt::fail("expected EXAMPLES.jsonl and OUT.bin, got " + std::to_string(files.size()) + " file names (see --help)");
  o.input = files[0], o.output = files[1];
  // No default: a file tokenized as bytes passes every check against GPT-2's vocabulary
  // (its ids are all below 256) and scores nonsense, so the vocabulary is named.
  if (o.tokenizer.empty())
    gpt::fail("--tokenizer is required: the model's tokenizer file (gpt2_tokenizer.bin for GPT-2), or bytes");
  return o;
}

// A field of the object on line `line`, of the type asked, or a UserError naming both.
const nlohmann::json& field(const nlohmann::json& object, const char* key, const std::string& where,
                            bool (nlohmann::json::*is)() const noexcept, const char* type) {
  const auto it = object.find(key);
  if (it == object.end()) gpt::fail(where + ": no \"" + std::string(key) + "\" field");
  if (!((*it).*is)()) gpt::fail(where + ": \"" + std::string(key) + "\" is " + it->dump() + ", not " + type);
  return *it;
}

// "label": an integer, or its digits as a string (the Hugging Face copy of HellaSwag
// writes "3"); the test split's empty label is named as such.
int64_t label_of(const nlohmann::json& object, const std::string& where) {
  const auto it = object.find("label");
  if (it == object.end()) gpt::fail(where + ": no \"label\" field");
  // One past int64 (nlohmann holds it unsigned) would wrap to a negative label: quoted as written.
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX))
    gpt::fail(where + ": \"label\" is " + it->dump() + ", not one of its endings");
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& text = it->get_ref<const std::string&>();
    if (text.empty()) gpt::fail(where + ": \"label\" is empty (HellaSwag's test split has no labels)");
    if (text.size() <= 9 && text.find_first_not_of("0123456789") == std::string::npos) return std::stoll(text);
  }
  gpt::fail(where + ": \"label\" is " + it->dump() + ", not an integer (or its digits as a string)");
}

gpt::ChoiceExample example_from(const nlohmann::json& object, int index, const gpt::Tokenizer& tokenizer,
                                const std::string& where) {
  if (!object.is_object()) gpt::fail(where + ": not a JSON object");
  using J = nlohmann::json;
  gpt::ChoiceExample ex;
  ex.index = index;
  const std::string ctx = field(object, "ctx", where, &J::is_string, "a string").get<std::string>();
  const J& endings = field(object, "endings", where, &J::is_array, "an array");
  const int64_t label = label_of(object, where);
  ex.context = tokenizer.encode(ctx, where + ", \"ctx\"");
  if (ex.context.empty()) gpt::fail(where + ": \"ctx\" is empty (the first ending would have nothing to follow)");
  if (endings.size() < 2)
    gpt::fail(where + ": " + std::to_string(endings.size()) + " endings; a choice needs two at least");
  for (size_t c = 0; c < endings.size(); ++c) {
    const std::string what = where + ", ending " + std::to_string(c);
    if (!endings[c].is_string()) gpt::fail(what + " is " + endings[c].dump() + ", not a string");
    const std::string ending = " " + endings[c].get_ref<const std::string&>();  // the text after the context
    ex.completions.push_back(tokenizer.encode(ending, what));
  }
  if (label < 0 || label >= int64_t(endings.size()))
    gpt::fail(where + ": \"label\" is " + std::to_string(label) + ", not one of its " +
              std::to_string(endings.size()) + " endings");
  ex.label = int(label);
  return ex;
}

int run(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (gpt::asks_for_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const Options o = parse(args);
  std::error_code ec;
  if (gpt::name_taken(o.output))
    gpt::fail("'" + o.output + "' exists; name a new file (nothing is overwritten)");
  gpt::require_outside_checkpoint_dirs(o.output, "OUT.bin");
  const gpt::Tokenizer tokenizer = gpt::Tokenizer::named(o.tokenizer);
  if (!std::filesystem::is_regular_file(o.input, ec)) {
    if (!std::filesystem::exists(o.input, ec)) gpt::fail("'" + o.input + "': no such file");
    gpt::fail("'" + o.input + "': not a regular file");
  }
  std::ifstream in(o.input);
  gpt::require(bool(in), "'" + o.input + "': cannot open for reading");

  std::vector<gpt::ChoiceExample> examples;
  std::string line;
  int64_t tokens = 0;
  for (int number = 1; (o.limit == 0 || int(examples.size()) < o.limit) && std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line
    const std::string where = "'" + o.input + "', line " + std::to_string(number);
    nlohmann::json object;
    try {
      // A line with "ctx" twice is not HellaSwag's, whichever was meant.
      object = gpt::parse_json_input<nlohmann::json>(line, [&](const std::string& reason) {
        gpt::fail(where + ": " + reason);
      });
    } catch (const nlohmann::json::exception& e) {
      gpt::fail(where + ": not JSON: " + gpt::json_reason(e));
    }
    examples.push_back(example_from(object, int(examples.size()), tokenizer, where));
    tokens += int64_t(examples.back().context.size());
    for (const std::vector<int>& c : examples.back().completions) tokens += int64_t(c.size());
  }
  gpt::require(!in.bad(), "'" + o.input + "': read error");
  if (examples.empty()) gpt::fail("'" + o.input + "': no examples (every line is blank)");
  gpt::create_parent_directories(o.output, "OUT.bin");
  gpt::write_choices_file(o.output, examples);
  std::printf("prepare_choices: %zu examples, %lld tokens (tokenizer %s, %d ids) -> %s\n", examples.size(),
              static_cast<long long>(tokens), tokenizer.name().c_str(), tokenizer.vocab_size(), o.output.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("prepare_choices", [&] { return run(argc, argv); });
}
