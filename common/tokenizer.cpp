// Text <-> token ids (tokenizer.h): the byte tokenizer, llm.c's tokenizer file, and
// byte-level BPE by ranks.
#include "common/tokenizer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <queue>
#include <tuple>

#include "common/error.h"
#include "common/pretokenize.h"

namespace gpt {
namespace {

constexpr uint32_t kMagic = 20240328;
constexpr size_t kHeaderWords = 256;

std::string hex_byte(unsigned char byte) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", byte);
  return hex;
}

uint32_t read_u32_le(const std::string& data, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data() + at);
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace

Tokenizer Tokenizer::bytes() {
  Tokenizer t;
  t.name_ = "bytes";
  t.tokens_.resize(kByteVocab);
  for (int id = 0; id < kByteVocab; ++id) t.tokens_[size_t(id)] = std::string(1, char(id));
  t.start_token_ = '\n';
  t.byte_level_ = true;
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string where = "tokenizer file '" + path + "'";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(where + ": no such file");
  if (!std::filesystem::is_regular_file(path, ec)) fail(where + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(where + ": cannot open for reading");
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(where + ": read error");

  if (data.size() < kHeaderWords * 4)
    fail(where + ": " + std::to_string(data.size()) + " bytes, shorter than the 1024-byte header");
  const uint32_t magic = read_u32_le(data, 0), version = read_u32_le(data, 4),
                 vocab = read_u32_le(data, 8);
  if (magic != kMagic)
    fail(where + ": magic number " + std::to_string(magic) + ", not llm.c's tokenizer magic " +
         std::to_string(kMagic));
  if (version != 1 && version != 2)
    fail(where + ": version " + std::to_string(version) + " (this reader knows 1 and 2)");
  if (vocab < 1 || vocab > 65536)
    fail(where + ": vocab_size " + std::to_string(vocab) + " outside 1..65536 (tokens are uint16)");
  const uint32_t eot = version == 2 ? read_u32_le(data, 12) : vocab - 1;
  if (eot >= vocab)
    fail(where + ": end-of-text token " + std::to_string(eot) + " is not below vocab_size " +
         std::to_string(vocab));

  Tokenizer t;
  t.name_ = path;
  t.byte_level_ = false;
  t.start_token_ = int(eot);
  t.tokens_.resize(vocab);
  size_t at = kHeaderWords * 4;
  for (uint32_t id = 0; id < vocab; ++id) {
    if (at >= data.size())
      fail(where + ": the token table ends after " + std::to_string(id) + " of " +
           std::to_string(vocab) + " tokens (file cut off?)");
    const size_t length = static_cast<unsigned char>(data[at]);
    if (length == 0) fail(where + ": token " + std::to_string(id) + " has length 0");
    if (at + 1 + length > data.size())
      fail(where + ": token " + std::to_string(id) + " (" + std::to_string(length) +
           " bytes at offset " + std::to_string(at + 1) + ") runs past the end of the file");
    t.tokens_[id] = data.substr(at + 1, length);
    at += 1 + length;
  }
  if (at != data.size())
    fail(where + ": " + std::to_string(data.size() - at) + " bytes after the last of its " +
         std::to_string(vocab) + " tokens (another format, or a wrong vocab_size in its header?)");
  // Ranks: a byte string's lowest id. The end-of-text token is text only as a marker.
  for (uint32_t id = 0; id < vocab; ++id)
    if (id != eot) t.rank_.emplace(t.tokens_[id], int(id));
  return t;
}

Tokenizer Tokenizer::named(const std::string& name) { return name == "bytes" ? bytes() : load(name); }

std::vector<int> Tokenizer::encode(std::string_view text, std::string_view what, size_t input_offset) const {
  std::vector<int> ids;
  if (byte_level_) {
    for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  // Cut at each occurrence of the end-of-text text, left to right.
  const std::string& marker = tokens_[size_t(start_token_)];
  size_t begin = 0;
  for (size_t at; (at = text.find(marker, begin)) != std::string_view::npos; begin = at + marker.size()) {
    encode_ordinary(text.substr(begin, at - begin), what, input_offset + begin, ids);
    ids.push_back(start_token_);
  }
  encode_ordinary(text.substr(begin), what, input_offset + begin, ids);
  return ids;
}

size_t Tokenizer::encodable_prefix(std::string_view text) const {
  if (byte_level_) return text.size();
  // A marker with white space in it could span a piece boundary; GPT-2's has none.
  const std::string& marker = tokens_[size_t(start_token_)];
  if (marker.find_first_of(" \n") != std::string::npos) return 0;
  for (size_t k = text.size(); k-- > 1;)
    if (is_piece_boundary(text, k)) return k;
  return 0;
}

std::vector<int> Tokenizer::encode_prompt(std::string_view prompt) const {
  std::vector<int> ids = encode(prompt, "prompt");
  if (ids.empty()) ids.push_back(start_token_);
  return ids;
}

void Tokenizer::encode_ordinary(std::string_view text, std::string_view what, size_t offset,
                                std::vector<int>& ids) const {
  // Part by part (pretokenize_parts: the same pieces), so that a text of gigabytes with
  // no end-of-text marker is not pre-tokenized whole, at some 30 bytes a byte.
  constexpr size_t kPartBytes = size_t(1) << 20;
  for (const std::string_view part : pretokenize_parts(text, kPartBytes)) {
    const size_t part_offset = offset + size_t(part.data() - text.data());
    for (const std::string_view piece : gpt2_pretokenize(part, what, part_offset)) {
      const std::vector<int> piece_ids = encode_piece(piece, what, part_offset + size_t(piece.data() - part.data()));
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    }
  }
}

// One piece by BPE. The parts of the piece are a linked list over byte offsets: a part
// starts at s and ends where next[s] starts. Candidate merges wait in a min-heap keyed
// by (rank, start): the lowest rank first and, among equal ranks, the leftmost. A merge
// changes its neighbours' pairs, so an entry is checked against the list when it comes
// out and dropped if the parts it joined have changed. O(n log n) for n bytes.
std::vector<int> Tokenizer::encode_piece(std::string_view piece, std::string_view what,
                                         size_t offset) const {
  if (const auto whole = rank_.find(piece); whole != rank_.end()) return {whole->second};
  const size_t n = piece.size();
  std::vector<size_t> next(n), prev(n);
  std::vector<char> alive(n, 1);
  for (size_t s = 0; s < n; ++s) next[s] = s + 1, prev[s] = s - 1;  // prev[0] unused

  using Merge = std::tuple<int, size_t, size_t, size_t>;  // rank, left start, right start, right end
  std::priority_queue<Merge, std::vector<Merge>, std::greater<>> heap;
  auto consider = [&](size_t left, size_t right) {
    if (right >= n) return;
    const auto it = rank_.find(piece.substr(left, next[right] - left));
    if (it != rank_.end()) heap.emplace(it->second, left, right, next[right]);
  };
  for (size_t s = 0; s + 1 < n; ++s) consider(s, s + 1);

  while (!heap.empty()) {
    const auto [rank, left, right, end] = heap.top();
    heap.pop();
    if (!alive[left] || !alive[right] || next[left] != right || next[right] != end) continue;
    alive[right] = 0;  // the right part joins the left one
    next[left] = end;
    if (end < n) prev[end] = left;
    if (left > 0) consider(prev[left], left);
    consider(left, end);
  }

  std::vector<int> ids;
  for (size_t s = 0; s < n; s = next[s]) {
    const auto it = rank_.find(piece.substr(s, next[s] - s));
    if (it == rank_.end())  // only a single byte can be left without a rank
      fail(std::string(what) + ": byte " + hex_byte(static_cast<unsigned char>(piece[s])) +
           " at offset " + std::to_string(offset + s) + " is no token of " + name_ +
           ", so the text cannot be encoded");
    ids.push_back(it->second);
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  for (const int id : ids) {
    if (id < 0 || id >= vocab_size())
      fail("token id " + std::to_string(id) + " is outside the vocabulary of tokenizer " + name_ +
           " (0.." + std::to_string(vocab_size() - 1) + ")");
    text += tokens_[size_t(id)];
  }
  return text;
}

}  // namespace gpt
