// The token stream of a split, its shards mapped read-only (see token_stream.h).
#include "common/token_stream.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "common/data.h"
#include "common/error.h"
#include "common/mapping_fault.h"

namespace gpt {
namespace {

// Running out of mappings fails as ENOMEM, as running out of memory does: which one it is,
// when `mapped` shards come near the kernel's limit (libraries and the rest of the process
// take some of it too), else nothing to add to the system's reason.
std::string mapping_hint(int err, size_t mapped) {
  if (err != ENOMEM) return "";
  long limit = 0;
  std::ifstream("/proc/sys/vm/max_map_count") >> limit;
  if (limit <= 0 || long(mapped) + 4096 < limit) return "";
  return " (a process may hold at most vm.max_map_count = " + std::to_string(limit) +
         " mappings, and each shard is one: " + std::to_string(mapped) +
         " are mapped already; join the shards into fewer, larger files)";
}

}  // namespace

TokenStream::TokenStream(const std::string& pattern, int vocab_size) {
  require(vocab_size > 0, "data " + pattern + ": vocab_size must be positive, got " + std::to_string(vocab_size));
  vocab_size_ = vocab_size;
  try {
    for (const std::string& path : expand_shards(pattern)) {
      const int64_t count = shard_token_count(path);  // the file and its header, checked
      const size_t bytes = size_t(kShardHeaderBytes + count * int64_t(sizeof(uint16_t)));
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) fail("shard '" + path + "': cannot open for reading: " + std::strerror(errno));
      // The file opened here must be the one just checked: replaced in between (a
      // prepare --force renames a new one into place), its size or header differs.
      struct stat st {};
      const bool same_size = ::fstat(fd, &st) == 0 && st.st_size == off_t(bytes);
      // The mapping keeps the file, so the descriptor is closed at once.
      void* mapping = same_size ? ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
      const int map_errno = errno;
      ::close(fd);
      if (!same_size) fail("shard '" + path + "' changed while it was being opened; start again");
      if (mapping == MAP_FAILED)
        fail("shard '" + path + "': cannot map its " + std::to_string(bytes) + " bytes into memory: " +
             std::strerror(map_errno) + mapping_hint(map_errno, shards_.size()));
      try {
        shards_.push_back({mapping, bytes, nullptr, total_, count, path});  // unmapped by unmap_all if a check fails
      } catch (...) {
        ::munmap(mapping, bytes);
        throw;
      }
      // Cut short from now on (truncated in place), a read of it is an error naming it.
      register_mapping(mapping, bytes, path, "shard");
      const int32_t* header = static_cast<const int32_t*>(mapping);
      if (header[0] != kShardMagic || header[1] != kShardVersion || header[2] != count)
        fail("shard '" + path + "' changed while it was being opened; start again");
      // The header is 1024 bytes, so the tokens are aligned for uint16_t.
      const char* payload = static_cast<const char*>(mapping) + kShardHeaderBytes;
      shards_.back().tokens = reinterpret_cast<const uint16_t*>(payload);
      check_token_ids(path, shards_.back().tokens, count, vocab_size);
      total_ += count;
    }
  } catch (...) {
    unmap_all();
    throw;
  }
}

TokenStream::~TokenStream() { unmap_all(); }

TokenStream::TokenStream(TokenStream&& other) noexcept
    : shards_(std::exchange(other.shards_, {})),
      total_(std::exchange(other.total_, 0)),
      vocab_size_(std::exchange(other.vocab_size_, 0)) {}

TokenStream& TokenStream::operator=(TokenStream&& other) noexcept {
  if (this != &other) {
    unmap_all();
    shards_ = std::exchange(other.shards_, {});
    total_ = std::exchange(other.total_, 0);
    vocab_size_ = std::exchange(other.vocab_size_, 0);
  }
  return *this;
}

void TokenStream::unmap_all() {
  for (const Shard& s : shards_) {
    unregister_mapping(s.mapping);
    ::munmap(s.mapping, s.mapping_bytes);
  }
  shards_.clear();
  total_ = 0;
}

void TokenStream::copy(int64_t first, int64_t n, int32_t* out) const {
  invariant(first >= 0 && n >= 0 && first + n <= total_,
            "TokenStream: tokens [" + std::to_string(first) + ", " + std::to_string(first + n) +
                ") asked of a stream of " + std::to_string(total_));
  if (n == 0) return;  // (an empty stream has no shard to start from)
  // The shard holding `first`: the last one that starts at or before it (an empty
  // shard starts where the next does, and upper_bound steps past it).
  auto shard = std::upper_bound(shards_.begin(), shards_.end(), first,
                                [](int64_t pos, const Shard& s) { return pos < s.start; }) - 1;
  while (n > 0) {
    const int64_t offset = first - shard->start;
    const int64_t take = std::min(n, shard->count - offset);
    int largest = 0;
    for (int64_t i = 0; i < take; ++i) {
      out[i] = shard->tokens[offset + i];
      largest = std::max(largest, out[i]);
    }
    // Every token was checked when the stream opened; one outside the vocabulary now
    // means the file was rewritten in place since (which the mapping shows).
    if (largest >= vocab_size_)
      for (int64_t i = 0; i < take; ++i)
        if (out[i] >= vocab_size_)
          fail("shard '" + shard->path + "': token " + std::to_string(offset + i) + " is now " +
               std::to_string(out[i]) + ", not below vocab_size " + std::to_string(vocab_size_) +
               ": the file was rewritten in place after the run opened and checked it (replace a shard a "
               "running job reads by writing a new file and renaming it, as prepare does)");
    out += take, first += take, n -= take;
    ++shard;
  }
}

}  // namespace gpt
