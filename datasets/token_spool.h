// prepare's token spool: the tokens of every input, appended to a temporary file in the
// output directory as they are encoded, then mapped read-only to be cut into shards.
//
// Why a file and not memory: where val begins is a fraction of all the tokens, known
// only once the last input is encoded, so every token must be kept until then. A corpus
// the size of OpenWebText (some 9 * 10^9 GPT-2 tokens) is 18 GB of uint16, more than
// many machines hold; on disk it costs 2 bytes a token until the shards are written, and
// the mapping lets the page cache hold what memory allows.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/files.h"

namespace gpt {

/// A temporary file of uint16 tokens beside `near` (create_temporary_beside's name, so a
/// killed run's spool is recognised, and removed, by a later prepare). Removed when the
/// spool is destroyed, and by SIGINT, SIGTERM or SIGHUP once remove_on_signals has run.
class TokenSpool {
 public:
  explicit TokenSpool(const std::string& near);
  ~TokenSpool();
  TokenSpool(const TokenSpool&) = delete;
  TokenSpool& operator=(const TokenSpool&) = delete;

  /// Adds ids (each < 65536: a tokenizer's vocabulary fits uint16). A UserError naming
  /// the spool when the disk refuses the write (full, or over a size limit).
  void append(const std::vector<int>& ids);
  int64_t size() const { return count_; }  ///< tokens appended so far

  /// Ends the writing and maps every token read-only. Once; append is over after it.
  std::span<const uint16_t> map();

  /// Installs handlers that remove the live spool, then end the process as the signal
  /// would (Ctrl-C, a job scheduler's SIGTERM, a closed terminal): a spool is 2 bytes a
  /// token, gigabytes for a large corpus, that only a later prepare in the same directory
  /// would otherwise remove. A signal the process inherited as ignored (nohup) stays so.
  static void remove_on_signals();

 private:
  TemporaryFile file_;
  int64_t count_ = 0;
  std::vector<uint16_t> narrow_;  // append's ids as uint16, reused
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
};

}  // namespace gpt
