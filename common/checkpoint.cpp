// Layout-independent checkpoints: save, load (any slice), find the newest, prune.
//
// What a checkpoint is (docs/checkpoints.md has the full description):
//
//   <run_dir>/step_00000100/
//     param.bin  adam_m.bin  adam_v.bin   one file per kind of buffer; each file is
//                                         the whole flat layout buffer, fp32 little-
//                                         endian, layout.total() * 4 bytes
//     manifest.json                       written last: format, version, step, config,
//                                         model shape, layout, data position, RNG
//                                         counter and the tensor table (name, shape,
//                                         dtype, file, byte offset, checksum)
//
// Every tensor is stored whole, by name, so the way the run was split over ranks
// does not leak into the files. A rank that owns elements [begin, end) of the flat
// buffer writes (or reads) bytes [begin*4, end*4) of each file, at their offset;
// whether that slice is the whole buffer (stage 01) or a ZeRO shard (stage 03 on)
// makes no difference to the files, which is what lets any layout resume any
// checkpoint.
//
// Atomicity. The directory is filled under the name step_00000100.tmp; the data
// files and then the manifest are fsync'ed, and only then is the directory renamed
// to its final name. rename() is atomic on POSIX file systems, so a reader sees
// either no step_00000100 at all or a complete one; a crash leaves at worst a stale
// .tmp directory, which latest_checkpoint() ignores and the next save of that step
// removes.
#include "common/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "common/comm.h"
#include "common/error.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
// The manifest is written with insertion order kept (format and version first, the
// long tensor table last), so that a person reading it sees the important part first.
using ordered_json = nlohmann::ordered_json;

// The files hold fp32 little-endian; we write the host's floats byte for byte, which
// is only that format on a little-endian host (every machine this course targets).
static_assert(std::endian::native == std::endian::little,
              "checkpoint files are little-endian; a big-endian host would need byte swaps");
static_assert(sizeof(float) == 4, "checkpoint files store 4-byte IEEE-754 floats");

constexpr const char* kFormat = "gpt-stages-checkpoint";
constexpr int kVersion = 1;
constexpr int64_t kBytesPerElement = 4;  // fp32

// ---------------------------------------------------------------------------------
// Checksum: 64-bit FNV-1a (Fowler, Noll, Vo) over a tensor's bytes as they lie in
// the file. For every byte b: h = (h XOR b) * 1099511628211, starting from
// h = 14695981039346656037. It is not cryptographic; it is there to catch a
// truncated copy, a flipped bit or a file from another checkpoint, and it is short
// enough to re-implement in a few lines of Python (notebooks can verify it too).
// Written into the manifest as 16 lowercase hex digits.
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

// The checksum of a tensor in memory.
std::string checksum_hex(const float* data, int64_t numel) {
  Fnv1a64 f;
  f.update(data, size_t(numel * kBytesPerElement));
  return hex_text(f);
}

// ---------------------------------------------------------------------------------
// Small POSIX file helpers. We use open/pwrite/pread/fsync rather than iostreams
// because a checkpoint needs two things iostreams cannot give: writing a slice at an
// offset of a file that other ranks write at the same time, and fsync (data on disk
// before the rename makes the checkpoint visible).

std::string errno_text() { return std::strerror(errno); }

// Closes a file descriptor when it goes out of scope, so that every early throw below
// releases its descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes explicitly, reporting an error (a failed close can mean lost data on NFS).
  void close_or_fail(const std::string& path) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close " + path + ": " + errno_text());
  }

 private:
  int fd_;
};

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

// ---------------------------------------------------------------------------------
// Names.

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

// "step_" followed by at least eight digits and nothing else: a complete checkpoint's
// directory name. "step_00000100.tmp" (being written) and "step_00000100.old" (being
// replaced) do not match; complete_checkpoints() counts a .old only where its step has
// no other copy.
bool parse_step_dir_name(const std::string& name, int64_t& step) {
  constexpr std::string_view prefix = "step_";
  if (name.size() < prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 18) return false;  // would overflow int64
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  step = std::stoll(digits);
  return true;
}

// A buffer kind becomes a file name, so keep it to a safe alphabet.
bool valid_kind(const std::string& kind) {
  return !kind.empty() && std::all_of(kind.begin(), kind.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string file_for_kind(const std::string& kind) { return kind + ".bin"; }

// The buffers are the caller's, so a wrong one is a bug in the caller, not bad input.
void check_buffers(const ParamLayout& layout, const std::vector<CheckpointBuffer>& buffers) {
  std::set<std::string> seen;
  for (const CheckpointBuffer& b : buffers) {
    if (!valid_kind(b.kind))
      throw std::invalid_argument("checkpoint buffer kind '" + b.kind +
                                  "' is not a name of [a-z0-9_]");
    if (!seen.insert(b.kind).second)
      throw std::invalid_argument("checkpoint buffer kind '" + b.kind + "' given twice");
    if (b.begin < 0 || b.begin > b.end || b.end > layout.total())
      throw std::invalid_argument("checkpoint buffer '" + b.kind + "' slice [" +
                                  std::to_string(b.begin) + ", " + std::to_string(b.end) +
                                  ") is not inside [0, " + std::to_string(layout.total()) + ")");
    if (b.end > b.begin && b.data == nullptr)
      throw std::invalid_argument("checkpoint buffer '" + b.kind + "' has no data");
  }
}

ordered_json model_json(const ModelConfig& m) {
  return ordered_json{{"n_layer", m.n_layer},       {"n_embd", m.n_embd},
              {"n_head", m.n_head},         {"block_size", m.block_size},
              {"vocab_size", m.vocab_size}, {"padded_vocab", m.padded_vocab()}};
}

// ---------------------------------------------------------------------------------
// Loading helpers.

// One row of the manifest's tensor table, checked and typed.
struct TableEntry {
  std::vector<int64_t> shape;
  std::string file;
  int64_t offset = 0;    // bytes
  std::string checksum;  // "" when the writer did not have the whole tensor
};

// Reads and parses manifest.json; every failure names the file.
json read_manifest(const fs::path& dir) {
  const fs::path path = dir / "manifest.json";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("checkpoint " + dir.string() + " is not a directory");
  if (!fs::is_regular_file(path, ec))
    fail("checkpoint " + dir.string() + " is incomplete or not a checkpoint: " + path.string() +
         " is missing");
  Fd fd(::open(path.c_str(), O_RDONLY));
  if (fd.get() < 0) fail("cannot open " + path.string() + ": " + errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat " + path.string() + ": " + errno_text());
  std::string text(size_t(st.st_size), '\0');
  pread_all(fd.get(), text.data(), int64_t(text.size()), 0, path.string());
  json manifest;
  try {
    manifest = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(path.string() + " is not valid JSON (corrupt checkpoint manifest): " + e.what());
  }
  if (!manifest.is_object()) fail(path.string() + " is not a JSON object (corrupt checkpoint manifest)");
  return manifest;
}

// The manifest's shape must be the model we are loading into: loading a 64-wide
// checkpoint into a 48-wide model would read garbage at every offset.
void check_model(const json& manifest, const ModelConfig& m, const std::string& manifest_path) {
  if (!manifest.contains("model") || !manifest["model"].is_object())
    fail(manifest_path + " has no \"model\" object");
  const json& saved = manifest["model"];
  const ordered_json expected = model_json(m);
  for (const auto& [field, want] : expected.items()) {
    if (!saved.contains(field) || !saved[field].is_number_integer())
      fail(manifest_path + ": model." + field + " is missing or not an integer");
    const int64_t have = saved[field].get<int64_t>();
    if (have != want.get<int64_t>())
      fail("checkpoint of another model shape: " + field + " is " + std::to_string(have) +
           " in " + manifest_path + " but " + std::to_string(want.get<int64_t>()) +
           " in the config");
  }
}

std::map<std::string, TableEntry> read_table(const json& manifest, const std::string& manifest_path) {
  if (!manifest.contains("tensors") || !manifest["tensors"].is_array())
    fail(manifest_path + " has no \"tensors\" array");
  std::map<std::string, TableEntry> table;
  for (const json& row : manifest["tensors"]) {
    const std::string name = row.value("name", std::string());
    if (name.empty()) fail(manifest_path + ": a tensor row has no name");
    TableEntry e;
    e.shape = row.at("shape").get<std::vector<int64_t>>();
    e.file = row.at("file").get<std::string>();
    e.offset = row.at("offset").get<int64_t>();
    if (row.contains("checksum") && row["checksum"].is_string())
      e.checksum = row["checksum"].get<std::string>();
    const std::string dtype = row.at("dtype").get<std::string>();
    if (dtype != "fp32")
      fail(manifest_path + ": tensor " + name + " has dtype " + dtype + "; only fp32 is supported");
    // The file name comes from the manifest; refuse anything that is not a plain name
    // in the checkpoint directory.
    if (e.file.empty() || e.file.find('/') != std::string::npos || e.file == "." || e.file == "..")
      fail(manifest_path + ": tensor " + name + " names file '" + e.file +
           "', which is not a file of the checkpoint directory");
    if (e.offset < 0 || e.offset % kBytesPerElement != 0)
      fail(manifest_path + ": tensor " + name + " has an invalid offset " + std::to_string(e.offset));
    if (!table.emplace(name, std::move(e)).second)
      fail(manifest_path + ": tensor " + name + " is listed twice");
  }
  return table;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

// ---------------------------------------------------------------------------------

namespace {

// ---------------------------------------------------------------------------------
// Writing: the steps both writers share. save_checkpoint runs them all in one
// process; save_checkpoint_sharded runs each on the rank(s) it belongs to, with an
// agreement between ranks after each (see below). Sharing them is what makes the two
// writers' checkpoints byte-identical.

struct CheckpointPaths {
  fs::path root;       // run_dir
  std::string name;    // step_00000100
  fs::path final_dir;  // run_dir/step_00000100
  fs::path tmp_dir;    // run_dir/step_00000100.tmp
};

CheckpointPaths checkpoint_paths(const std::string& run_dir, int64_t step) {
  CheckpointPaths p;
  p.root = fs::path(run_dir);
  p.name = step_dir_name(step);
  p.final_dir = p.root / p.name;
  p.tmp_dir = p.root / (p.name + ".tmp");
  return p;
}

// Step 1: an empty .tmp directory to fill.
void make_fresh_tmp_dir(const CheckpointPaths& p) {
  std::error_code ec;
  fs::create_directories(p.root, ec);
  if (ec) fail("cannot create run directory " + p.root.string() + ": " + ec.message());
  // A .tmp left by a crash is incomplete by definition: start over.
  fs::remove_all(p.tmp_dir, ec);
  if (ec) fail("cannot remove stale " + p.tmp_dir.string() + ": " + ec.message());
  fs::create_directory(p.tmp_dir, ec);
  if (ec) fail("cannot create " + p.tmp_dir.string() + ": " + ec.message());
}

// Step 2a: a kind's file, created at its full size whichever slices will be written
// into it. ftruncate only sets the length: the file is sparse until the slices land,
// and a byte nobody writes reads back as zero.
void create_kind_file(const fs::path& path, int64_t file_bytes) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT, 0644));
  if (fd.get() < 0) fail("cannot create " + path.string() + ": " + errno_text());
  if (::ftruncate(fd.get(), off_t(file_bytes)) != 0)
    fail("cannot size " + path.string() + ": " + errno_text());
  fd.close_or_fail(path.string());
}

// Step 2b: a buffer's slice, written at its byte offset in the existing file and
// fsync'ed. Ranks write disjoint byte ranges of one file at once, which POSIX allows.
void write_slice(const fs::path& path, const CheckpointBuffer& b) {
  Fd fd(::open(path.c_str(), O_WRONLY));
  if (fd.get() < 0) {
    const bool missing = errno == ENOENT;
    // Where rank 0 created the file but this rank cannot see it, the run directory is
    // on a disk of rank 0's node only.
    fail("cannot open " + path.string() + " to write a checkpoint slice: " + errno_text() +
         (missing ? " (is run_dir on a file system that every rank sees?)" : ""));
  }
  pwrite_all(fd.get(), b.data, (b.end - b.begin) * kBytesPerElement, b.begin * kBytesPerElement,
             path.string());
  if (::fsync(fd.get()) != 0) fail("cannot fsync " + path.string() + ": " + errno_text());
  fd.close_or_fail(path.string());
}

// The checksum of a tensor as it lies in a file: the same FNV-1a as checksum_hex, fed
// in pieces of at most 4 MiB so that a large tensor needs no large buffer.
std::string checksum_hex_in_file(int fd, int64_t offset, int64_t numel, const std::string& path) {
  Fnv1a64 f;
  std::vector<char> piece(size_t(std::min<int64_t>(numel * kBytesPerElement, int64_t(4) << 20)));
  for (int64_t left = numel * kBytesPerElement; left > 0;) {
    const int64_t n = std::min<int64_t>(left, int64_t(piece.size()));
    pread_all(fd, piece.data(), n, offset, path);
    f.update(piece.data(), size_t(n));
    offset += n;
    left -= n;
  }
  return hex_text(f);
}

// Step 3a: the tensor table's rows for one kind, in the layout's order. checksum(t)
// gives a row's checksum: its hex string, or null where the writer cannot compute it.
template <class ChecksumOf>
void append_tensor_rows(ordered_json& tensors, const std::string& kind, const ParamLayout& layout,
                        ChecksumOf&& checksum) {
  const std::string file = file_for_kind(kind);
  for (const ParamTensor& t : layout.tensors()) {
    ordered_json row = {{"name", kind + "/" + t.name},
                        {"kind", kind},
                        {"shape", t.shape},
                        {"dtype", "fp32"},
                        {"file", file},
                        {"offset", t.offset * kBytesPerElement}};
    row["checksum"] = checksum(t);
    tensors.push_back(std::move(row));
  }
}

// The caller's layout description, which the manifest records as JSON.
ordered_json parse_layout_json(const std::string& text) {
  ordered_json parsed = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    throw std::invalid_argument("CheckpointState::layout_json is not JSON: " + text);
  return parsed;
}

// Step 3b: the manifest, fsync'ed, and the directory entries of the .tmp directory.
void write_manifest(const CheckpointPaths& p, const Config& cfg, const ParamLayout& layout,
                    const CheckpointState& state, const ordered_json& layout_json,
                    const ordered_json& tensors) {
  const ordered_json manifest = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"sample_counter", state.sample_counter},
      {"layout", layout_json},
      // The data loader hands every layout the same sequences for a step (rule 7 of
      // docs/architecture.md), so the number of completed steps is the global data position.
      {"data_position", {{"step", state.step}}},
      {"config", ordered_json::parse(config_to_json(cfg))},
      {"model", model_json(layout.model())},
      {"tensors", tensors},
  };
  // The manifest goes last: its presence is what marks the data files complete.
  write_text_file(p.tmp_dir / "manifest.json", manifest.dump(2) + "\n");
  fsync_directory(p.tmp_dir);
}

// Step 4: publish. If this step was saved before (a rerun of the same step), move the
// old copy aside first: rename() cannot replace a non-empty directory.
void publish(const CheckpointPaths& p) {
  std::error_code ec;
  if (fs::exists(p.final_dir, ec)) {
    const fs::path old_dir = p.root / (p.name + ".old");
    fs::remove_all(old_dir, ec);
    fs::rename(p.final_dir, old_dir, ec);
    if (ec) fail("cannot move aside " + p.final_dir.string() + ": " + ec.message());
    fs::rename(p.tmp_dir, p.final_dir, ec);
    if (ec)
      fail("cannot rename " + p.tmp_dir.string() + " to " + p.final_dir.string() + ": " + ec.message());
    fs::remove_all(old_dir, ec);
    if (ec) fail("cannot remove " + old_dir.string() + ": " + ec.message());
  } else {
    fs::rename(p.tmp_dir, p.final_dir, ec);
    if (ec)
      fail("cannot rename " + p.tmp_dir.string() + " to " + p.final_dir.string() + ": " + ec.message());
    // A copy moved aside by a publish that was killed between its renames: the step
    // it stood for is complete again.
    fs::remove_all(p.root / (p.name + ".old"), ec);
    if (ec) fail("cannot remove " + (p.root / (p.name + ".old")).string() + ": " + ec.message());
  }
  fsync_directory(p.root);
}

// ---------------------------------------------------------------------------------
// Agreement between ranks. A collective writer must never leave a rank waiting: if
// rank 0 cannot create the directory and simply threw, the other ranks would sit in
// the next collective until the communicator's timeout, then report a lost peer
// instead of the real cause. So every step that can fail runs inside attempt(), which
// catches the error, and is followed by agree(), a collective every rank reaches
// whatever happened: it tells every rank whether any rank failed and, if one did,
// every rank throws the same error (the lowest failing rank's). agree() is also the
// barrier between steps: its all-reduce cannot complete on any rank before every rank
// has entered it, i.e. has finished the step before it.

// What one rank's step ended with. The code keeps the error's kind across ranks: a
// UserError (bad input: a disk full, a path we cannot create) stays a UserError, a
// caller's bug (std::invalid_argument) stays one.
enum class ErrorKind { None = 0, User = 1, InvalidArgument = 2, Other = 3 };

struct Outcome {
  ErrorKind kind = ErrorKind::None;
  std::string message;
  std::exception_ptr error;  // the original, rethrown as it is when there is one rank
};

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

// Copies root's string to every rank. The communicator moves typed elements; a
// broadcast copies them without looking at them, so text travels as two-byte
// elements (the bf16 type), padded to an even length, after its length.
void broadcast_string(Communicator& comm, std::string& text, int root) {
  double length = double(text.size());
  comm.broadcast(&length, 1, DType::F64, root);
  if (length == 0) {
    text.clear();
    return;
  }
  std::string padded = text;
  padded.resize(size_t(length) + size_t(length) % 2);
  comm.broadcast(padded.data(), padded.size() / 2, DType::BF16, root);
  text = padded.substr(0, size_t(length));
}

void agree(Communicator& comm, const Outcome& mine) {
  if (comm.size() == 1) {
    // One rank: nothing to tell anyone; its error goes out exactly as the single
    // writer's would.
    if (mine.error) std::rethrow_exception(mine.error);
    return;
  }
  // Slot r holds rank r's error kind (0 for none): each rank fills its own slot and
  // the sum over ranks fills them all.
  std::vector<double> kinds(size_t(comm.size()), 0.0);
  kinds[size_t(comm.rank())] = double(int(mine.kind));
  comm.all_reduce(kinds.data(), kinds.size(), DType::F64);
  const auto first = std::find_if(kinds.begin(), kinds.end(), [](double k) { return k != 0.0; });
  if (first == kinds.end()) return;
  const int origin = int(first - kinds.begin());
  std::string message = comm.rank() == origin ? mine.message : std::string();
  broadcast_string(comm, message, origin);
  message = "rank " + std::to_string(origin) + ": " + message;
  switch (ErrorKind(int(*first))) {
    case ErrorKind::User: fail(message);
    case ErrorKind::InvalidArgument: throw std::invalid_argument(message);
    default: throw std::runtime_error(message);
  }
}

std::string slice_text(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Every rank must pass the same kinds in the same order: the files are created, and
// the table written, from rank 0's list, and a rank's slice is matched to a file by
// position in the exchange below.
void check_same_kinds(Communicator& comm, const std::vector<CheckpointBuffer>& buffers) {
  std::string mine;
  for (const CheckpointBuffer& b : buffers) mine += (mine.empty() ? "" : ", ") + b.kind;
  std::string rank0 = mine;
  broadcast_string(comm, rank0, 0);
  agree(comm, attempt([&] {
    if (mine != rank0)
      throw std::invalid_argument("save_checkpoint_sharded: rank " + std::to_string(comm.rank()) +
                                  " passes the kinds [" + mine + "] but rank 0 passes [" + rank0 +
                                  "]; every rank must pass the same kinds in the same order");
  }));
}

// For each kind, the ranks' slices must cover [0, total) once: a gap would leave bytes
// nobody wrote (zeros, checksummed as if real) and an overlap would let two ranks
// race on the same bytes. Every rank gathers every rank's slices and checks them, so
// every rank reaches the same verdict.
void check_tiling(Communicator& comm, const ParamLayout& layout,
                  const std::vector<CheckpointBuffer>& buffers) {
  // Per rank: its layout's total (the ranks must agree on the model), then begin and
  // end of each kind. Element counts are far below 2^53, so doubles hold them exactly.
  const size_t per_rank = 1 + 2 * buffers.size();
  std::vector<double> mine;
  mine.reserve(per_rank);
  mine.push_back(double(layout.total()));
  for (const CheckpointBuffer& b : buffers) {
    mine.push_back(double(b.begin));
    mine.push_back(double(b.end));
  }
  std::vector<double> all(per_rank * size_t(comm.size()));
  comm.all_gather(mine.data(), all.data(), per_rank, DType::F64);

  agree(comm, attempt([&] {
    const auto at = [&](int r, size_t i) { return int64_t(all[size_t(r) * per_rank + i]); };
    for (int r = 0; r < comm.size(); ++r)
      if (at(r, 0) != layout.total())
        throw std::invalid_argument("save_checkpoint_sharded: rank " + std::to_string(r) +
                                    "'s layout has " + std::to_string(at(r, 0)) +
                                    " elements but rank " + std::to_string(comm.rank()) + "'s has " +
                                    std::to_string(layout.total()) + "; every rank must save the same model");
    for (size_t k = 0; k < buffers.size(); ++k) {
      // (begin, end, rank) of the non-empty slices, in file order.
      std::vector<std::tuple<int64_t, int64_t, int>> slices;
      std::string listing;
      for (int r = 0; r < comm.size(); ++r) {
        const int64_t begin = at(r, 1 + 2 * k), end = at(r, 2 + 2 * k);
        listing += (r ? ", rank " : "rank ") + std::to_string(r) + " " + slice_text(begin, end);
        if (end > begin) slices.emplace_back(begin, end, r);
      }
      std::sort(slices.begin(), slices.end());
      int64_t covered = 0;  // [0, covered) is written exactly once so far
      for (const auto& [begin, end, r] : slices) {
        if (begin != covered)
          throw std::invalid_argument(
              "save_checkpoint_sharded: the slices of '" + buffers[k].kind + "' do not tile [0, " +
              std::to_string(layout.total()) + "): " +
              (begin > covered ? "nobody holds " + slice_text(covered, begin)
                               : "rank " + std::to_string(r) + " overlaps " + slice_text(begin, covered)) +
              " (" + listing + ")");
        covered = end;
      }
      if (covered != layout.total())
        throw std::invalid_argument("save_checkpoint_sharded: the slices of '" + buffers[k].kind +
                                    "' do not tile [0, " + std::to_string(layout.total()) +
                                    "): nobody holds " + slice_text(covered, layout.total()) + " (" +
                                    listing + ")");
    }
  }));
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const Config& cfg,
                            const ParamLayout& layout, const CheckpointState& state,
                            const std::vector<CheckpointBuffer>& buffers) {
  check_buffers(layout, buffers);
  const CheckpointPaths p = checkpoint_paths(run_dir, state.step);
  make_fresh_tmp_dir(p);

  ordered_json tensors = ordered_json::array();
  const int64_t file_bytes = layout.total() * kBytesPerElement;
  for (const CheckpointBuffer& b : buffers) {
    // The file always has the whole buffer's size, whichever slice this writer holds.
    const fs::path path = p.tmp_dir / file_for_kind(b.kind);
    create_kind_file(path, file_bytes);
    write_slice(path, b);
    // We can only checksum what we hold: a tensor cut by this slice's edge (or outside
    // it) gets null. Stage 01 holds the whole buffer, so every row has its checksum;
    // sharded runs use save_checkpoint_sharded, which checksums the assembled files.
    append_tensor_rows(tensors, b.kind, layout, [&](const ParamTensor& t) -> ordered_json {
      if (t.offset >= b.begin && t.offset + t.numel <= b.end)
        return checksum_hex(b.data + (t.offset - b.begin), t.numel);
      return nullptr;
    });
  }

  write_manifest(p, cfg, layout, state, parse_layout_json(state.layout_json), tensors);
  publish(p);
  return p.final_dir.string();
}

std::string save_checkpoint_sharded(Communicator& comm, const std::string& run_dir,
                                    const Config& cfg, const ParamLayout& layout,
                                    const CheckpointState& state,
                                    const std::vector<CheckpointBuffer>& buffers) {
  const bool writer = comm.rank() == 0;  // rank 0 creates, checksums and publishes
  const CheckpointPaths p = checkpoint_paths(run_dir, state.step);
  const int64_t file_bytes = layout.total() * kBytesPerElement;

  // 0. The arguments, checked on every rank before anything touches the disk.
  ordered_json layout_json;
  agree(comm, attempt([&] {
    check_buffers(layout, buffers);
    layout_json = parse_layout_json(state.layout_json);
  }));
  check_same_kinds(comm, buffers);
  check_tiling(comm, layout, buffers);

  // 1. Rank 0 makes the .tmp directory and every file at its full size, so that the
  // other ranks only open existing files and write into them: no rank ever has to
  // guess whether another has created a file yet.
  agree(comm, attempt([&] {
    if (!writer) return;
    make_fresh_tmp_dir(p);
    for (const CheckpointBuffer& b : buffers) create_kind_file(p.tmp_dir / file_for_kind(b.kind), file_bytes);
  }));

  // 2. Every rank writes its slices, in parallel, each at its own offset, and fsyncs
  // them: when the next agreement completes, every byte of every file is on disk.
  agree(comm, attempt([&] {
    for (const CheckpointBuffer& b : buffers) write_slice(p.tmp_dir / file_for_kind(b.kind), b);
  }));

  // 3. Rank 0 checksums every tensor from the files (the only place where a tensor
  // cut between ranks is whole), writes the manifest and publishes. Reading the bytes
  // back rather than gathering the ranks' own checksums also checks what really
  // reached the disk. Rank 0 reads each file once, tensor by tensor.
  agree(comm, attempt([&] {
    if (!writer) return;
    ordered_json tensors = ordered_json::array();
    for (const CheckpointBuffer& b : buffers) {
      const fs::path path = p.tmp_dir / file_for_kind(b.kind);
      Fd fd(::open(path.c_str(), O_RDONLY));
      if (fd.get() < 0) fail("cannot open " + path.string() + ": " + errno_text());
      // Rank 0 created the file at this size and the slices lie inside it; any other
      // size means something else wrote there, and the checkpoint must not be published.
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0) fail("cannot stat " + path.string() + ": " + errno_text());
      if (int64_t(st.st_size) != file_bytes)
        fail(path.string() + " is " + std::to_string(st.st_size) + " bytes after the ranks wrote it, not " +
             std::to_string(file_bytes));
      append_tensor_rows(tensors, b.kind, layout, [&](const ParamTensor& t) -> ordered_json {
        return checksum_hex_in_file(fd.get(), t.offset * kBytesPerElement, t.numel, path.string());
      });
      fd.close_or_fail(path.string());
    }
    write_manifest(p, cfg, layout, state, layout_json, tensors);
    publish(p);
  }));
  return p.final_dir.string();
}

CheckpointState load_checkpoint(const std::string& path, const ParamLayout& layout,
                                const std::vector<CheckpointBuffer>& buffers) {
  check_buffers(layout, buffers);
  const fs::path dir(path);
  const std::string manifest_path = (dir / "manifest.json").string();
  const json manifest = read_manifest(dir);

  CheckpointState state;
  std::map<std::string, TableEntry> table;
  // nlohmann reports a missing key or a wrong type with its own exception; turn it
  // into a UserError that says which file is malformed.
  try {
    if (manifest.value("format", std::string()) != kFormat)
      fail(manifest_path + " is not a gpt-stages checkpoint manifest (format is not \"" +
           std::string(kFormat) + "\")");
    const int version = manifest.value("version", 0);
    if (version != kVersion)
      fail(manifest_path + " has version " + std::to_string(version) + "; this build reads version " +
           std::to_string(kVersion));
    check_model(manifest, layout.model(), manifest_path);
    state.step = manifest.at("step").get<int64_t>();
    if (state.step < 0) fail(manifest_path + " has step " + std::to_string(state.step) + ": a step count is >= 0");
    state.sample_counter = manifest.at("sample_counter").get<uint64_t>();
    state.layout_json = manifest.at("layout").dump();
    table = read_table(manifest, manifest_path);
  } catch (const json::exception& e) {
    fail(manifest_path + " is malformed: " + e.what());
  }

  // Each file must be exactly as long as the tensors the table puts in it: shorter
  // is a truncated copy, longer is a file from somewhere else.
  std::map<std::string, int64_t> file_size;
  for (const auto& [name, e] : table) {
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    file_size[e.file] = std::max(file_size[e.file], e.offset + numel * kBytesPerElement);
  }

  for (const CheckpointBuffer& b : buffers) {
    // Every tensor of the layout must be in the table with its shape, whether or not
    // this rank's slice touches it: a checkpoint that lacks one is not of this model.
    std::vector<std::pair<const ParamTensor*, const TableEntry*>> rows;
    for (const ParamTensor& t : layout.tensors()) {
      const std::string full = b.kind + "/" + t.name;
      const auto it = table.find(full);
      if (it == table.end()) fail(manifest_path + " has no tensor " + full);
      if (it->second.shape != t.shape)
        fail("tensor " + full + " has shape " + shape_text(it->second.shape) + " in " +
             manifest_path + " but " + shape_text(t.shape) + " in the model");
      rows.emplace_back(&t, &it->second);
    }

    std::map<std::string, std::unique_ptr<Fd>> open_files;
    auto file_of = [&](const std::string& file) -> int {
      auto& fd = open_files[file];
      if (fd) return fd->get();
      const fs::path fpath = dir / file;
      fd = std::make_unique<Fd>(::open(fpath.c_str(), O_RDONLY));
      if (fd->get() < 0) fail("checkpoint file " + fpath.string() + " is missing: " + errno_text());
      struct stat st {};
      if (::fstat(fd->get(), &st) != 0) fail("cannot stat " + fpath.string() + ": " + errno_text());
      if (int64_t(st.st_size) != file_size[file])
        fail("checkpoint file " + fpath.string() + " is " + std::to_string(st.st_size) +
             " bytes but the manifest needs " + std::to_string(file_size[file]) +
             " (truncated or from another checkpoint)");
      return fd->get();
    };

    std::vector<float> whole;  // scratch for a tensor that straddles the slice's edge
    for (const auto& [t, e] : rows) {
      const int64_t lo = std::max(b.begin, t->offset);
      const int64_t hi = std::min(b.end, t->offset + t->numel);
      if (lo >= hi) continue;  // another rank's tensor
      const std::string full = b.kind + "/" + t->name;
      const fs::path fpath = dir / e->file;
      const int fd = file_of(e->file);
      if (e->checksum.empty())
        fail("tensor " + full + " in " + fpath.string() +
             " has no checksum in the manifest (the checkpoint was written incompletely)");
      // Verify the whole tensor even when we keep only part of it: read it whole when
      // it is cut by the slice's edge (at most two tensors per slice), so that every
      // value a rank loads has been checked.
      const bool inside = lo == t->offset && hi == t->offset + t->numel;
      float* dest = b.data + (lo - b.begin);
      if (!inside) {
        whole.resize(size_t(t->numel));
        dest = whole.data();
      }
      pread_all(fd, dest, t->numel * kBytesPerElement, e->offset, fpath.string());
      const std::string got = checksum_hex(dest, t->numel);
      if (got != e->checksum)
        fail("tensor " + full + " in " + fpath.string() + " fails its checksum (manifest " +
             e->checksum + ", data " + got + "): the file is corrupt");
      if (!inside)
        std::copy(whole.begin() + (lo - t->offset), whole.begin() + (hi - t->offset),
                  b.data + (lo - b.begin));
    }
  }
  return state;
}

namespace {

// Complete checkpoints in run_dir, sorted by step (oldest first). A step_N.old (the copy
// publish() moves aside while it replaces a step saved before) stands for step N only
// when step_N itself is missing: a job killed between publish()'s two renames leaves it
// as the only complete copy of that step.
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::string& run_dir) {
  std::map<int64_t, fs::path> by_step;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return {};  // no run yet: no checkpoints
  fs::directory_iterator it(run_dir, ec);
  if (ec) fail("cannot list " + run_dir + ": " + ec.message());
  for (const fs::directory_entry& entry : it) {
    std::string name = entry.path().filename().string();
    const bool moved_aside = name.size() > 4 && name.compare(name.size() - 4, 4, ".old") == 0;
    if (moved_aside) name.resize(name.size() - 4);
    int64_t step = 0;
    if (!parse_step_dir_name(name, step)) continue;
    // No manifest means the directory is not a complete checkpoint (the manifest is
    // written last); skip it rather than resume from it.
    std::error_code entry_ec;
    if (!entry.is_directory(entry_ec) ||
        !fs::is_regular_file(entry.path() / "manifest.json", entry_ec))
      continue;
    if (moved_aside) by_step.emplace(step, entry.path());  // never displaces step_N
    else by_step[step] = entry.path();
  }
  return {by_step.begin(), by_step.end()};
}

// The step a checkpoint directory was written at, from its manifest.
int64_t checkpoint_step(const std::string& path) {
  const json manifest = read_manifest(path);
  const auto step = manifest.find("step");
  if (step == manifest.end() || !step->is_number_integer() || step->get<int64_t>() < 0)
    fail(path + "/manifest.json has no \"step\" that is an integer >= 0 (corrupt checkpoint manifest)");
  return step->get<int64_t>();
}

}  // namespace

std::string latest_checkpoint(const std::string& run_dir) {
  const auto found = complete_checkpoints(run_dir);
  return found.empty() ? std::string() : found.back().second.string();
}

void prune_checkpoints(const std::string& run_dir, int keep) {
  if (keep <= 0) return;
  const auto found = complete_checkpoints(run_dir);
  if (found.size() <= size_t(keep)) return;
  const size_t remove = found.size() - size_t(keep);
  for (size_t i = 0; i < remove; ++i) {
    std::error_code ec;
    fs::remove_all(found[i].second, ec);
    if (ec) fail("cannot remove old checkpoint " + found[i].second.string() + ": " + ec.message());
  }
}

namespace {

// The checkpoint `resume` names ("" for a fresh start) and the step the run starts from.
struct ResumeSource {
  std::string path;
  int64_t start = 0;
};
ResumeSource resume_source(const Config& cfg) {
  ResumeSource r{cfg.resume == "latest" ? latest_checkpoint(cfg.run_dir) : cfg.resume};
  if (!r.path.empty()) r.start = checkpoint_step(r.path);
  return r;
}

}  // namespace

std::string resolve_resume(const Config& cfg) {
  const auto [path, start] = resume_source(cfg);
  // `steps` counts from the start of the run, not from the resume. Below the checkpoint's
  // step it is a mistake (the run would train nothing and save the checkpoint again
  // under its step); 0 is the way to train nothing and only evaluate and sample.
  if (cfg.steps > 0 && cfg.steps < start)
    fail("steps=" + std::to_string(cfg.steps) + " is below step " + std::to_string(start) + " of the checkpoint " +
         path + " (steps counts from the start of the run, resumed runs included): set steps above " +
         std::to_string(start) + " to train on, or steps=0 to only evaluate and sample it");
  return path;
}

std::string set_aside_later_checkpoints(const Config& cfg) {
  if (!cfg.checkpoint_at_end && cfg.checkpoint_every == 0) return "";  // this run writes none
  const int64_t start = resume_source(cfg).start;
  std::vector<fs::path> later;
  for (const auto& [step, dir] : complete_checkpoints(cfg.run_dir))
    if (step > start) later.push_back(dir);
  if (later.empty()) return "";
  // A directory of its own, named by the time; never a step_ name, so no reader takes it
  // for a checkpoint of this run.
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
  fs::path aside = fs::path(cfg.run_dir) / (std::string("set_aside_") + stamp);
  for (int n = 2; fs::exists(aside); ++n) aside = fs::path(cfg.run_dir) / (std::string("set_aside_") + stamp + "-" + std::to_string(n));
  std::error_code ec;
  fs::create_directory(aside, ec);
  if (ec) fail("cannot create " + aside.string() + " to set earlier checkpoints aside: " + ec.message());
  for (const fs::path& dir : later) {
    fs::rename(dir, aside / dir.filename(), ec);  // same file system: atomic, nothing copied
    if (ec) fail("cannot move " + dir.string() + " into " + aside.string() + ": " + ec.message());
  }
  fsync_directory(cfg.run_dir);
  std::string line = "run_dir " + cfg.run_dir + " held " + std::to_string(later.size());
  line += " checkpoint(s) past step " + std::to_string(start);
  line += " (up to " + later.back().filename().string() + "), another run's: moved to ";
  line += aside.string() + " so that the two runs' checkpoints do not mix";
  return line;
}

CheckpointMirror::CheckpointMirror(std::vector<Entry> entries, int64_t begin)
    : entries_(std::move(entries)), begin_(begin) {
  for (Entry& e : entries_) {
    invariant((e.array == nullptr) != (e.array64 == nullptr), "CheckpointMirror: entry '" + e.kind +
                                                                   "' needs exactly one array");
    const size_t size = e.array64 ? e.array64->size() : e.array->size();
    invariant(e.offset <= size, "CheckpointMirror: entry '" + e.kind + "' starts past its array");
    e.count = std::min(e.count, size - e.offset);
    mirrors_.emplace_back(e.array64 || !e.array->on_host() ? e.count : 0);
  }
}

float* CheckpointMirror::host(const std::string& kind) {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].kind == kind)
      return mirrors_[i].empty() && entries_[i].array ? entries_[i].array->data() + entries_[i].offset
                                                      : mirrors_[i].data();
  internal_error("CheckpointMirror: no buffer of kind '" + kind + "'");
}

std::vector<CheckpointBuffer> CheckpointMirror::buffers() {
  std::vector<CheckpointBuffer> out;
  for (const Entry& e : entries_) out.push_back({e.kind, host(e.kind), begin_, begin_ + int64_t(e.count)});
  return out;
}

void CheckpointMirror::to_host() {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.array64) {
      std::vector<double> values(e.count);
      e.array64->copy_to_host(values.data(), values.size(), e.offset);
      for (size_t k = 0; k < values.size(); ++k) mirrors_[i][k] = float(values[k]);
    } else if (!e.array->on_host()) {
      e.array->copy_to_host(mirrors_[i].data(), e.count, e.offset);
    }
  }
}

void CheckpointMirror::to_device() {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.array64) {
      std::vector<double> values(mirrors_[i].begin(), mirrors_[i].end());
      e.array64->copy_from_host(values.data(), values.size(), e.offset);
    } else if (!e.array->on_host()) {
      e.array->copy_from_host(mirrors_[i].data(), e.count, e.offset);
    }
  }
}

CheckpointState load_checkpoint_sharded(Communicator& comm, const std::string& path, const ParamLayout& layout,
                                        const std::vector<CheckpointBuffer>& buffers) {
  CheckpointState state;
  agree(comm, attempt([&] { state = load_checkpoint(path, layout, buffers); }));
  return state;
}

}  // namespace gpt
