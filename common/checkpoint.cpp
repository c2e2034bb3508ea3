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
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

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

std::string checksum_hex(const float* data, int64_t numel) {
  Fnv1a64 f;
  f.update(data, size_t(numel * kBytesPerElement));
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, f.h);
  return text;
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
// replaced) do not match, so they are never mistaken for complete checkpoints.
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

std::string save_checkpoint(const std::string& run_dir, const Config& cfg,
                            const ParamLayout& layout, const CheckpointState& state,
                            const std::vector<CheckpointBuffer>& buffers) {
  check_buffers(layout, buffers);
  const fs::path root(run_dir);
  const std::string name = step_dir_name(state.step);
  const fs::path final_dir = root / name;
  const fs::path tmp_dir = root / (name + ".tmp");

  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) fail("cannot create run directory " + root.string() + ": " + ec.message());
  // A .tmp left by a crash is incomplete by definition: start over.
  fs::remove_all(tmp_dir, ec);
  if (ec) fail("cannot remove stale " + tmp_dir.string() + ": " + ec.message());
  fs::create_directory(tmp_dir, ec);
  if (ec) fail("cannot create " + tmp_dir.string() + ": " + ec.message());

  ordered_json tensors = ordered_json::array();
  const int64_t file_bytes = layout.total() * kBytesPerElement;
  for (const CheckpointBuffer& b : buffers) {
    const std::string file = file_for_kind(b.kind);
    const fs::path path = tmp_dir / file;
    {
      Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT, 0644));
      if (fd.get() < 0) fail("cannot create " + path.string() + ": " + errno_text());
      // The file always has the whole buffer's size, whichever slice this rank holds;
      // ftruncate only sets the length (ranks may do it concurrently, to one value).
      if (::ftruncate(fd.get(), off_t(file_bytes)) != 0)
        fail("cannot size " + path.string() + ": " + errno_text());
      pwrite_all(fd.get(), b.data, (b.end - b.begin) * kBytesPerElement, b.begin * kBytesPerElement,
                 path.string());
      if (::fsync(fd.get()) != 0) fail("cannot fsync " + path.string() + ": " + errno_text());
      fd.close_or_fail(path.string());
    }
    for (const ParamTensor& t : layout.tensors()) {
      ordered_json row = {{"name", b.kind + "/" + t.name},
                  {"kind", b.kind},
                  {"shape", t.shape},
                  {"dtype", "fp32"},
                  {"file", file},
                  {"offset", t.offset * kBytesPerElement}};
      // We can only checksum what we hold. A tensor cut by this slice's edge (or
      // outside it) gets null here; a multi-rank writer gathers the other ranks'
      // checksums and fills them in before the manifest is written. Stage 01 holds
      // the whole buffer, so every row has its checksum.
      if (t.offset >= b.begin && t.offset + t.numel <= b.end)
        row["checksum"] = checksum_hex(b.data + (t.offset - b.begin), t.numel);
      else
        row["checksum"] = nullptr;
      tensors.push_back(std::move(row));
    }
  }

  ordered_json layout_json = ordered_json::parse(state.layout_json, nullptr, /*allow_exceptions=*/false);
  if (layout_json.is_discarded())
    throw std::invalid_argument("CheckpointState::layout_json is not JSON: " + state.layout_json);

  const ordered_json manifest = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"sample_counter", state.sample_counter},
      {"layout", layout_json},
      // The data loader hands every layout the same sequences for a step (DESIGN
      // rule 8), so the number of completed steps is the global data position.
      {"data_position", {{"step", state.step}}},
      {"config", ordered_json::parse(config_to_json(cfg))},
      {"model", model_json(layout.model())},
      {"tensors", tensors},
  };
  // The manifest goes last: its presence is what marks the data files complete.
  write_text_file(tmp_dir / "manifest.json", manifest.dump(2) + "\n");
  fsync_directory(tmp_dir);

  // Publish. If this step was saved before (a rerun of the same step), move the old
  // copy aside first: rename() cannot replace a non-empty directory.
  if (fs::exists(final_dir, ec)) {
    const fs::path old_dir = root / (name + ".old");
    fs::remove_all(old_dir, ec);
    fs::rename(final_dir, old_dir, ec);
    if (ec) fail("cannot move aside " + final_dir.string() + ": " + ec.message());
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) fail("cannot rename " + tmp_dir.string() + " to " + final_dir.string() + ": " + ec.message());
    fs::remove_all(old_dir, ec);
    if (ec) fail("cannot remove " + old_dir.string() + ": " + ec.message());
  } else {
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) fail("cannot rename " + tmp_dir.string() + " to " + final_dir.string() + ": " + ec.message());
  }
  fsync_directory(root);
  return final_dir.string();
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

// Complete checkpoints in run_dir, sorted by step (oldest first).
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return found;  // no run yet: no checkpoints
  fs::directory_iterator it(run_dir, ec);
  if (ec) fail("cannot list " + run_dir + ": " + ec.message());
  for (const fs::directory_entry& entry : it) {
    int64_t step = 0;
    if (!parse_step_dir_name(entry.path().filename().string(), step)) continue;
    // No manifest means the directory is not a complete checkpoint (the manifest is
    // written last); skip it rather than resume from it.
    std::error_code entry_ec;
    if (!entry.is_directory(entry_ec) ||
        !fs::is_regular_file(entry.path() / "manifest.json", entry_ec))
      continue;
    found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
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

}  // namespace gpt
