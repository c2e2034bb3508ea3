// Token shards and the data loader (see data.h for the format and the order).
//
// Two ideas carry this file:
//  * A shard is validated completely when it is read — header, payload size and
//    every token id — so a bad file stops the run at start-up with a message naming
//    the file, never as a NaN or an out-of-bounds embedding lookup hours later.
//  * The loader keeps no cursor. The window a sequence uses is a pure function of
//    (seed, global sequence index), so any rank of any layout computes its share of a
//    step on its own, and resuming needs only the step number.
#include "common/data.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <system_error>
#include <utility>

#include "common/error.h"
#include "common/files.h"
#include "common/rng.h"

namespace gpt {
namespace {

// The format is little-endian. Every machine this trainer targets (x86-64, aarch64)
// is too, so the bytes in memory are the bytes on disk; a big-endian port would
// byte-swap the header and tokens in write_shard and read_shard.
static_assert(std::endian::native == std::endian::little, "shards are little-endian");

constexpr int kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kShardHeaderBytes;
static_assert(kHeaderBytes == kHeaderInts * int64_t(sizeof(int32_t)));
constexpr int64_t kTokenBytes = int64_t(sizeof(uint16_t));

std::string quoted(const std::string& path) { return "'" + path + "'"; }

// ---- writing --------------------------------------------------------------------

}  // namespace

namespace {

// Writes `tokens` as a shard into `temp` and closes it, or removes it and fails naming `path`.
void write_shard_file(const std::string& path, const TemporaryFile& temp, std::span<const uint16_t> tokens) {
  // The header stores the count as an int32, so one shard holds < 2^31 tokens.
  if (tokens.size() > size_t(kMaxShardTokens)) {
    std::fclose(temp.file);
    std::remove(temp.name.c_str());
    fail("shard " + quoted(path) + ": " + std::to_string(tokens.size()) +
         " tokens do not fit one shard (the header's count is an int32)");
  }
  int32_t header[kHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = int32_t(tokens.size());
  // (No fwrite of an empty shard's tokens: their data() may be null, which fwrite must not get.)
  const bool written = std::fwrite(header, 1, size_t(kHeaderBytes), temp.file) == size_t(kHeaderBytes) &&
                       (tokens.empty() ||
                        std::fwrite(tokens.data(), size_t(kTokenBytes), tokens.size(), temp.file) == tokens.size());
  const int write_errno = errno;
  close_temporary(temp, written, write_errno, "shard " + quoted(path));
}

}  // namespace

namespace {

// An unused name beside `path` for a second link to its file: path.old, else path.old.1,
// path.old.2, ... (a file of the user's under such a name is left alone).
std::string unused_backup_name(const std::string& path) {
  namespace fs = std::filesystem;
  std::string name = path + ".old";
  for (int n = 1;; ++n) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(name, ec))) return name;
    name = path + ".old." + std::to_string(n);
  }
}

}  // namespace

void write_shards(const std::vector<ShardToWrite>& shards) {
  // Every shard goes to a temporary name next to its target first; only when all are
  // written are they put in place. So an error (a disk full on the second) leaves the old
  // set whole, never a new train shard beside an old val shard, and a reader never sees a
  // half-written file under a final name. Putting them in place is itself all or none:
  // each old shard first gets a second name (a hard link: the file stays under its own
  // name, so a reader finds the old or the new shard there, never none), then each new
  // shard replaces its old one by an atomic rename, and a failure renames the old ones
  // back.
  namespace fs = std::filesystem;
  for (const ShardToWrite& s : shards) {
    std::error_code ec;
    const fs::file_status status = fs::symlink_status(s.path, ec);
    if (fs::exists(status) && !fs::is_regular_file(status))
      fail("shard " + quoted(s.path) + ": exists and is not a regular file; not replaced");
  }
  std::vector<std::string> targets;
  for (const ShardToWrite& s : shards) targets.push_back(s.path);
  remove_crashed_temporaries(targets);  // once for the set (a sweep a shard lists the directory each time)
  std::vector<std::string> temps;
  try {
    for (const ShardToWrite& s : shards) {
      const TemporaryFile temp = create_temporary_beside(s.path, "shard " + quoted(s.path), /*sweep_first=*/false);
      temps.push_back(temp.name);
      write_shard_file(s.path, temp, s.tokens);
    }
  } catch (...) {
    for (const std::string& t : temps) std::remove(t.c_str());
    throw;
  }
  std::vector<std::string> backups(shards.size());  // "" where there was no old shard
  std::vector<bool> placed(shards.size(), false);
  // Undoes what was done: old shards back under their names, new ones and temporaries gone.
  const auto roll_back = [&] {
    for (size_t k = 0; k < shards.size(); ++k) {
      const char* target = shards[k].path.c_str();
      if (placed[k] && !backups[k].empty()) std::rename(backups[k].c_str(), target);
      else if (placed[k]) std::remove(target);
      else if (!backups[k].empty()) std::remove(backups[k].c_str());  // the old file is still in place
      std::remove(temps[k].c_str());
    }
  };
  const auto failed = [&](const std::string& path, const std::string& what, const std::string& why) {
    roll_back();
    fail("shard " + quoted(path) + ": " + what + ": " + why + " (the old shards are left as they were)");
  };
  for (size_t i = 0; i < shards.size(); ++i) {
    std::error_code ec;
    if (!fs::exists(shards[i].path, ec)) continue;
    const std::string backup = unused_backup_name(shards[i].path);
    fs::create_hard_link(shards[i].path, backup, ec);
    if (ec) failed(shards[i].path, "cannot keep the old shard as " + quoted(backup), ec.message());
    backups[i] = backup;
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (std::rename(temps[i].c_str(), shards[i].path.c_str()) != 0)
      failed(shards[i].path, "cannot rename " + quoted(std::as_const(temps[i])) + " to it", std::strerror(errno));
    placed[i] = true;
  }
  for (const std::string& b : backups)
    if (!b.empty()) std::remove(b.c_str());
}

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) { write_shards({{path, tokens}}); }

// ---- reading --------------------------------------------------------------------

namespace {

// Checks the file's existence and size before anything is read, so that each way a
// file can be wrong gets its own message.
int64_t shard_file_size(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  // A link loop or a name too long is an error of its own, not a missing file.
  if (ec && ec != std::errc::no_such_file_or_directory)
    fail("shard " + quoted(path) + ": cannot look it up (" + ec.message() + ")");
  if (!fs::exists(status)) fail("shard " + quoted(path) + ": no such file");
  if (!fs::is_regular_file(status)) fail("shard " + quoted(path) + ": not a regular file");
  const auto size = fs::file_size(path, ec);
  if (ec) fail("shard " + quoted(path) + ": cannot read its size (" + ec.message() + ")");
  if (size == 0) fail("shard " + quoted(path) + ": file is empty (0 bytes)");
  if (int64_t(size) < kHeaderBytes) {
    fail("shard " + quoted(path) + ": file is " + std::to_string(size) +
         " bytes, shorter than the " + std::to_string(kHeaderBytes) + "-byte header");
  }
  return int64_t(size);
}

void read_bytes(std::ifstream& in, const std::string& path, void* data, int64_t bytes) {
  in.read(static_cast<char*>(data), static_cast<std::streamsize>(bytes));
  if (!in) fail("shard " + quoted(path) + ": read error");
}

// The header's count must account for every byte after the header: fewer bytes is a
// truncated copy, more is not the file the header describes.
void check_payload_size(const std::string& path, int64_t count, int64_t file_bytes) {
  const int64_t payload = file_bytes - kHeaderBytes;
  const int64_t expected = count * kTokenBytes;
  if (payload < expected) {
    fail("shard " + quoted(path) + ": truncated: the header declares " +
         std::to_string(count) + " tokens (" + std::to_string(expected) +
         " bytes) but only " + std::to_string(payload) + " bytes follow the header");
  }
  if (payload > expected) {
    fail("shard " + quoted(path) + ": " + std::to_string(payload - expected) +
         " trailing bytes after the " + std::to_string(count) +
         " tokens the header declares");
  }
}

}  // namespace

bool is_token_shard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t words[2] = {};
  in.read(reinterpret_cast<char*>(words), sizeof words);
  return in && words[0] == kShardMagic && words[1] == kShardVersion;
}

void check_token_ids(const std::string& path, const uint16_t* tokens, int64_t n, int vocab_size) {
  // The largest id first (a loop the compiler vectorises: a split of 10^10 tokens is
  // scanned at start-up), then, only if it is out of range, the first offender.
  uint16_t largest = 0;
  for (int64_t i = 0; i < n; ++i) largest = std::max(largest, tokens[i]);
  if (int(largest) < vocab_size) return;
  for (int64_t i = 0; i < n; ++i) {
    if (int(tokens[i]) >= vocab_size) {
      fail("shard " + quoted(path) + ": token " + std::to_string(i) + " (byte offset " +
           std::to_string(kHeaderBytes + i * kTokenBytes) + ") is " + std::to_string(tokens[i]) +
           ", not below vocab_size " + std::to_string(vocab_size));
    }
  }
}

namespace {

// Opens a shard and reads its header: the token count, once the file's size, magic,
// version and payload agree with it. `in` is left at the first token.
int64_t open_shard(const std::string& path, std::ifstream& in) {
  const int64_t file_bytes = shard_file_size(path);
  in.open(path, std::ios::binary);
  require(bool(in), "shard " + quoted(path) + ": cannot open for reading");
  int32_t header[kHeaderInts];
  read_bytes(in, path, header, kHeaderBytes);

  if (header[0] != kShardMagic) {
    fail("shard " + quoted(path) + ": bad magic " + std::to_string(header[0]) +
         " (expected " + std::to_string(kShardMagic) + "): not a token shard");
  }
  if (header[1] != kShardVersion) {
    fail("shard " + quoted(path) + ": unsupported version " + std::to_string(header[1]) +
         " (expected " + std::to_string(kShardVersion) + ", uint16 tokens)");
  }
  const int64_t count = header[2];
  if (count < 0) {
    fail("shard " + quoted(path) + ": negative token count " + std::to_string(count) +
         " in the header");
  }
  check_payload_size(path, count, file_bytes);
  return count;
}

}  // namespace

std::vector<uint16_t> read_shard(const std::string& path, int vocab_size) {
  require(vocab_size > 0, "shard " + quoted(path) + ": vocab_size must be positive, got " +
                              std::to_string(vocab_size));
  std::ifstream in;
  const int64_t count = open_shard(path, in);
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  read_bytes(in, path, tokens.data(), count * kTokenBytes);
  check_token_ids(path, tokens.data(), count, vocab_size);
  return tokens;
}

int64_t shard_token_count(const std::string& path) {
  std::ifstream in;
  return open_shard(path, in);
}

int64_t stream_tokens(const std::string& pattern) {
  int64_t total = 0;
  for (const std::string& path : expand_shards(pattern)) total += shard_token_count(path);
  return total;
}

// ---- file lists -----------------------------------------------------------------

std::vector<std::string> expand_shards(const std::string& pattern) {
  // A path that names a file as written is that file, even with *, ? or [ in its name
  // (s[1].bin is not read as a pattern matching s1.bin). A plain path is taken as is, so
  // that a typo is reported as a missing file rather than as a pattern that matched
  // nothing; a path that cannot be looked up (a link loop, a name too long) says why.
  std::error_code ec;
  const bool exists = std::filesystem::exists(pattern, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    fail("data file " + quoted(pattern) + ": cannot look it up (" + ec.message() + ")");
  if (exists) return {pattern};
  if (pattern.find_first_of("*?[") == std::string::npos) fail("data file " + quoted(pattern) + " does not exist");

  glob_t matches{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> files;
  if (rc == 0) files.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  globfree(&matches);
  if (rc == GLOB_NOMATCH) fail("no data file matches " + quoted(pattern));
  if (rc != 0) fail("cannot expand " + quoted(pattern) + " (read error or out of memory)");

  // glob() sorts by the locale's collation; sort again by bytes so that the order of
  // the shards, hence of the whole token stream, is the same on every machine.
  std::sort(files.begin(), files.end());
  // Two names of one file (a link among the shards) would read its tokens twice: an
  // epoch that repeats a shard, which no flag would show. A file is its device and inode.
  std::map<std::pair<dev_t, ino_t>, const std::string*> seen;
  for (const std::string& file : files) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) continue;  // a file that vanished in between is read, and reported, later
    const auto [at, fresh] = seen.emplace(std::make_pair(st.st_dev, st.st_ino), &file);
    if (!fresh)
      fail(quoted(pattern) + " matches one file twice, as " + quoted(*at->second) + " and " + quoted(file) +
           " (a link): its tokens would be read twice; match each shard once");
  }
  return files;
}

void require_disjoint_splits(const std::string& train_pattern, const std::string& val_pattern) {
  const std::vector<std::string> train_files = expand_shards(train_pattern);
  for (const std::string& val_file : expand_shards(val_pattern)) {
    for (const std::string& train_file : train_files) {
      std::error_code ec;  // a file that vanished in between is read, and reported, later
      if (!std::filesystem::equivalent(train_file, val_file, ec)) continue;
      fail("val_data " + quoted(val_pattern) + " and train_data " + quoted(train_pattern) + " both name " +
           quoted(val_file) + (val_file == train_file ? "" : " (as " + quoted(train_file) + ")") +
           ": the validation loss would be measured on training tokens; give val_data a held-out shard");
    }
  }
}

// ---- the loader -----------------------------------------------------------------

namespace {

// (a * b) mod m for a, b < m, without overflowing 64 bits: the direct product when
// it fits, otherwise double-and-add (only for runs of more than 2^32 windows).
uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) {
  if (b == 0 || a <= std::numeric_limits<uint64_t>::max() / b) return a * b % m;
  uint64_t result = 0;
  for (; b != 0; b >>= 1) {
    if (b & 1) result = (result + a) % m;
    a = (a + a) % m;  // a < m < 2^63, so a + a does not wrap
  }
  return result;
}

// The affine permutation of epoch e: i -> (a*i + c) mod W. It visits every window
// exactly once because a is invertible mod W (gcd(a, W) = 1). a and c come from one
// counter-based draw at (seed, "data/epoch", e), so the order of epoch e is known
// without replaying epochs 0..e-1.
struct EpochPermutation {
  uint64_t a, c;
};

EpochPermutation epoch_permutation(uint64_t seed, int64_t epoch, int64_t windows) {
  const uint64_t w = uint64_t(windows);
  if (w == 1) return {1, 0};  // a single window: nothing to shuffle
  const uint64_t bits = bits64_at(seed, stream_id("data/epoch"), uint64_t(epoch));
  // Low half picks the multiplier in [1, W), high half the offset in [0, W).
  uint64_t a = 1 + (bits & 0xFFFFFFFFull) % (w - 1);
  const uint64_t c = (bits >> 32) % w;
  // Step to the next multiplier coprime to W; a = 1 always is, so this ends.
  while (std::gcd(a, w) != 1) a = (a + 1 < w) ? a + 1 : 1;
  return {a, c};
}

}  // namespace

DataLoader::DataLoader(const std::string& pattern, int vocab_size, int seq_len, uint64_t seed)
    : seq_len_(seq_len), seed_(seed), windows_(0) {
  require(seq_len > 0, "data: seq_len must be positive, got " + std::to_string(seq_len));
  tokens_ = TokenStream(pattern, vocab_size);
  // A window needs seq_len inputs plus one more token for the last target.
  const int64_t n = num_tokens();
  if (n < int64_t(seq_len) + 1) {
    fail("data " + quoted(pattern) + " has " + std::to_string(n) +
         " tokens, too few for one window of seq_len + 1 = " + std::to_string(seq_len + 1) +
         " tokens (seq_len " + std::to_string(seq_len) + ")");
  }
  windows_ = (n - 1) / seq_len;
}

DataLoader DataLoader::none(int seq_len) {
  return DataLoader(seq_len);
}

int64_t DataLoader::window_of(int64_t global_sequence) const {
  invariant(windows_ > 0, "data: a batch asked of a DataLoader without data");
  require(global_sequence >= 0,
          "data: negative sequence index " + std::to_string(global_sequence));
  const int64_t epoch = global_sequence / windows_;
  const uint64_t i = uint64_t(global_sequence % windows_);
  const EpochPermutation p = epoch_permutation(seed_, epoch, windows_);
  const uint64_t w = uint64_t(windows_);
  return int64_t((mul_mod(p.a, i, w) + p.c) % w);
}

void DataLoader::copy_window(int64_t window, int32_t* inputs, int32_t* targets) const {
  // Window w starts at token w*T; its targets are the same tokens shifted by one.
  const int64_t start = window * int64_t(seq_len_);
  tokens_.copy(start, seq_len_, inputs);
  tokens_.copy(start + 1, seq_len_, targets);
}

void DataLoader::batch(int64_t first_sequence, int micro_step, int dp_rank, int dp, int micro_batch,
                       int batch_size, int32_t* inputs, int32_t* targets) const {
  require(first_sequence >= 0, "data: negative first sequence " + std::to_string(first_sequence));
  require(dp >= 1, "data: dp must be at least 1, got " + std::to_string(dp));
  require(dp_rank >= 0 && dp_rank < dp, "data: dp_rank " + std::to_string(dp_rank) +
                                            " out of range [0, " + std::to_string(dp) + ")");
  require(micro_batch >= 1, "data: micro_batch must be at least 1, got " +
                                std::to_string(micro_batch));
  const int64_t per_micro_step = int64_t(micro_batch) * dp;
  require(batch_size >= 1 && batch_size % per_micro_step == 0,
          "data: batch_size " + std::to_string(batch_size) +
              " is not a positive multiple of micro_batch x dp = " +
              std::to_string(per_micro_step));
  const int64_t micro_steps = batch_size / per_micro_step;
  require(micro_step >= 0 && micro_step < micro_steps,
          "data: micro_step " + std::to_string(micro_step) + " out of range [0, " +
              std::to_string(micro_steps) + ")");
  require(inputs != nullptr && targets != nullptr, "data: null output buffer");

  // Sequence g of the step, laid out so that micro-steps and ranks partition the
  // global batch: the union over all of them is sequences 0..batch_size-1.
  for (int b = 0; b < micro_batch; ++b) {
    const int64_t g = (int64_t(micro_step) * dp + dp_rank) * micro_batch + b;
    const int64_t j = first_sequence + g;
    copy_window(window_of(j), inputs + int64_t(b) * seq_len_, targets + int64_t(b) * seq_len_);
  }
}

void DataLoader::sequential_batch(int64_t k, int n, int32_t* inputs, int32_t* targets) const {
  require(k >= 0, "data: negative validation batch index " + std::to_string(k));
  require(n >= 1, "data: validation batch size must be at least 1, got " + std::to_string(n));
  invariant(windows_ > 0, "data: a validation batch asked of a DataLoader without data");
  require(inputs != nullptr && targets != nullptr, "data: null output buffer");
  for (int b = 0; b < n; ++b) {
    const int64_t window = (k * n + b) % windows_;
    copy_window(window, inputs + int64_t(b) * seq_len_, targets + int64_t(b) * seq_len_);
  }
}

}  // namespace gpt
