/// @file
/// Token shards and the data loader.
///
/// Shard format (llm.c's, so its shards train here unchanged): a header of 256
/// little-endian int32 — [0] magic 20240520, [1] version 1, [2] number of tokens —
/// then that many uint16 tokens.
///
/// The loader follows the global-batch rule (docs/architecture.md, rule 7): what a step
/// trains on depends only on (seed, data position), never on the layout. The train
/// stream (all shards concatenated in sorted file-name order) is cut into
/// W = floor((n_tokens - 1) / T) windows of T+1 tokens (input and shifted target) at
/// stride T. Epoch e visits the windows in the
/// order  w(i) = (a_e * i + c_e) mod W  with a_e coprime to W, a permutation drawn from
/// (seed, e) by the counter-based RNG. Global sequence j of the run is window
/// w(j mod W) of epoch j / W. The data position p is the number of sequences the steps
/// before this one consumed (s * batch_size while the batch never changed); the step
/// uses sequences j = p .. p + batch_size - 1, and the sequence index within the step,
/// g, is split over micro-steps and ranks as g = (micro_step * dp + dp_rank) * micro_batch
/// + b. So the position to resume from is one count, which a checkpoint records
/// (CheckpointState::sequences), and a resumed run may change its batch_size.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/token_stream.h"

namespace gpt {

constexpr int32_t kShardMagic = 20240520;  ///< word 0 of a shard's header (llm.c's magic number)
constexpr int32_t kShardVersion = 1;       ///< word 1 of the header: the only version read or written
constexpr int64_t kShardHeaderBytes = 256 * 4;  ///< the header: 256 int32; the uint16 tokens follow it
constexpr int64_t kMaxShardTokens = 2147483647;  ///< 2^31 - 1: the header counts tokens in an int32

/// Writes tokens as one shard (to a temporary name, then renamed). Throws UserError
/// naming the path on I/O failure.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

/// One shard of a set written together: where it goes and its tokens (not owned).
struct ShardToWrite {
  std::string path;                   ///< the shard's final name
  std::span<const uint16_t> tokens;  ///< what it holds: at most 2^31 - 1 tokens (the header's count is an int32)
};
/// Writes a set of shards (train and val) all or none: every one to a temporary name
/// first, then, once all are written, each old one kept under a second name (a hard
/// link) while the new one replaces it by a rename. A failure leaves the old files as
/// they were. A target that exists and is no
/// regular file is refused before anything is written. Throws UserError naming the path.
void write_shards(const std::vector<ShardToWrite>& shards);

/// Reads and validates one shard: missing or empty file, wrong magic or version,
/// truncated or over-long payload, token id >= vocab_size are UserErrors naming the
/// file (and the offset or value).
std::vector<uint16_t> read_shard(const std::string& path, int vocab_size);

/// Whether the file at `path` begins as a shard does (magic number and version): a text
/// file does not. False when it cannot be read.
bool is_token_shard(const std::string& path);

/// Validates a shard's file and header alone, as read_shard does (existence, size, magic,
/// version, payload size against the header's count), and returns its token count.
int64_t shard_token_count(const std::string& path);

/// Refuses a token id >= vocab_size among a shard's n tokens: a UserError naming the
/// file `path`, the token's index and its byte offset in the file.
void check_token_ids(const std::string& path, const uint16_t* tokens, int64_t n, int vocab_size);

/// The tokens of every shard `pattern` names (expand_shards), added, read from their
/// headers alone (each checked as read_shard checks it, the token ids aside): what a
/// DataLoader of the pattern would hold, without reading the tokens.
int64_t stream_tokens(const std::string& pattern);

/// Expands a path that may contain a glob (*, ?, [...]) into the sorted list of matching
/// files (bytewise order). A path that names an existing file is that file, glob
/// characters and all. A UserError names the pattern when nothing matches, a plain path
/// that does not exist, one that cannot be looked up (a link loop, a name too long: with
/// the system's reason), and a match of one file under two names.
std::vector<std::string> expand_shards(const std::string& pattern);

/// Refuses (UserError naming both keys and the file) a validation set that shares a file
/// with the training set, however the two are spelled (a glob, a link, a dot segment): a loss
/// measured on tokens the model trains on says nothing of how it generalises.
void require_disjoint_splits(const std::string& train_pattern, const std::string& val_pattern);

/// The tokens of a split (train or validation), mapped from their shards (TokenStream:
/// shared with every process that reads the same files, not copied), cut into windows as
/// described above. Batches are a pure function of (seed, position), so every rank holds
/// its own loader and reads its own part of each step.
class DataLoader {
 public:
  /// Maps and validates every shard of `pattern`. Needs at least one window of seq_len+1
  /// tokens.
  DataLoader(const std::string& pattern, int vocab_size, int seq_len, uint64_t seed);
  /// No data at all (num_windows() 0): what a run that never validates holds for its
  /// validation set. Asking it for a batch is an internal error.
  static DataLoader none(int seq_len);

  /// Fills inputs and targets (micro_batch x seq_len each) with this rank's part of
  /// micro-step `micro_step` of the step whose sequences start at global sequence
  /// `first_sequence` (the data position before the step).
  void batch(int64_t first_sequence, int micro_step, int dp_rank, int dp, int micro_batch,
             int batch_size, int32_t* inputs, int32_t* targets) const;

  /// Validation: fixed, unshuffled windows; batch k of size n takes windows k*n..k*n+n-1
  /// (modulo the window count).
  void sequential_batch(int64_t k, int n, int32_t* inputs, int32_t* targets) const;

  int64_t num_tokens() const { return tokens_.size(); }  ///< tokens of all shards together
  int64_t num_windows() const { return windows_; }  ///< W: windows of seq_len+1 tokens; an epoch is W sequences

  /// The window a global sequence index maps to (exposed for tests).
  int64_t window_of(int64_t global_sequence) const;
  int seq_len() const { return seq_len_; }  ///< T: tokens per sequence (a window holds T+1)

 private:
  DataLoader(int seq_len) : seq_len_(seq_len), seed_(0), windows_(0) {}
  void copy_window(int64_t window, int32_t* inputs, int32_t* targets) const;
  TokenStream tokens_;
  int seq_len_;
  uint64_t seed_;
  int64_t windows_;
};

}  // namespace gpt
