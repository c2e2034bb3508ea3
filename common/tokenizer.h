/// @file
/// ```
/// Text <-> token ids, two ways:
///   bytes      each byte of the text is a token (ids 0..255): every text round-trips,
///              no file needed; the tokenizer of the default corpus (datasets/).
///   a file     llm.c's tokenizer file (gpt2_tokenizer.bin): the bytes of every token
///              id. Decoding concatenates them; encoding is GPT-2's byte-level BPE,
///              which needs nothing more (below), so shards prepared with tiktoken's
///              "gpt2" encoding (llm.c's, nanoGPT's) are sampled and prompted in their
///              own vocabulary.
///
/// File format (little-endian):  uint32 header[256]: magic 20240328, version (1 or 2),
///   vocab_size, and in version 2 the end-of-text token (version 1: the last id);
///   then for each id in order: uint8 length (1..255), that many bytes.
///
/// Byte-level BPE by ranks (as tiktoken encodes): pre-tokenize (pretokenize.h); start
/// each piece as single bytes; repeatedly merge the adjacent pair whose concatenation
/// is a token with the lowest rank (the leftmost on a tie), until no pair is a token.
/// A token's rank is its id: GPT-2's vocabulary lists the 256 bytes, then each merged
/// token in the order its merge was learned. The end-of-text token is never merged to:
/// its text ("<|endoftext|>" in GPT-2) is cut out of the text first and stands for that
/// token wherever it occurs, so a corpus whose documents are joined by it (TinyStories'
/// text files) keeps them apart, and encode(decode(ids)) gives back an end-of-text id.
/// (tiktoken's encode with allowed_special="all"; the byte tokenizer has no such token.)
/// ```
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpt {

constexpr int kByteVocab = 256;  ///< token ids 0..255, one per byte value

/// Encodes and decodes text for one vocabulary (see the file comment).
class Tokenizer {
 public:
  /// The byte tokenizer: 256 ids.
  static Tokenizer bytes();
  /// The tokenizer in llm.c's file at `path`; a UserError naming the file and what is
  /// wrong with it (missing, short, wrong magic or version, a bad or cut-off token table,
  /// bytes after it, an end-of-text id outside the vocabulary).
  static Tokenizer load(const std::string& path);
  /// `bytes` or a file, as the config key `tokenizer` names it.
  static Tokenizer named(const std::string& name);

  /// "bytes", or the file's path.
  const std::string& name() const { return name_; }
  /// Token ids are 0..vocab_size()-1.
  int vocab_size() const { return int(tokens_.size()); }
  /// The token an empty prompt starts from: '\n' for bytes, end-of-text for a file.
  int start_token() const { return start_token_; }
  /// The end-of-text token of a file; -1 for bytes, which has none.
  int end_of_text() const { return byte_level_ ? -1 : start_token_; }
  /// The bytes of token `id`.
  const std::string& token_bytes(int id) const { return tokens_.at(size_t(id)); }

  /// The ids of `text`. For a file, a UserError naming `what` when the text is not valid
  /// UTF-8 or holds a byte that is no token of the file, with the byte's offset in that
  /// input, of which `text` is the part that starts at byte `input_offset`.
  std::vector<int> encode(std::string_view text, std::string_view what, size_t input_offset = 0) const;
  /// How much of `text`, a beginning of some longer input, can be encoded before the rest
  /// is known: a length k whose prefix's ids begin the ids of every input that begins
  /// with `text` (encode(text[0, k)), then encode(the rest), gives encode(all)). All of it
  /// for bytes. For a file, the last place the rules of is_piece_boundary find (a place no
  /// piece spans, which no end-of-text marker spans either); 0 when they find none. So a
  /// file of gigabytes is encoded a block at a time.
  size_t encodable_prefix(std::string_view text) const;
  /// The ids a sample starts from: the encoded `prompt`, or the start token alone when
  /// the prompt is empty.
  std::vector<int> encode_prompt(std::string_view prompt) const;
  /// The text of `ids`, token after token; a UserError naming an id outside the vocabulary.
  std::string decode(const std::vector<int>& ids) const;

 private:
  // Hash and equality that take a string_view, so a merge is looked up without a copy.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Text without the end-of-text marker: pre-tokenize, then BPE piece by piece. `offset`
  // is where `text` starts in the whole input (for error messages).
  void encode_ordinary(std::string_view text, std::string_view what, size_t offset, std::vector<int>& ids) const;
  std::vector<int> encode_piece(std::string_view piece, std::string_view what, size_t offset) const;

  std::string name_;
  std::vector<std::string> tokens_;  // id -> bytes
  int start_token_ = 0;
  bool byte_level_ = true;           // ids are the bytes themselves: no BPE
  std::unordered_map<std::string, int, Hash, std::equal_to<>> rank_;  // bytes -> id (a file's)
};

}  // namespace gpt
