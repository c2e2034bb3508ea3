// The bytes of a checkpoint: reads and writes at an offset, fsync, and the checksum.
//
// We use open/pwrite/pread/fsync rather than iostreams because a checkpoint needs two
// things iostreams cannot give: writing a slice at an offset of a file that other
// ranks write at the same time, and fsync (data on disk before the rename makes the
// checkpoint visible).
//
// Checksum: 64-bit FNV-1a (Fowler, Noll, Vo) over a tensor's bytes as they lie in
// the file. For every byte b: h = (h XOR b) * 1099511628211, starting from
// h = 14695981039346656037. It is not cryptographic; it is there to catch a
// truncated copy, a flipped bit or a file from another checkpoint, and it is short
// enough to re-implement in a few lines of Python (notebooks can verify it too).
// Written into the manifest as 16 lowercase hex digits.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/checkpoint_internal.h"

namespace gpt::checkpoint_detail {

// The files hold fp32 or fp64 little-endian; we write the host's floats and doubles byte
// for byte, which is only that format on a little-endian host (every machine this course
// targets).
static_assert(std::endian::native == std::endian::little,
              "checkpoint files are little-endian; a big-endian host would need byte swaps");
static_assert(sizeof(float) == 4 && sizeof(double) == 8, "checkpoint files store 4- and 8-byte IEEE-754 values");

namespace {

struct Fnv1a64 {
  uint64_t h = 14695981039346656037ull;
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  }
};

std::string hex_text(const Fnv1a64& f) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, f.h);
  return text;
}


}  // namespace

// The checksum of a tensor in memory.
std::string checksum_hex(const void* data, int64_t bytes) {
  Fnv1a64 f;
  f.update(data, size_t(bytes));
  return hex_text(f);
}

// The checksum of a tensor as it lies in a file: the same FNV-1a as checksum_hex, fed
// in pieces of at most 4 MiB so that a large tensor needs no large buffer.
std::string checksum_hex_in_file(int fd, int64_t offset, int64_t bytes, const std::string& path,
                                 const std::function<void(const char* piece, int64_t bytes)>& each_piece) {
  Fnv1a64 f;
  std::vector<char> piece(size_t(std::min<int64_t>(bytes, int64_t(4) << 20)));
  for (int64_t left = bytes; left > 0;) {
    const int64_t n = std::min<int64_t>(left, int64_t(piece.size()));
    pread_all(fd, piece.data(), n, offset, path);
    f.update(piece.data(), size_t(n));
    if (each_piece) each_piece(piece.data(), n);
    offset += n;
    left -= n;
  }
  return hex_text(f);
}

std::string errno_text() { return std::strerror(errno); }

// Writes n bytes at `offset`, looping because pwrite may write fewer bytes than asked.
void pwrite_all(int fd, const void* data, int64_t n, int64_t offset, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    // Large tensors are written in pieces of at most 1 GiB: some kernels cap one
    // write at ~2 GiB.
    const size_t chunk = size_t(std::min<int64_t>(n, int64_t(1) << 30));
    const ssize_t w = ::pwrite(fd, p, chunk, off_t(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write " + path + ": " + errno_text());
    }
    if (w == 0) fail("cannot write " + path + ": no byte written at byte " + std::to_string(offset));  // no endless loop
    p += w;
    n -= w;
    offset += w;
  }
}

// Reads exactly n bytes at `offset`; a short read means the file shrank under us.
void pread_all(int fd, void* data, int64_t n, int64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const size_t chunk = size_t(std::min<int64_t>(n, int64_t(1) << 30));
    const ssize_t r = ::pread(fd, p, chunk, off_t(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail("cannot read " + path + ": " + errno_text());
    }
    if (r == 0) fail("unexpected end of file in " + path + " at byte " + std::to_string(offset));
    p += r;
    n -= r;
    offset += r;
  }
}

// fsync on a directory makes its entries (a new file, a rename) durable.
void fsync_directory(const fs::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY));
  if (fd.get() < 0) fail("cannot open directory " + dir.string() + ": " + errno_text());
  if (::fsync(fd.get()) != 0) fail("cannot fsync directory " + dir.string() + ": " + errno_text());
  fd.close_or_fail(dir.string());
}

void write_text_file(const fs::path& path, const std::string& text) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
  if (fd.get() < 0) fail("cannot create " + path.string() + ": " + errno_text());
  pwrite_all(fd.get(), text.data(), int64_t(text.size()), 0, path.string());
  if (::fsync(fd.get()) != 0) fail("cannot fsync " + path.string() + ": " + errno_text());
  fd.close_or_fail(path.string());
}

}  // namespace gpt::checkpoint_detail
