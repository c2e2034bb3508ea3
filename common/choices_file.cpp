#include "common/choices_file.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "common/error.h"
#include "common/files.h"

namespace gpt {

namespace {

constexpr int64_t kHeaderBytes = 256 * 4;
constexpr uint16_t kStartOfExample = 65535;

// The file's words after the header, read one at a time with the position kept for the
// messages: every read past the end is a UserError naming the example being read. Words
// are assembled from their little-endian bytes: a variable-length record is checked field
// by field as it is read, not cast from memory in one piece as a shard's tokens are.
class WordReader {
 public:
  WordReader(std::string path, std::vector<unsigned char> bytes) : path_(std::move(path)), bytes_(std::move(bytes)) {}

  bool at_end() const { return at_ >= bytes_.size(); }
  int64_t offset() const { return int64_t(at_); }
  uint16_t word(const std::string& what) {
    if (at_ + 2 > bytes_.size())
      fail(where() + ": the file ends inside it (" + what + " expected at byte " + std::to_string(at_) + ")");
    const uint16_t w = uint16_t(bytes_[at_] | (bytes_[at_ + 1] << 8));
    at_ += 2;
    return w;
  }
  int32_t header_word(int i) const {
    const size_t b = size_t(i) * 4;
    return int32_t(uint32_t(bytes_[b]) | uint32_t(bytes_[b + 1]) << 8 | uint32_t(bytes_[b + 2]) << 16 |
                   uint32_t(bytes_[b + 3]) << 24);
  }
  void skip_header() { at_ = kHeaderBytes; }

  /// "eval file 'x.bin', example 12 (byte 4096)": the example being read.
  std::string where() const {
    return "eval file '" + path_ + "', example " + std::to_string(example) + " (at byte " + std::to_string(start) + ")";
  }
  int example = 0;  ///< position in the file of the example being read
  int64_t start = kHeaderBytes;  ///< its first byte

 private:
  std::string path_;
  std::vector<unsigned char> bytes_;
  size_t at_ = 0;
};

std::vector<unsigned char> read_whole_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) fail("eval file '" + path + "': no such file");
  if (!fs::is_regular_file(status)) fail("eval file '" + path + "': not a regular file");
  std::ifstream in(path, std::ios::binary);
  require(bool(in), "eval file '" + path + "': cannot open for reading");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  require(!in.bad(), "eval file '" + path + "': read error");
  if (int64_t(bytes.size()) < kHeaderBytes)
    fail("eval file '" + path + "': " + std::to_string(bytes.size()) + " bytes, shorter than the " +
         std::to_string(kHeaderBytes) + "-byte header");
  return bytes;
}

// n tokens, each checked against the vocabulary.
std::vector<int> read_tokens(WordReader& r, int n, int vocab_size, const std::string& what) {
  std::vector<int> tokens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int64_t at = r.offset();
    tokens[size_t(i)] = r.word(what + " token");
    if (tokens[size_t(i)] >= vocab_size)
      fail(r.where() + ": " + what + " token " + std::to_string(i) + " (byte " + std::to_string(at) + ") is " +
           std::to_string(tokens[size_t(i)]) + ", not below vocab_size " + std::to_string(vocab_size));
  }
  return tokens;
}

ChoiceExample read_example(WordReader& r, int vocab_size, int64_t& bytes) {
  const uint16_t start = r.word("the start of an example, 65535,");
  if (start != kStartOfExample)
    fail(r.where() + ": starts with " + std::to_string(start) + ", not 65535: not an example (or the one before "
         "it is longer than its fields say)");
  bytes = r.word("its size");
  ChoiceExample ex;
  ex.index = r.word("its index");
  ex.label = r.word("its label");
  const int k = r.word("its number of completions");
  if (k < 2)
    fail(r.where() + ": " + std::to_string(k) + (k == 1 ? " completion" : " completions") +
         "; a choice needs two at least");
  if (ex.label >= k)
    fail(r.where() + ": label " + std::to_string(ex.label) + " is not below its " + std::to_string(k) +
         " completions");
  const int n = r.word("its context length");
  if (n == 0) fail(r.where() + ": no context tokens (the first completion token would have nothing to follow)");
  ex.context = read_tokens(r, n, vocab_size, "context");
  for (int c = 0; c < k; ++c) {
    const int m = r.word("the length of completion " + std::to_string(c));
    if (m == 0) fail(r.where() + ": completion " + std::to_string(c) + " is empty");
    ex.completions.push_back(read_tokens(r, m, vocab_size, "completion " + std::to_string(c)));
  }
  if (r.offset() - r.start != bytes)
    fail(r.where() + ": its size field says " + std::to_string(bytes) + " bytes, its fields take " +
         std::to_string(r.offset() - r.start));
  return ex;
}

}  // namespace

std::vector<ChoiceExample> read_choices_file(const std::string& path, int vocab_size, int limit) {
  WordReader r(path, read_whole_file(path));
  const std::string file = "eval file '" + path + "'";
  if (r.header_word(0) != kChoicesMagic)
    fail(file + ": bad magic " + std::to_string(r.header_word(0)) + " (expected " + std::to_string(kChoicesMagic) +
         "): not an eval file" + (r.header_word(0) == 20240520 ? " (it is a token shard)" : ""));
  if (r.header_word(1) != kChoicesVersion)
    fail(file + ": unsupported version " + std::to_string(r.header_word(1)) + " (expected 1)");
  const int32_t declared = r.header_word(2), declared_longest = r.header_word(3);
  if (declared <= 0 || declared > 65535)
    fail(file + ": the header declares " + std::to_string(declared) +
         " examples; the format numbers them in 16 bits, from 1 to 65,535 of them");

  r.skip_header();
  std::vector<ChoiceExample> examples;
  int64_t longest = 0;
  while (!r.at_end()) {
    if (int(examples.size()) == declared)
      fail(file + ": " + std::to_string(int64_t(r.offset())) + " bytes hold the " + std::to_string(declared) +
           " examples the header declares, and more follow");
    r.example = int(examples.size());
    r.start = r.offset();
    int64_t bytes = 0;
    examples.push_back(read_example(r, vocab_size, bytes));
    longest = std::max(longest, bytes);
  }
  if (int(examples.size()) != declared)
    fail(file + ": the header declares " + std::to_string(declared) + " examples, the file holds " +
         std::to_string(examples.size()));
  if (longest != declared_longest)
    fail(file + ": the header says the longest example is " + std::to_string(declared_longest) +
         " bytes, the longest is " + std::to_string(longest));
  if (limit > 0 && size_t(limit) < examples.size()) examples.resize(size_t(limit));
  return examples;
}

namespace {

// One example as words, each field checked against what 16 bits and the reader allow.
void append_example(std::vector<uint16_t>& words, const ChoiceExample& ex, const std::string& where) {
  auto word = [&](int64_t value, const std::string& what) {
    if (value < 0 || value > 65535)
      fail(where + ": " + what + " is " + std::to_string(value) + ", outside the format's 16 bits (0 to 65,535)");
    words.push_back(uint16_t(value));
  };
  // Tokens below 65535: llm.c's writer keeps that value for the start of an example.
  auto tokens = [&](const std::vector<int>& ids, const std::string& what) {
    word(int64_t(ids.size()), "the length of " + what);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == 65535)
        fail(where + ": " + what + " token " + std::to_string(i) + " is 65535, the start-of-example marker");
      word(ids[i], what + " token " + std::to_string(i));
    }
  };
  const int64_t k = int64_t(ex.completions.size());
  if (k < 2) fail(where + ": " + std::to_string(k) + " completions; a choice needs two at least");
  if (ex.label < 0 || ex.label >= k)
    fail(where + ": label " + std::to_string(ex.label) + " is not one of its " + std::to_string(k) + " completions");
  if (ex.context.empty()) fail(where + ": no context tokens (the first completion token would have nothing to follow)");
  const size_t first = words.size();
  words.push_back(kStartOfExample);
  words.push_back(0);  // its size, once known
  word(ex.index, "its index");
  word(ex.label, "its label");
  word(k, "its number of completions");
  tokens(ex.context, "the context");
  for (size_t c = 0; c < ex.completions.size(); ++c) {
    if (ex.completions[c].empty()) fail(where + ": completion " + std::to_string(c) + " is empty");
    tokens(ex.completions[c], "completion " + std::to_string(c));
  }
  const int64_t bytes = 2 * int64_t(words.size() - first);
  if (bytes > 65535)
    fail(where + ": its fields take " + std::to_string(bytes) +
         " bytes, more than the 65,535 its 16-bit size field counts");
  words[first + 1] = uint16_t(bytes);
}

void put_le(std::vector<unsigned char>& out, uint32_t value, int bytes) {
  for (int b = 0; b < bytes; ++b) out.push_back(static_cast<unsigned char>(value >> (8 * b)));
}

}  // namespace

void write_choices_file(const std::string& path, const std::vector<ChoiceExample>& examples) {
  const std::string file = "eval file '" + path + "'";
  if (examples.empty() || examples.size() > 65535)
    fail(file + ": " + std::to_string(examples.size()) +
         " examples; the format numbers them in 16 bits, from 1 to 65,535 of them");
  std::vector<uint16_t> words;
  int64_t longest = 0;
  for (size_t e = 0; e < examples.size(); ++e) {
    const size_t first = words.size();
    append_example(words, examples[e], file + ", example " + std::to_string(e));
    longest = std::max(longest, 2 * int64_t(words.size() - first));
  }
  std::vector<unsigned char> bytes;
  bytes.reserve(size_t(kHeaderBytes) + 2 * words.size());
  const int32_t header[4] = {kChoicesMagic, kChoicesVersion, int32_t(examples.size()), int32_t(longest)};
  for (int i = 0; i < 256; ++i) put_le(bytes, uint32_t(i < 4 ? header[i] : 0), 4);
  for (const uint16_t w : words) put_le(bytes, w, 2);

  const TemporaryFile temp = create_temporary_beside(path, file);
  const std::string& tmp = temp.name;
  std::error_code ec;
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), temp.file) == bytes.size();
  const int write_errno = errno;
  close_temporary(temp, written, write_errno, file);
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail(file + ": cannot rename '" + tmp + "' to it");
  }
}

}  // namespace gpt
