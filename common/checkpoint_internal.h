/// @file
/// Private declarations shared by the checkpoint's source files. Nothing outside
/// common/checkpoint*.cpp includes this; the public interface is common/checkpoint.h.
///
/// ```
///   checkpoint.cpp           save (one writer, or every rank its slice) and load
///   checkpoint_files.cpp     the bytes: POSIX reads and writes at an offset, fsync, checksums
///   checkpoint_manifest.cpp  names, and reading manifest.json and its tensor table
///   checkpoint_agree.cpp     the ranks of a collective save agree after every step
///   checkpoint_run_dir.cpp   the checkpoints of a run directory: newest, prune, resume
///   checkpoint_mirror.cpp    host copies of device buffers for a save or a load
/// ```
#pragma once
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/error.h"

namespace gpt {
class Communicator;
}

namespace gpt::checkpoint_detail {

namespace fs = std::filesystem;
using nlohmann::json;
/// The manifest is written with insertion order kept (format and version first, the
/// long tensor table last), so that a person reading it sees the important part first.
using ordered_json = nlohmann::ordered_json;

inline constexpr const char* kFormat = "gpt-stages-checkpoint";  ///< the manifest's "format"
inline constexpr int kVersion = 1;                               ///< the manifest's "version"

// --- checkpoint_files.cpp: the bytes ----------------------------------------------

/// The checksum of a tensor's `bytes` bytes in memory: 64-bit FNV-1a as 16 lowercase hex digits.
std::string checksum_hex(const void* data, int64_t bytes);
/// The same checksum of a tensor as it lies in a file: `bytes` bytes from byte `offset`,
/// read in pieces of at most 4 MiB (a multiple of 8 bytes), each also handed to `each_piece`
/// when it is set.
std::string checksum_hex_in_file(int fd, int64_t offset, int64_t bytes, const std::string& path,
                                 const std::function<void(const char* piece, int64_t bytes)>& each_piece = {});

/// strerror(errno), for messages.
std::string errno_text();

/// Closes a file descriptor when it goes out of scope, so that every early throw
/// releases its descriptor.
class Fd {
 public:
  /// Owns `fd` (negative: none, as a failed open returns).
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  /// The descriptor, for the POSIX calls.
  int get() const { return fd_; }
  /// Closes explicitly, reporting an error (a failed close can mean lost data on NFS).
  void close_or_fail(const std::string& path) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close " + path + ": " + errno_text());
  }

 private:
  int fd_;
};

/// Writes exactly n bytes at `offset` (pwrite may write fewer than asked).
void pwrite_all(int fd, const void* data, int64_t n, int64_t offset, const std::string& path);
/// Reads exactly n bytes at `offset`; a short read means the file shrank under us.
void pread_all(int fd, void* data, int64_t n, int64_t offset, const std::string& path);
/// fsync on a directory makes its entries (a new file, a rename) durable.
void fsync_directory(const fs::path& dir);
/// A whole small file, written and fsync'ed.
void write_text_file(const fs::path& path, const std::string& text);

// --- checkpoint_manifest.cpp: names and the manifest -------------------------------

/// step_00000100: the directory name of a checkpoint of step 100.
std::string step_dir_name(int64_t step);
/// True, with `step` set, for "step_" followed by at least eight digits and nothing else.
bool parse_step_dir_name(const std::string& name, int64_t& step);
/// param -> param.bin.
std::string file_for_kind(const std::string& kind);
/// The caller's buffers (kinds, slices, data), checked: a wrong one is a bug in the
/// caller, so std::invalid_argument, not a UserError.
void check_buffers(const ParamLayout& layout, const std::vector<CheckpointBuffer>& buffers);
/// The model's shape as the manifest records it.
ordered_json model_json(const ModelConfig& m);

/// One row of the manifest's tensor table, checked and typed.
struct TableEntry {
  std::vector<int64_t> shape;  ///< the full tensor's shape
  std::string file;            ///< a plain name in the checkpoint directory (param.bin)
  int64_t offset = 0;          ///< in bytes
  int64_t element_bytes = 4;   ///< 4 for dtype fp32, 8 for fp64
  std::string checksum;        ///< "" when the writer did not have the whole tensor
};

/// Reads and parses dir/manifest.json; every failure names the file.
json read_manifest(const fs::path& dir);
/// Fails unless the manifest's model shape is `m`.
void check_model(const json& manifest, const ModelConfig& m, const std::string& manifest_path);
/// The tensor table by name; a row with a bad dtype, file or offset fails, naming it.
/// (Every row's offset plus its shape's bytes is checked to fit an int64: sizes computed from
/// the table cannot overflow.)
std::map<std::string, TableEntry> read_table(const json& manifest, const std::string& manifest_path);

// --- checkpoint_agree.cpp: the ranks of a collective save agree ------------------------

/// What one rank's step ended with. The error's kind is kept across ranks: a UserError
/// (bad input: a disk full, a path we cannot create) stays a UserError, a caller's bug
/// (std::invalid_argument) stays one.
enum class ErrorKind { None = 0, User = 1, InvalidArgument = 2, Other = 3 };

/// One rank's step: its error's kind and message, if any.
struct Outcome {
  ErrorKind kind = ErrorKind::None;  ///< None when the step succeeded
  std::string message;               ///< what() of the error
  std::exception_ptr error;          ///< the original, rethrown as it is when there is one rank
};

/// Runs one step of a collective save and returns how it ended instead of throwing.
template <class Step>
Outcome attempt(Step&& step) {
  Outcome o;
  try {
    step();
  } catch (const UserError& e) {
    o = {ErrorKind::User, e.what(), std::current_exception()};
  } catch (const std::invalid_argument& e) {
    o = {ErrorKind::InvalidArgument, e.what(), std::current_exception()};
  } catch (const std::exception& e) {
    o = {ErrorKind::Other, e.what(), std::current_exception()};
  }
  return o;
}

/// Collective: every rank learns whether any rank's step failed, and then every rank
/// throws the lowest failing rank's error ("rank R: ..."). Also the barrier between steps.
void agree(Communicator& comm, const Outcome& mine);
/// Collective: every rank passes the same kinds, of the same types (fp32, fp64), in the same order.
void check_same_kinds(Communicator& comm, const std::vector<CheckpointBuffer>& buffers);
/// Collective: for each kind the ranks' slices tile [0, layout.total()) exactly once.
void check_tiling(Communicator& comm, const ParamLayout& layout, const std::vector<CheckpointBuffer>& buffers);

}  // namespace gpt::checkpoint_detail
