// prepare: text files -> train.bin and val.bin token shards.
//
//   build/bin/prepare --out DIR [--val-fraction F] [--tokenizer FILE [--documents]] FILE...
//
// Each file is encoded (common/tokenizer.h: a token per byte, or GPT-2's byte-level
// BPE with an llm.c tokenizer file) and the tokens are concatenated in the order
// given. With a tokenizer file, the text of its end-of-text token ("<|endoftext|>",
// which joins the documents of corpora such as TinyStories) becomes that token, and
// --documents starts each file with it, as llm.c's scripts start each document. The
// last fraction F of the tokens becomes the validation split. The cut is moved forward
// to the next line or document start, when there is one, so that neither split begins
// or ends in the middle of a line.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/data.h"
#include "common/error.h"
#include "common/files.h"
#include "common/tokenizer.h"

namespace {

constexpr const char* kUsage =
    "usage: prepare --out DIR [--val-fraction F] [--tokenizer FILE [--documents]] [--force] FILE...\n"
    "\n"
    "Tokenizes text files (byte by byte, vocabulary 256, unless --tokenizer names\n"
    "another), concatenates them in the order given and writes DIR/train.bin and\n"
    "DIR/val.bin as llm.c token shards.\n"
    "\n"
    "  --out DIR           output directory (created if missing)\n"
    "  --val-fraction F    share of the tokens, taken from the end, that goes to\n"
    "                      val.bin; 0 < F < 1 (default 0.05)\n"
    "  --tokenizer FILE    encode with the tokenizer in llm.c's FILE (GPT-2's BPE for\n"
    "                      gpt2_tokenizer.bin); train with vocab_size and tokenizer set\n"
    "                      to match (default: bytes)\n"
    "  --documents         each file is a document: start it with the tokenizer\n"
    "                      file's end-of-text token (as llm.c's shards do)\n"
    "  --force             replace train.bin and val.bin when DIR already has them\n"
    "  --help              print this message\n";

struct Options {
  std::string out_dir;
  double val_fraction = 0.05;
  std::string tokenizer = "bytes";
  std::vector<std::string> files;
  bool help = false;
  bool force = false;  // replace existing shards
  bool documents = false;  // an end-of-text token before each file
};

double parse_fraction(const std::string& text) {
  // strtod, not stod: a number out of a double's range (1e-400) is still a number, whose
  // value (0 or huge) the range check below refuses, where stod would throw.
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const size_t used = size_t(end - text.c_str());
  if (text.empty() || used != text.size()) {
    gpt::fail("--val-fraction '" + text + "' is not a number");
  }
  // Both splits must hold something, so 0 and 1 are out (NaN fails both tests).
  if (!(value > 0.0 && value < 1.0)) {
    gpt::fail("--val-fraction " + text + " is outside (0, 1)");
  }
  return value;
}

Options parse_args(int argc, char** argv) {
  Options options;
  // Returns the value after a flag, or fails naming the flag.
  std::set<std::string> given;  // flags with a value, seen: one given twice is a mistake whichever was meant
  auto value_of = [&](int& i, const std::string& flag) -> std::string {
    if (i + 1 >= argc) gpt::fail("flag " + flag + " needs a value");
    if (!given.insert(flag).second) gpt::fail("flag " + flag + " is given twice; give it once");
    return argv[++i];
  };
  if (gpt::asks_for_help(argc, argv, /*dashdash_ends_options=*/true)) {
    options.help = true;
    return options;
  }
  bool only_files = false;  // after "--", every argument is a file name
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (only_files || arg.empty() || arg[0] != '-') {
      options.files.push_back(arg);
    } else if (arg == "--") {
      only_files = true;
    } else if (arg == "--force") {
      options.force = true;
    } else if (arg == "--documents") {
      options.documents = true;
    } else if (arg == "--out") {
      options.out_dir = value_of(i, arg);
    } else if (arg == "--tokenizer") {
      options.tokenizer = value_of(i, arg);
    } else if (arg == "--val-fraction") {
      options.val_fraction = parse_fraction(value_of(i, arg));
    } else {
      gpt::fail("unknown flag '" + arg + "' (see --help)");
    }
  }
  if (options.help) return options;
  if (options.out_dir.empty()) gpt::fail("missing --out DIR (see --help)");
  gpt::require_outside_checkpoint_dirs(options.out_dir, "--out", /*directory=*/true);
  if (options.files.empty()) gpt::fail("no input files given (see --help)");
  // The same file twice would put its text in both splits, or twice in one.
  namespace fs = std::filesystem;
  for (size_t i = 0; i < options.files.size(); ++i)
    for (size_t k = 0; k < i; ++k) {
      std::error_code ec;
      if (fs::equivalent(options.files[i], options.files[k], ec))
        gpt::fail("input '" + options.files[i] + "' is given twice ('" + options.files[k] + "')");
    }
  return options;
}

std::string read_text_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) gpt::fail("input '" + path + "': no such file");
  if (!fs::is_regular_file(status)) gpt::fail("input '" + path + "': not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) gpt::fail("input '" + path + "': cannot open for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) gpt::fail("input '" + path + "': read error");
  if (text.empty()) gpt::fail("input '" + path + "' is empty");
  // A shard (this tool's own output, given back as input) would be tokenized as bytes:
  // its header's magic number and version are no text anyone writes.
  int32_t words[2] = {};
  if (text.size() >= sizeof words) std::memcpy(words, text.data(), sizeof words);
  if (words[0] == gpt::kShardMagic && words[1] == gpt::kShardVersion)
    gpt::fail("input '" + path + "' is a token shard (its header says so), not text: give prepare the text files");
  return text;
}

// Where val begins: the first line or document start at or after the nominal cut
// n*(1-F), so a validation text starts at the beginning of a line (after a token whose
// text ends in a newline) or of a document (at an end-of-text token, which a file
// tokenizer puts between documents). Without one in the val region the nominal cut
// stays. Either way both sides keep at least one token.
size_t split_point(const std::vector<uint16_t>& tokens, const gpt::Tokenizer& tokenizer,
                   double val_fraction) {
  const size_t n = tokens.size();
  if (n < 2) {
    gpt::fail("the input has " + std::to_string(n) +
              " token(s): too little text to split into train and val");
  }
  size_t cut = size_t(double(n) * (1.0 - val_fraction));
  cut = std::clamp<size_t>(cut, 1, n - 1);
  for (size_t i = cut; i < n; ++i) {
    if (tokenizer.token_bytes(tokens[i - 1]).back() == '\n' || tokens[i] == tokenizer.end_of_text()) return i;
  }
  return cut;
}

int run(int argc, char** argv) {
  const Options options = parse_args(argc, argv);
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }

  // Where the shards go, checked before the inputs are read (which may take long): shards
  // already there are a dataset someone prepared, replaced only when asked.
  const std::string train_path = options.out_dir + "/train.bin";
  const std::string val_path = options.out_dir + "/val.bin";
  std::error_code ec;
  if (std::filesystem::exists(options.out_dir, ec) && !std::filesystem::is_directory(options.out_dir, ec))
    gpt::fail("--out '" + options.out_dir + "' is a file, not a directory");
  for (const std::string& path : {train_path, val_path}) {
    // Not even with --force: the text would be replaced by its own tokens, its only copy lost.
    for (const std::string& file : options.files)
      if (std::filesystem::equivalent(file, path, ec))
        gpt::fail("input '" + file + "' is " + path + ", a shard prepare writes: it would be replaced by its own "
                  "tokens; move the text elsewhere, or write the shards to another --out");
  }
  for (const std::string& path : {train_path, val_path})
    if (!options.force && std::filesystem::exists(path, ec))
      gpt::fail("--out '" + options.out_dir + "' already holds " + path +
                "; give --force to replace the dataset, or another --out");

  // Read every file before writing anything, so bad input leaves no output behind.
  const gpt::Tokenizer tokenizer = gpt::Tokenizer::named(options.tokenizer);
  if (options.documents && tokenizer.end_of_text() < 0)
    gpt::fail("--documents starts each file with the end-of-text token, which --tokenizer " + options.tokenizer +
              " does not have: name a tokenizer file");
  std::vector<uint16_t> tokens;
  for (const std::string& file : options.files) {
    std::vector<int> ids = tokenizer.encode(read_text_file(file), "input '" + file + "'");
    if (options.documents) ids.insert(ids.begin(), tokenizer.end_of_text());
    std::printf("%-40s %12zu tokens\n", file.c_str(), ids.size());
    tokens.insert(tokens.end(), ids.begin(), ids.end());  // ids < vocab_size <= 65536
  }

  const size_t cut = split_point(tokens, tokenizer, options.val_fraction);
  const std::vector<uint16_t> train(tokens.begin(), tokens.begin() + std::ptrdiff_t(cut));
  const std::vector<uint16_t> val(tokens.begin() + std::ptrdiff_t(cut), tokens.end());

  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) gpt::fail("--out '" + options.out_dir + "': cannot create directory (" + ec.message() + ")");
  gpt::write_shards({{train_path, &train}, {val_path, &val}});
  std::printf("train: %12zu tokens -> %s\n", train.size(), train_path.c_str());
  std::printf("val:   %12zu tokens -> %s\n", val.size(), val_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("prepare", [&] { return run(argc, argv); });
}
