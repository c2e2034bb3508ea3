// The token stream of a split, its shards mapped read-only (see token_stream.h).
#include "common/token_stream.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/data.h"
#include "common/error.h"

namespace gpt {

TokenStream::TokenStream(const std::string& pattern, int vocab_size) {
  require(vocab_size > 0, "data " + pattern + ": vocab_size must be positive, got " + std::to_string(vocab_size));
  try {
    for (const std::string& path : expand_shards(pattern)) {
      const int64_t count = shard_token_count(path);  // the file and its header, checked
      const size_t bytes = size_t(kShardHeaderBytes + count * int64_t(sizeof(uint16_t)));
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) fail("shard '" + path + "': cannot open for reading: " + std::strerror(errno));
      // The mapping keeps the file, so the descriptor is closed at once.
      void* mapping = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
      const int map_errno = errno;
      ::close(fd);
      if (mapping == MAP_FAILED)
        fail("shard '" + path + "': cannot map its " + std::to_string(bytes) + " bytes into memory: " +
             std::strerror(map_errno));
      Shard s;
      s.mapping = mapping, s.mapping_bytes = bytes, s.start = total_, s.count = count;
      // The header is 1024 bytes, so the tokens are aligned for uint16_t.
      s.tokens = reinterpret_cast<const uint16_t*>(static_cast<const char*>(mapping) + kShardHeaderBytes);
      shards_.push_back(s);  // owned from here: unmapped by unmap_all if a check below fails
      check_token_ids(path, s.tokens, count, vocab_size);
      total_ += count;
    }
  } catch (...) {
    unmap_all();
    throw;
  }
}

TokenStream::~TokenStream() { unmap_all(); }

TokenStream::TokenStream(TokenStream&& other) noexcept
    : shards_(std::exchange(other.shards_, {})), total_(std::exchange(other.total_, 0)) {}

TokenStream& TokenStream::operator=(TokenStream&& other) noexcept {
  if (this != &other) {
    unmap_all();
    shards_ = std::exchange(other.shards_, {});
    total_ = std::exchange(other.total_, 0);
  }
  return *this;
}

void TokenStream::unmap_all() {
  for (const Shard& s : shards_) ::munmap(s.mapping, s.mapping_bytes);
  shards_.clear();
  total_ = 0;
}

void TokenStream::copy(int64_t first, int64_t n, int32_t* out) const {
  invariant(first >= 0 && n >= 0 && first + n <= total_,
            "TokenStream: tokens [" + std::to_string(first) + ", " + std::to_string(first + n) +
                ") asked of a stream of " + std::to_string(total_));
  // The shard holding `first`: the last one that starts at or before it (an empty
  // shard starts where the next does, and upper_bound steps past it).
  auto shard = std::upper_bound(shards_.begin(), shards_.end(), first,
                                [](int64_t pos, const Shard& s) { return pos < s.start; }) - 1;
  while (n > 0) {
    const int64_t offset = first - shard->start;
    const int64_t take = std::min(n, shard->count - offset);
    for (int64_t i = 0; i < take; ++i) out[i] = shard->tokens[offset + i];
    out += take, first += take, n -= take;
    ++shard;
  }
}

}  // namespace gpt
