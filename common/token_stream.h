/// @file
/// The token stream of a split: its shards (common/data.h's format) in sorted file-name
/// order, read as one sequence of tokens, each shard's file mapped into memory
/// (read-only `mmap`) rather than copied.
///
/// Why mapped: a copy costs every rank the whole split in its own memory and a read of it
/// at start-up. GPT-2 124M's usual data (llm.c's FineWeb shards, 10^10 tokens) is 20 GB;
/// eight ranks on one node would copy it eight times. A mapping is backed by the kernel's
/// page cache, which every process reading the same file shares: one copy per node, read
/// once from disk (the validation below reads every page at start-up) and given back
/// when the machine needs the room, to be read again as the windows ask for it.
///
/// Token t of the stream is token t - start[k] of shard k, where start[k] is the number
/// of tokens in shards 0..k-1; a window may cross from one shard into the next.
///
/// Every shard is validated when the stream opens, as read_shard validates one (header,
/// payload size, every token id), so a bad file stops the run at start-up. A shard must
/// not be truncated or rewritten in place while a run maps it: reading a page past the
/// new end raises SIGBUS, which common/mapping_fault.h turns into an error naming the
/// shard and exit status 2; a token rewritten to one outside the vocabulary is named,
/// with its shard, when a window reads it. write_shards replaces a file by a rename, which
/// leaves the mapped file as it was. A read error while a page comes in (a failing disk, a lost
/// network file system) ends the run the same way, where a copy would have failed at
/// start-up: keep a run's data on a disk it can trust, or copy it to local storage first.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

/// The shards of a pattern as one read-only token sequence. Move-only: it owns the mappings.
class TokenStream {
 public:
  TokenStream() = default;  ///< no shards: size() 0
  /// Maps and validates every shard `pattern` names (expand_shards). A bad shard, or one
  /// that cannot be mapped, is a UserError naming the file.
  TokenStream(const std::string& pattern, int vocab_size);
  ~TokenStream();
  TokenStream(TokenStream&& other) noexcept;  ///< takes other's mappings; other is left empty
  TokenStream& operator=(TokenStream&& other) noexcept;  ///< unmaps this stream's, then takes other's
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;

  int64_t size() const { return total_; }  ///< tokens of all shards together

  /// out[i] = token first + i for i < n, across shard boundaries. Needs first >= 0 and
  /// first + n <= size() (an internal error otherwise).
  void copy(int64_t first, int64_t n, int32_t* out) const;

 private:
  struct Shard {
    void* mapping = nullptr;          // the whole file, header included
    size_t mapping_bytes = 0;         // the file's size
    const uint16_t* tokens = nullptr; // the payload, right after the header
    int64_t start = 0;                // the stream position of its first token
    int64_t count = 0;                // its tokens
    std::string path;                 // its file, for the errors that name it
  };
  void unmap_all();
  std::vector<Shard> shards_;  // in stream order
  int64_t total_ = 0;
  int vocab_size_ = 0;         // the bound every token was checked against at opening
};

}  // namespace gpt
