// Layout-independent checkpoints: save, load (any slice), find the newest, prune.
//
// What a checkpoint is (docs/checkpoints.md has the full description):
//
//   <run_dir>/step_00000100/
//     param.bin  adam_m.bin  adam_v.bin   one file per kind of buffer; each file is
//                                         the whole flat layout buffer, little-endian
//                                         fp32 (layout.total() * 4 bytes), or fp64
//                                         in the fp64 runs (* 8 bytes)
//     manifest.json                       written last: format, version, step, config,
//                                         model shape, layout, data position, RNG
//                                         counter and the tensor table (name, shape,
//                                         dtype, file, byte offset, checksum)
//
// Every tensor is stored whole, by name, so the way the run was split over ranks
// does not leak into the files. A rank that owns elements [begin, end) of the flat
// buffer writes (or reads) bytes [begin*4, end*4) of each fp32 file (*8 of an fp64 one);
// whether that slice is the whole buffer (stage 01) or a ZeRO shard (stage 03 on)
// makes no difference to the files, which is what lets any layout resume any
// checkpoint.
//
// Atomicity. The directory is filled under the name step_00000100.tmp; the data
// files and then the manifest are fsync'ed, and only then is the directory renamed
// to its final name. rename() is atomic on POSIX file systems, so a reader sees
// either no step_00000100 at all or a complete one; a crash leaves at worst a stale
// .tmp directory, which latest_checkpoint() ignores and the next save of that step
// replaces. (A save that fails with an error, a disk full say, removes its own .tmp at
// once, so that the space it took is free for whatever the user does next.)
//
// This file saves and loads; the helpers it shares with the other checkpoint*.cpp
// files are listed in checkpoint_internal.h.
#include "common/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/checkpoint_internal.h"
#include "common/comm.h"
#include "common/data.h"
#include "common/finite.h"
#include "common/json_input.h"

namespace gpt {
using namespace checkpoint_detail;
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

// Removes the .tmp directory when a save ends without publishing it (an exception
// unwinding through the save); does nothing once the save has published.
class TmpDirCleanup {
 public:
  explicit TmpDirCleanup(const CheckpointPaths& p) : tmp_dir_(p.tmp_dir) {}
  ~TmpDirCleanup() {
    std::error_code ec;
    if (!published_) fs::remove_all(tmp_dir_, ec);  // best effort: the save's own error is the one reported
  }
  TmpDirCleanup(const TmpDirCleanup&) = delete;
  TmpDirCleanup& operator=(const TmpDirCleanup&) = delete;
  void published() { published_ = true; }

 private:
  fs::path tmp_dir_;
  bool published_ = false;
};

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
  pwrite_all(fd.get(), b.bytes_at(b.begin), (b.end - b.begin) * b.element_bytes(), b.begin * b.element_bytes(),
             path.string());
  if (::fsync(fd.get()) != 0) fail("cannot fsync " + path.string() + ": " + errno_text());
  fd.close_or_fail(path.string());
}

// Step 3a: the tensor table's rows for buffer b's kind, in the layout's order, in b's
// type. checksum(t) gives a row's checksum: its hex string, or null where the writer
// cannot compute it.
template <class ChecksumOf>
void append_tensor_rows(ordered_json& tensors, const CheckpointBuffer& b, const ParamLayout& layout,
                        ChecksumOf&& checksum) {
  const std::string file = file_for_kind(b.kind);
  for (const ParamTensor& t : layout.tensors()) {
    ordered_json row = {{"name", b.kind + "/" + t.name},
                        {"kind", b.kind},
                        {"shape", t.shape},
                        {"dtype", b.dtype()},
                        {"file", file},
                        {"offset", t.offset * b.element_bytes()}};
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

// The data position: the step, the training sequences consumed, and the tokens of the
// training data they were cut from (the order of the sequences depends on that count,
// data.h; a resume on other data is told so, start_notes). Where train_data cannot be
// read (a checkpoint written outside a training run) the count is left out.
ordered_json data_position(const Config& cfg, const CheckpointState& state) {
  ordered_json position = {{"step", state.step}, {"sequences", state.sequences(cfg.batch_size)}};
  try {
    position["train_tokens"] = stream_tokens(cfg.train_data);
  } catch (const UserError&) {
  }
  return position;
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
      // docs/architecture.md), so the training sequences consumed are the global data
      // position, whatever the layout; the step is repeated as a check.
      {"data_position", data_position(cfg, state)},
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
// Reading: a tensor's values, checked, then stored in the buffer's type.

// A checksum proves the bytes are the ones written, not that they are numbers: a
// converted model or a hand-made checkpoint can hold NaN.
template <class T>
void check_values(const T* values, int64_t n, const std::string& kind, const std::string& what) {
  require_finite(values, n, what, "a model converted or written by hand, or a run that diverged");
  if (kind == "adam_v") require_not_negative(values, n, what);
}

// n values of a tensor (from its element `first` on) into buffer b at flat element `at`,
// in b's type: fp32 into doubles is exact; fp64 into floats rounds to nearest, and a
// value beyond fp32's range (it would become an infinity) is refused.
template <class From>
void store(const From* from, int64_t n, const CheckpointBuffer& b, int64_t at, const std::string& what,
           int64_t first) {
  if (b.fp64()) {
    std::copy(from, from + n, b.data64 + (at - b.begin));
    return;
  }
  float* to = b.data + (at - b.begin);
  for (int64_t i = 0; i < n; ++i) {
    to[i] = float(from[i]);
    if (std::isinf(to[i]))
      fail(what + " holds " + number_text(double(from[i])) + " at element " + std::to_string(first + i) +
           ", beyond fp32's range: it cannot be loaded into fp32 weights");
  }
}

// Whether v is a whole number >= 0 that fits int64. JSON's -0 counts: nlohmann reads it
// as a signed 0, which is_number_unsigned() would refuse while printing it as "0".
bool is_count(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max());
  return v.is_number_integer() && v.get<int64_t>() >= 0;
}

// The data position a manifest records: data_position.sequences; in a checkpoint written
// before that was recorded, step x its config's batch_size (each step read one batch);
// -1 where neither is there. A count is at most 2^62: far past any run (a billion
// sequences a second for a century is 2^62), and far enough below int64's end that the
// steps after it cannot overflow it.
int64_t recorded_sequences(const json& manifest, const std::string& manifest_path, int64_t step) {
  constexpr int64_t kMostSequences = int64_t(1) << 62;
  const json& position = manifest.at("data_position");
  if (const auto recorded = position.find("sequences"); recorded != position.end()) {
    const std::string what = manifest_path + " has data_position.sequences " + recorded->dump();
    if (!recorded->is_number_integer() || recorded->get<int64_t>() < 0 || recorded->get<int64_t>() > kMostSequences)
      fail(what + ": a count of sequences is an integer in [0, 2^62]");
    const int64_t sequences = recorded->get<int64_t>();
    if (step == 0 ? sequences != 0 : sequences < step)
      fail(what + " at step " + std::to_string(step) + ": each step reads at least one sequence, and step 0 none");
    return sequences;
  }
  const auto config = manifest.find("config");
  if (config == manifest.end() || !config->is_object()) return -1;
  const auto batch = config->find("batch_size");
  if (batch == config->end() || !batch->is_number_integer() || batch->get<int64_t>() < 1) return -1;
  if (step > kMostSequences / batch->get<int64_t>())
    fail(manifest_path + " has step " + std::to_string(step) + " and batch_size " + batch->dump() +
         ": more than 2^62 sequences read");
  return step * batch->get<int64_t>();
}

// Weights that are not numbers are never saved. An update that overflowed (too high an
// lr) would otherwise be published as the newest checkpoint, and the pruning after it
// would delete the good ones before it: nothing would be left to resume, since
// load_checkpoint refuses such values (check_values). save_checkpoint checks the buffers
// before it writes; save_checkpoint_sharded checks the files as rank 0 reads them back
// for their checksums, before it publishes.

// The UserError for `value` at flat element `at` of the `kind` buffer, naming its tensor
// when `layout` is the buffer's.
[[noreturn]] void refuse_not_finite(const ParamLayout* layout, const std::string& kind, int64_t at, double value,
                                    int64_t step) {
  std::string where = kind + " element " + std::to_string(at);
  if (layout)
    for (const ParamTensor& t : layout->tensors())
      if (at >= t.offset && at < t.offset + t.numel)
        where = kind + "/" + t.name + " element " + std::to_string(at - t.offset) + " of " + std::to_string(t.numel);
  fail("step " + std::to_string(step) + ": " + where + " is " + number_text(value) +
       ": the run has diverged (lower lr?); no checkpoint is written of it, and the checkpoints before it are kept");
}

// values[0..n), the elements from flat element `first` of the `kind` buffer, as T.
template <class T>
void check_numbers(const ParamLayout* layout, const std::string& kind, const T* values, int64_t n, int64_t first,
                   int64_t step) {
  if (const int64_t i = first_not_finite(values, n); i < n)
    refuse_not_finite(layout, kind, first + i, double(values[i]), step);
}

}  // namespace

void check_saveable(const ParamLayout* layout, const std::vector<CheckpointBuffer>& buffers, int64_t step) {
  for (const CheckpointBuffer& b : buffers) {
    if (b.fp64()) check_numbers(layout, b.kind, b.data64, b.end - b.begin, b.begin, step);
    else check_numbers(layout, b.kind, b.data, b.end - b.begin, b.begin, step);
  }
}

void check_saveable(Communicator& comm, const ParamLayout* layout, const std::vector<CheckpointBuffer>& buffers,
                    int64_t step) {
  agree(comm, attempt([&] { check_saveable(layout, buffers, step); }));
}

std::string save_checkpoint(const std::string& run_dir, const Config& cfg,
                            const ParamLayout& layout, const CheckpointState& state,
                            const std::vector<CheckpointBuffer>& buffers) {
  check_buffers(layout, buffers);
  check_saveable(&layout, buffers, state.step);
  const CheckpointPaths p = checkpoint_paths(run_dir, state.step);
  make_fresh_tmp_dir(p);
  TmpDirCleanup cleanup(p);

  ordered_json tensors = ordered_json::array();
  for (const CheckpointBuffer& b : buffers) {
    // The file always has the whole buffer's size, whichever slice this writer holds.
    const fs::path path = p.tmp_dir / file_for_kind(b.kind);
    create_kind_file(path, layout.total() * b.element_bytes());
    write_slice(path, b);
    // We can only checksum what we hold: a tensor cut by this slice's edge (or outside
    // it) gets null. Stage 01 holds the whole buffer, so every row has its checksum;
    // sharded runs use save_checkpoint_sharded, which checksums the assembled files.
    append_tensor_rows(tensors, b, layout, [&](const ParamTensor& t) -> ordered_json {
      if (t.offset >= b.begin && t.offset + t.numel <= b.end)
        return checksum_hex(b.bytes_at(t.offset), t.numel * b.element_bytes());
      return nullptr;
    });
  }

  write_manifest(p, cfg, layout, state, parse_layout_json(state.layout_json), tensors);
  publish(p);
  cleanup.published();
  return p.final_dir.string();
}

std::string save_checkpoint_sharded(Communicator& comm, const std::string& run_dir,
                                    const Config& cfg, const ParamLayout& layout,
                                    const CheckpointState& state,
                                    const std::vector<CheckpointBuffer>& buffers) {
  const bool writer = comm.rank() == 0;  // rank 0 creates, checksums and publishes
  const CheckpointPaths p = checkpoint_paths(run_dir, state.step);
  auto file_bytes = [&](const CheckpointBuffer& b) { return layout.total() * b.element_bytes(); };

  // 0. The arguments, checked on every rank before anything touches the disk.
  ordered_json layout_json;
  agree(comm, attempt([&] {
    check_buffers(layout, buffers);
    layout_json = parse_layout_json(state.layout_json);
  }));
  check_same_kinds(comm, buffers);
  check_tiling(comm, layout, buffers);

  // Rank 0 removes the .tmp directory if any step below fails on any rank: agree()
  // throws on every rank, after all of them have left the step.
  std::optional<TmpDirCleanup> cleanup;
  if (writer) cleanup.emplace(p);

  // 1. Rank 0 makes the .tmp directory and every file at its full size, so that the
  // other ranks only open existing files and write into them: no rank ever has to
  // guess whether another has created a file yet.
  agree(comm, attempt([&] {
    if (!writer) return;
    make_fresh_tmp_dir(p);
    for (const CheckpointBuffer& b : buffers) create_kind_file(p.tmp_dir / file_for_kind(b.kind), file_bytes(b));
  }));

  // 2. Every rank writes its slices, in parallel, each at its own offset, and fsyncs
  // them: when the next agreement completes, every byte of every file is on disk.
  agree(comm, attempt([&] {
    for (const CheckpointBuffer& b : buffers) write_slice(p.tmp_dir / file_for_kind(b.kind), b);
  }));

  // 3. Rank 0 checksums every tensor from the files (the only place where a tensor
  // cut between ranks is whole), refusing values that are not numbers as it reads them,
  // writes the manifest and publishes. Reading the bytes back rather than gathering the
  // ranks' own checksums also checks what really reached the disk. Rank 0 reads each
  // file once, tensor by tensor.
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
      if (int64_t(st.st_size) != file_bytes(b))
        fail(path.string() + " is " + std::to_string(st.st_size) + " bytes after the ranks wrote it, not " +
             std::to_string(file_bytes(b)));
      append_tensor_rows(tensors, b, layout, [&](const ParamTensor& t) -> ordered_json {
        int64_t first = t.offset;  // the flat element the next piece starts at
        const auto check_piece = [&](const char* piece, int64_t bytes) {
          const int64_t n = bytes / b.element_bytes();
          if (b.fp64()) check_numbers(&layout, b.kind, reinterpret_cast<const double*>(piece), n, first, state.step);
          else check_numbers(&layout, b.kind, reinterpret_cast<const float*>(piece), n, first, state.step);
          first += n;
        };
        return checksum_hex_in_file(fd.get(), t.offset * b.element_bytes(), t.numel * b.element_bytes(),
                                    path.string(), check_piece);
      });
      fd.close_or_fail(path.string());
    }
    write_manifest(p, cfg, layout, state, layout_json, tensors);
    publish(p);
    cleanup->published();
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
    // Integers are read as integers: nlohmann would truncate 1.9 to 1 without a word.
    const json version = manifest.value("version", json());
    if (!version.is_number_integer() || version.get<int64_t>() != kVersion)
      fail(manifest_path + " has version " + version.dump() + "; this build reads version " +
           std::to_string(kVersion));
    check_model(manifest, layout.model(), manifest_path);
    if (!manifest.at("step").is_number_integer())
      fail(manifest_path + " has step " + manifest.at("step").dump() + ": a step count is an integer");
    state.step = manifest.at("step").get<int64_t>();
    if (state.step < 0) fail(manifest_path + " has step " + std::to_string(state.step) + ": a step count is >= 0");
    // The data stream's position is the step (every layout reads the same sequences for a
    // step): another value means the manifest was edited or assembled from two. It is held
    // to the step's rules too: nlohmann's == finds 2.0 equal to 2.
    const json& position = manifest.at("data_position");
    if (!position.is_object())
      fail(manifest_path + " has a data_position of type " + position.type_name() +
           ": the data position is an object with the keys step and sequences");
    const json& position_step = position.at("step");
    if (!position_step.is_number_integer() || position_step != manifest.at("step"))
      fail(manifest_path + " has data_position.step " + position_step.dump() + " but step " +
           std::to_string(state.step) + ": they are the same position, an integer");
    state.resumed_from = path;
    state.resumed_step = state.step;
    state.resumed_sequences = recorded_sequences(manifest, manifest_path, state.step);
    // data_position.train_tokens, the training data's size when saved, is only compared
    // with the data of a resumed run (start_notes), and may be absent; one that is not a
    // count was edited, and would make that comparison say nothing.
    if (const auto tokens = position.find("train_tokens"); tokens != position.end() && !is_count(*tokens))
      fail(manifest_path + " has data_position.train_tokens " + tokens->dump() +
           ": a count of tokens is an integer in [0, 2^63)");
    if (!manifest.at("sample_counter").is_number_unsigned() && !is_count(manifest.at("sample_counter")))
      fail(manifest_path + " has sample_counter " + manifest.at("sample_counter").dump() +
           ": a counter is an integer >= 0");
    state.sample_counter = manifest.at("sample_counter").get<uint64_t>();
    // The layout is a record of the mesh that wrote the checkpoint, which loading does
    // not need; a record that no longer says that was edited, and is refused.
    const json& recorded = manifest.at("layout");
    if (!recorded.is_object())
      fail(manifest_path + " has layout " + recorded.dump() + ": the mesh that wrote a checkpoint is an object");
    for (const char* axis : {"dp", "tp", "pp", "cp"})
      if (const auto size = recorded.find(axis); size != recorded.end() && !(size->is_number_integer() && *size >= 1))
        fail(manifest_path + " has layout." + axis + " " + size->dump() + ": a mesh axis is an integer >= 1");
    state.layout_json = recorded.dump();
    table = read_table(manifest, manifest_path);
  } catch (const json::exception& e) {
    fail(manifest_path + " is malformed: " + json_reason(e));
  }

  // Every row must be a tensor of this model: an extra one (a table assembled by hand, or
  // from another model) would be read by nothing, and the checkpoint taken for whole.
  std::set<std::string> model_tensors;
  for (const ParamTensor& t : layout.tensors()) model_tensors.insert(t.name);
  for (const auto& [name, e] : table) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || !model_tensors.count(name.substr(slash + 1)))
      fail(manifest_path + ": tensor " + name + " is not a tensor of the model (" + layout.tensors().front().name +
           ", ...): the checkpoint is of another model, or its table was edited");
  }

  // Each file must be exactly as long as the tensors the table puts in it: shorter
  // is a truncated copy, longer is a file from somewhere else. And it holds one type.
  std::map<std::string, int64_t> file_size;
  std::map<std::string, std::pair<std::string, int64_t>> file_type;  // a tensor of the file, its element bytes
  for (const auto& [name, e] : table) {
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    file_size[e.file] = std::max(file_size[e.file], e.offset + numel * e.element_bytes);
    const auto [first, fresh] = file_type.emplace(e.file, std::pair{name, e.element_bytes});
    if (!fresh && first->second.second != e.element_bytes)
      fail(manifest_path + ": " + e.file + " holds tensors of two dtypes (" + first->second.first + " and " + name +
           "): a checkpoint file holds one");
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
      // O_NONBLOCK: a FIFO in a file's place must not block the open (the check below
      // refuses it); on a regular file the flag changes nothing.
      fd = std::make_unique<Fd>(::open(fpath.c_str(), O_RDONLY | O_NONBLOCK));
      if (fd->get() < 0) fail("checkpoint file " + fpath.string() + " is missing: " + errno_text());
      struct stat st {};
      if (::fstat(fd->get(), &st) != 0) fail("cannot stat " + fpath.string() + ": " + errno_text());
      if (!S_ISREG(st.st_mode))
        fail("checkpoint file " + fpath.string() + " is not a regular file (a directory, a pipe?)");
      if (int64_t(st.st_size) != file_size[file])
        fail("checkpoint file " + fpath.string() + " is " + std::to_string(st.st_size) +
             " bytes but the manifest needs " + std::to_string(file_size[file]) +
             " (truncated or from another checkpoint)");
      return fd->get();
    };

    std::vector<float> whole32;  // scratch for a tensor read whole, in the file's type
    std::vector<double> whole64;
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
      // value a rank loads has been checked. The bytes go straight into the buffer when
      // it holds the whole tensor in the file's type; otherwise they are converted.
      const bool inside = lo == t->offset && hi == t->offset + t->numel;
      const bool direct = inside && e->element_bytes == b.element_bytes();
      const int64_t bytes = t->numel * e->element_bytes;
      char* raw = b.bytes_at(lo);
      if (!direct && e->element_bytes == 8) {
        whole64.resize(size_t(t->numel));
        raw = reinterpret_cast<char*>(whole64.data());
      } else if (!direct) {
        whole32.resize(size_t(t->numel));
        raw = reinterpret_cast<char*>(whole32.data());
      }
      pread_all(fd, raw, bytes, e->offset, fpath.string());
      const std::string got = checksum_hex(raw, bytes);
      if (got != e->checksum)
        fail("tensor " + full + " in " + fpath.string() + " fails its checksum (manifest " +
             e->checksum + ", data " + got + "): the file is corrupt");
      const std::string what = "tensor " + full + " in " + fpath.string();
      const auto check_and_store = [&](const auto* values) {  // the file's values, as floats or doubles
        check_values(values, t->numel, b.kind, what);
        if (!direct) store(values + (lo - t->offset), hi - lo, b, lo, what, lo - t->offset);
      };
      if (e->element_bytes == 8) check_and_store(reinterpret_cast<const double*>(raw));
      else check_and_store(reinterpret_cast<const float*>(raw));
    }
  }
  return state;
}

std::string save_checkpoint_by_lead(Communicator& comm, const std::string& run_dir, const Config& cfg,
                                    const ParamLayout& layout, const CheckpointState& state,
                                    const std::vector<CheckpointBuffer>& buffers) {
  std::string path;
  agree(comm, attempt([&] {
    if (comm.rank() == 0) path = save_checkpoint(run_dir, cfg, layout, state, buffers);
  }));
  return path;
}

CheckpointState load_checkpoint_sharded(Communicator& comm, const std::string& path, const ParamLayout& layout,
                                        const std::vector<CheckpointBuffer>& buffers) {
  CheckpointState state;
  agree(comm, attempt([&] { state = load_checkpoint(path, layout, buffers); }));
  return state;
}

}  // namespace gpt
