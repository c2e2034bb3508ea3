// prepare: text files -> train and val token shards.
//
//   build/bin/prepare --out DIR [--val-fraction F] [--tokenizer FILE [--documents]]
//                     [--shard-tokens N] [--read-bytes B] [--threads T] [--force]
//                     [--files-from LIST] FILE...
//
// Each file is encoded (common/tokenizer.h: a token per byte, or GPT-2's byte-level
// BPE with an llm.c tokenizer file) and the tokens are concatenated in the order
// given. With a tokenizer file, the text of its end-of-text token ("<|endoftext|>",
// which joins the documents of corpora such as TinyStories) becomes that token, and
// --documents starts each file with it, as llm.c's scripts start each document. The
// last fraction F of the tokens becomes the validation split. The cut is moved forward
// to the next line or document start, when there is one, so that neither split begins
// or ends in the middle of a line.
//
// Memory stays bounded whatever the corpus: a file is read B bytes at a time, as blocks
// each encoded alone (text_blocks.h), T of them at once on T threads, and the tokens go
// to a spool file beside the shards (token_spool.h) until the cut is known. Each split is
// written as shards of at most N tokens (dataset_dir.h): DIR/train.bin when one holds
// it, else DIR/train_00000.bin, DIR/train_00001.bin, ... (and so for val), which the
// loader reads, in name order, as one stream (train_data=DIR/train_*.bin).
#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/cli.h"
#include "common/data.h"
#include "common/error.h"
#include "common/files.h"
#include "common/run_lock.h"
#include "common/tokenizer.h"
#include "datasets/dataset_dir.h"
#include "datasets/text_blocks.h"
#include "datasets/token_spool.h"

namespace {

constexpr const char* kUsage =
    "usage: prepare --out DIR [--val-fraction F] [--tokenizer FILE [--documents]]\n"
    "               [--shard-tokens N] [--read-bytes B] [--threads T] [--force]\n"
    "               [--files-from LIST] FILE...\n"
    "\n"
    "Tokenizes text files (byte by byte, vocabulary 256, unless --tokenizer names\n"
    "another), concatenates them in the order given and writes DIR/train.bin and\n"
    "DIR/val.bin as llm.c token shards; a split of more than N tokens is written as\n"
    "DIR/train_00000.bin, DIR/train_00001.bin, ... (train_data=DIR/train_*.bin).\n"
    "\n"
    "  --out DIR           output directory (created if missing)\n"
    "  --val-fraction F    share of the tokens, taken from the end, that goes to\n"
    "                      val.bin; 0 < F < 1 (default 0.05)\n"
    "  --tokenizer FILE    encode with the tokenizer in llm.c's FILE (GPT-2's BPE for\n"
    "                      gpt2_tokenizer.bin); train with vocab_size and tokenizer set\n"
    "                      to match (default: bytes)\n"
    "  --documents         each file is a document: start it with the tokenizer\n"
    "                      file's end-of-text token (as llm.c's shards do)\n"
    "  --shard-tokens N    tokens per shard at most, 1 to 2147483647 (default\n"
    "                      100000000, 200 MB a shard)\n"
    "  --read-bytes B      text read and encoded at a time by each thread, 1 to\n"
    "                      1073741824: memory grows with it (default 4194304)\n"
    "  --threads T         threads that encode, 1 to 1024 (default: OMP_NUM_THREADS,\n"
    "                      else every core); the shards are the same for any T\n"
    "  --files-from LIST   also the files LIST names, one path a line (empty lines\n"
    "                      skipped), in their order where the flag stands: for a\n"
    "                      corpus of more files than a command line holds\n"
    "  --force             replace the dataset DIR already holds (its train and val\n"
    "                      shards, all of them: a set of fewer shards leaves none behind)\n"
    "  --help              print this message\n"
    "\n"
    "While it runs, prepare keeps the tokens in a file in DIR: 2 bytes a token beside\n"
    "the shards.\n";

struct Options {
  std::string out_dir;
  double val_fraction = 0.05;
  std::string tokenizer = "bytes";
  std::vector<std::string> files;
  bool help = false;
  bool force = false;  // replace existing shards
  bool documents = false;  // an end-of-text token before each file
  int64_t shard_tokens = 100'000'000;  // as llm.c's FineWeb shards
  int64_t read_bytes = int64_t(1) << 22;
  int threads = omp_get_max_threads();  // OMP_NUM_THREADS, or every core
};

// A whole number in [low, high] for `flag`, or a UserError naming the flag and the text.
int64_t parse_count(const std::string& flag, const std::string& text, int64_t low, int64_t high) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || *end != '\0')
    gpt::fail(flag + " '" + text + "' is not a whole number");
  if (errno == ERANGE || value < low || value > high)
    gpt::fail(flag + " " + text + " is outside " + std::to_string(low) + ".." + std::to_string(high));
  return value;
}

double parse_fraction(const std::string& text) {
  // strtod, not stod: a number out of a double's range (1e-400) is still a number, whose
  // value (0 or huge) the range check below refuses, where stod would throw.
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const size_t used = size_t(end - text.c_str());
  if (text.empty() || used != text.size() || std::isspace(static_cast<unsigned char>(text[0]))) {
    gpt::fail("--val-fraction '" + text + "' is not a number");
  }
  // Both splits must hold something, so 0 and 1 are out (NaN fails both tests).
  if (!(value > 0.0 && value < 1.0)) {
    gpt::fail("--val-fraction " + text + " is outside (0, 1)");
  }
  return value;
}

// The paths a --files-from list names, one a line; empty lines are skipped.
std::vector<std::string> read_file_list(const std::string& list) {
  std::ifstream in(list);
  if (!in) gpt::fail("--files-from '" + list + "': cannot open it for reading");
  std::vector<std::string> paths;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) paths.push_back(line);
  if (in.bad()) gpt::fail("--files-from '" + list + "': read error");
  return paths;
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
    } else if (arg == "--files-from") {
      const std::string list = value_of(i, arg);
      const std::vector<std::string> listed = read_file_list(list);
      options.files.insert(options.files.end(), listed.begin(), listed.end());
    } else if (arg == "--shard-tokens") {
      options.shard_tokens = parse_count(arg, value_of(i, arg), 1, gpt::kMaxShardTokens);
    } else if (arg == "--threads") {
      options.threads = int(parse_count(arg, value_of(i, arg), 1, 1024));
    } else if (arg == "--read-bytes") {
      options.read_bytes = parse_count(arg, value_of(i, arg), 1, int64_t(1) << 30);
    } else {
      gpt::fail("unknown flag '" + arg + "' (see --help)");
    }
  }
  if (options.help) return options;
  if (options.out_dir.empty()) gpt::fail("missing --out DIR (see --help)");
  while (options.out_dir.size() > 1 && options.out_dir.back() == '/') options.out_dir.pop_back();  // DIR/ is DIR
  gpt::require_outside_checkpoint_dirs(options.out_dir, "--out", /*directory=*/true);
  if (options.files.empty()) gpt::fail("no input files given (see --help)");
  return options;
}

// A file's identity, however it is named (a link, another spelling of the path).
struct FileId {
  dev_t device;
  ino_t inode;
  bool operator==(const FileId&) const = default;
};
struct FileIdHash {
  size_t operator()(const FileId& id) const { return std::hash<uint64_t>{}(uint64_t(id.device) * 1000003u ^ id.inode); }
};

// Checks every input before any is encoded (a bad file found after hours of encoding the
// others would waste them): each a non-empty regular file, none given twice, which would
// put its text in both splits, or twice in one, and none a token shard (prepare's own
// output given back), which would be encoded as text. Returns their identities, in order.
// One lookup and one 8-byte read a file: a corpus of millions of files is checked in a
// minute or so.
std::vector<FileId> check_inputs(const std::vector<std::string>& files) {
  std::vector<FileId> ids;
  std::unordered_map<FileId, size_t, FileIdHash> first_of;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& path = files[i];
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      gpt::fail("input '" + path + "': " + (errno == ENOENT ? "no such file" : std::string(std::strerror(errno))));
    if (!S_ISREG(st.st_mode)) gpt::fail("input '" + path + "': not a regular file");
    if (st.st_size == 0) gpt::fail("input '" + path + "' is empty");
    const FileId id{st.st_dev, st.st_ino};
    if (const auto [at, added] = first_of.emplace(id, i); !added)
      gpt::fail("input '" + path + "' is given twice ('" + files[at->second] + "')");
    if (gpt::is_token_shard(path))
      gpt::fail("input '" + path + "' is a token shard (its header says so), not text: give prepare the text files");
    ids.push_back(id);
  }
  return ids;
}

// Where val begins: the first line or document start at or after the nominal cut
// n*(1-F), so a validation text starts at the beginning of a line (after a token whose
// text ends in a newline) or of a document (at an end-of-text token, which a file
// tokenizer puts between documents). Without one in the val region the nominal cut
// stays. Either way both sides keep at least one token.
size_t split_point(std::span<const uint16_t> tokens, const gpt::Tokenizer& tokenizer, double val_fraction) {
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

// Encodes every input into `spool`, in order: a batch of blocks (text_blocks.h), one a
// thread, is encoded at once, then appended in order. Blocks are encoded alone, so the
// ids are the same on any number of threads. An error is the first in the inputs' order,
// as one thread would meet it: a block's that the batch encodes, else the reading's that
// ended the batch.
void encode_inputs(const Options& options, const gpt::Tokenizer& tokenizer, gpt::TokenSpool& spool) {
  gpt::TextBlocks blocks(options.files, tokenizer, size_t(options.read_bytes));
  std::vector<gpt::TextBlock> batch(size_t(options.threads));
  std::vector<std::vector<int>> ids(batch.size());
  std::vector<std::exception_ptr> errors(batch.size());
  // A line a file; past 100 files, a line every thousand files and one at the end.
  const size_t files = options.files.size(), every = files <= 100 ? 1 : 1000;
  int64_t file_start = 0;  // the spool's size where the current file's tokens begin
  for (;;) {
    size_t n = 0;
    std::exception_ptr read_error;  // reading the block after the batch's last failed
    try {
      while (n < batch.size() && blocks.next(batch[n])) ++n;
    } catch (...) {
      read_error = std::current_exception();
    }
    if (n == 0 && !read_error) return;
#pragma omp parallel for num_threads(options.threads) schedule(dynamic, 1)
    for (ptrdiff_t i = 0; i < ptrdiff_t(n); ++i) {
      const gpt::TextBlock& block = batch[size_t(i)];
      try {
        ids[size_t(i)] = tokenizer.encode(block.text, "input '" + options.files[block.file] + "'", block.offset);
      } catch (...) {
        errors[size_t(i)] = std::current_exception();
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (errors[i]) std::rethrow_exception(errors[i]);
      const gpt::TextBlock& block = batch[i];
      if (block.first) {
        file_start = spool.size();
        if (options.documents) spool.append({tokenizer.end_of_text()});
      }
      spool.append(ids[i]);
      if (!block.last) continue;
      const size_t done = block.file + 1;
      if (every == 1)
        std::printf("%-40s %12lld tokens\n", options.files[block.file].c_str(),
                    static_cast<long long>(spool.size() - file_start));
      else if (done % every == 0 || done == files)
        std::printf("%zu of %zu files: %lld tokens\n", done, files, static_cast<long long>(spool.size()));
      std::fflush(stdout);  // progress, as it is made
    }
    if (read_error) std::rethrow_exception(read_error);
  }
}

// Makes `dir` and the directories above it that are missing, one level at a time, and
// returns those this process made, in the order made: only they are its to remove again
// (another prepare may make the same ones at the same time).
std::vector<std::string> make_directories(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> made;
  fs::path path;
  for (const fs::path& part : fs::path(dir)) {
    path /= part;
    if (::mkdir(path.c_str(), 0777) == 0) made.push_back(path.string());
    else if (errno != EEXIST)
      gpt::fail("--out '" + dir + "': cannot create directory '" + path.string() + "' (" + std::strerror(errno) + ")");
  }
  return made;
}

// The dataset already in `dir`: refused without --force; with it, every shard checked
// now, so that none is found wrong after the new shards are in place. Returns its shards.
std::vector<std::string> check_existing_dataset(const Options& options, const std::vector<FileId>& inputs) {
  namespace fs = std::filesystem;
  const std::string& dir = options.out_dir;
  const std::vector<std::string> existing = gpt::existing_shards(dir);
  for (const std::string& path : existing) {
    // Not even with --force: the text would be replaced by its own tokens, its only copy lost.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;  // a dangling link: no input's file
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i] == FileId{st.st_dev, st.st_ino})
        gpt::fail("input '" + options.files[i] + "' is " + path + ", a shard prepare writes: it would be replaced by "
                  "its own tokens; move the text elsewhere, or write the shards to another --out");
  }
  if (!existing.empty() && !options.force)
    gpt::fail("--out '" + dir + "' already holds " + existing[0] +
              (existing.size() > 1 ? " and " + std::to_string(existing.size() - 1) + " more shard(s)" : "") +
              "; give --force to replace the dataset, or another --out");
  std::error_code ec;
  for (const std::string& path : existing) {
    // A link or a directory under a shard's name is the user's.
    if (!fs::is_regular_file(fs::symlink_status(path, ec)))
      gpt::fail("shard '" + path + "': exists and is not a regular file; not replaced");
    if (!gpt::is_token_shard(path))
      gpt::fail("'" + path + "' has a shard's name but no shard's header: --force would remove it; move it "
                "elsewhere, or write the shards to another --out");
  }
  return existing;
}

int run(int argc, char** argv) {
  namespace fs = std::filesystem;
  const Options options = parse_args(argc, argv);
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  gpt::TokenSpool::remove_on_signals();
  // A reader of the output that goes away (prepare | head) must not end the run with its
  // work half done: its lines are lost, the shards are written.
  std::signal(SIGPIPE, SIG_IGN);

  // What needs no directory is checked first, so that a refusal makes none.
  const std::string& dir = options.out_dir;
  std::error_code ec;
  const fs::file_status out_status = fs::symlink_status(dir, ec);
  if (fs::is_symlink(out_status) && !fs::exists(fs::status(dir, ec)))
    gpt::fail("--out '" + dir + "' is a symbolic link to '" + fs::read_symlink(dir, ec).string() +
              "', which does not exist");
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    gpt::fail("--out '" + dir + "' is a file, not a directory");
  const std::vector<FileId> inputs = check_inputs(options.files);
  const gpt::Tokenizer tokenizer = gpt::Tokenizer::named(options.tokenizer);
  if (options.documents && tokenizer.end_of_text() < 0)
    gpt::fail("--documents starts each file with the end-of-text token, which --tokenizer " + options.tokenizer +
              " does not have: name a tokenizer file");

  // The directory, made when missing, and its lock: one prepare at a time writes a
  // dataset (two would replace or mix each other's shards). A run that fails leaves the
  // old dataset as it was, or removes what it made: every file is read and encoded before
  // any shard is written.
  const std::vector<std::string> made = make_directories(dir);
  std::optional<gpt::RunDirLock> lock;
  try {
    lock.emplace(dir, "--out");
    gpt::remove_killed_runs_leftovers(dir);
    const std::vector<std::string> existing = check_existing_dataset(options, inputs);
    gpt::TokenSpool spool(dir + "/tokens");
    encode_inputs(options, tokenizer, spool);
    const std::span<const uint16_t> tokens = spool.map();
    const size_t cut = split_point(tokens, tokenizer, options.val_fraction);
    const int64_t per_shard = options.shard_tokens;
    const std::vector<gpt::ShardToWrite> train = gpt::split_into_shards(dir, "train", tokens.first(cut), per_shard);
    const std::vector<gpt::ShardToWrite> val = gpt::split_into_shards(dir, "val", tokens.subspan(cut), per_shard);
    std::vector<gpt::ShardToWrite> all = train;
    all.insert(all.end(), val.begin(), val.end());
    gpt::write_shards(all);
    // The old dataset's shards that no new one replaced: a glob of the split would read them.
    for (const std::string& path : existing) {
      const auto is_path = [&](const gpt::ShardToWrite& shard) { return shard.path == path; };
      if (std::any_of(all.begin(), all.end(), is_path)) continue;  // replaced
      fs::remove(path, ec);
      if (ec)
        gpt::fail("the new shards are written, but the old shard '" + path + "' could not be removed (" +
                  ec.message() + "): remove it, or a glob of its split reads it too");
    }
    gpt::print_split("train:", train, dir, "train");
    gpt::print_split("val:", val, dir, "val");
    gpt::warn_of_glob_strays(dir, train, "train");
    gpt::warn_of_glob_strays(dir, val, "val");
  } catch (...) {
    // What this run made, only once it held the lock (a run refused it leaves the holder's
    // directory be): the lock's file while still held, then each directory, innermost
    // first, if empty by then.
    if (lock && !made.empty() && made.back() == fs::path(dir).string()) {
      fs::remove(dir + "/.lock", ec);
      lock.reset();
      for (auto p = made.rbegin(); p != made.rend(); ++p) fs::remove(*p, ec);
    }
    throw;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("prepare", [&] { return run(argc, argv); });
}
