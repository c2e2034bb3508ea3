// A checkpoint's names (step_00000100, param.bin) and its manifest.json, read and
// checked: every failure is a UserError naming the file and what is wrong with it.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string_view>
#include <system_error>

#include "common/checkpoint_internal.h"
#include "common/files.h"
#include "common/json_input.h"

namespace gpt::checkpoint_detail {
namespace {

// A buffer kind becomes a file name, so keep it to a safe alphabet.
bool valid_kind(const std::string& kind) {
  return !kind.empty() && std::all_of(kind.begin(), kind.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

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
  // A step entry's name (common/files.h: at most 18 digits, no int64 overflow) without a suffix.
  if (name.ends_with(".tmp") || name.ends_with(".old") || !is_step_entry_name(name)) return false;
  step = std::stoll(name.substr(std::string_view("step_").size()));
  return true;
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
    if (b.end > b.begin && (b.data == nullptr) == (b.data64 == nullptr))
      throw std::invalid_argument("checkpoint buffer '" + b.kind + "' needs exactly one of data and data64");
  }
}

ordered_json model_json(const ModelConfig& m) {
  return ordered_json{{"n_layer", m.n_layer},       {"n_embd", m.n_embd},
              {"n_head", m.n_head},         {"block_size", m.block_size},
              {"vocab_size", m.vocab_size}, {"padded_vocab", m.padded_vocab()}};
}

// Reads and parses manifest.json; every failure names the file.
json read_manifest(const fs::path& dir) {
  const fs::path path = dir / "manifest.json";
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("checkpoint " + dir.string() + " does not exist");
  if (!fs::is_directory(dir, ec)) fail("checkpoint " + dir.string() + " is not a directory");
  // A save not yet published (or one a crash cut short): its files may be partial even
  // where a manifest is there, and publish() may still rename it. No reader takes one.
  fs::path named = dir.lexically_normal();
  if (!named.has_filename()) named = named.parent_path();  // "run/step_00000002.tmp/"
  if (named.filename().string().ends_with(".tmp"))
    fail(dir.string() + " is a checkpoint being written, or one whose save was cut short (.tmp): never read; "
         "give a complete step_N directory");
  if (!fs::is_regular_file(path, ec)) {
    const bool exists = fs::exists(fs::symlink_status(path, ec));
    // A run directory named in the place of one of its checkpoints: say which to give.
    if (const std::string latest = latest_checkpoint(dir.string()); !exists && !latest.empty())
      fail(dir.string() + " is a run directory, not a checkpoint: give one of its step_ directories (the "
           "latest is " + latest + "), or resume=latest with run_dir=" + dir.string());
    fail("checkpoint " + dir.string() + " is incomplete or not a checkpoint: " + path.string() +
         (exists ? " is not a regular file" : " is missing"));
  }
  Fd fd(::open(path.c_str(), O_RDONLY));
  if (fd.get() < 0) fail("cannot open " + path.string() + ": " + errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat " + path.string() + ": " + errno_text());
  std::string text(size_t(st.st_size), '\0');
  pread_all(fd.get(), text.data(), int64_t(text.size()), 0, path.string());
  json manifest;
  try {
    manifest = parse_json_input<json>(text, [&](const std::string& reason) {
      fail(path.string() + ": " + reason + " (corrupt checkpoint manifest)");
    });
  } catch (const json::exception& e) {
    fail(path.string() + " is not valid JSON (corrupt checkpoint manifest): " + json_reason(e));
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
  size_t index = 0;
  for (const json& row : manifest["tensors"]) {
    if (!row.is_object())
      fail(manifest_path + ": tensor row " + std::to_string(index) + " is " + row.dump() + ", not an object");
    ++index;
    const auto name_field = row.find("name");
    if (name_field == row.end() || !name_field->is_string() || name_field->get<std::string>().empty())
      fail(manifest_path + ": tensor row " + std::to_string(index - 1) + " has no name");
    const std::string name = name_field->get<std::string>();
    // A field that must be a string: its text, or a UserError naming the tensor and field.
    const auto text_field = [&](const char* field) {
      const auto value = row.find(field);
      if (value == row.end() || !value->is_string())
        fail(manifest_path + ": tensor " + name + " has " + field + " " +
             (value == row.end() ? std::string("(none)") : value->dump()) + ", not a string");
      return value->get<std::string>();
    };
    const std::string kind = name.substr(0, name.find('/'));
    if (name.find('/') == std::string::npos || (kind != "param" && kind != "adam_m" && kind != "adam_v"))
      fail(manifest_path + ": tensor " + name + " is not of a kind a checkpoint holds (param/, adam_m/ or adam_v/)");
    // The row's kind says it again; rows that disagree were edited or assembled from two.
    const auto row_kind = row.find("kind");
    if (row_kind == row.end() || !row_kind->is_string() || row_kind->get<std::string>() != kind)
      fail(manifest_path + ": tensor " + name + " has kind " + (row_kind == row.end() ? "(none)" : row_kind->dump()) +
           ", not \"" + kind + "\" as its name says");
    // Integers are read as integers: nlohmann would truncate 0.5 to 0 without a word.
    const json& offset = row.at("offset");
    bool integers = offset.is_number_integer() && row.at("shape").is_array();
    for (const json& d : row.at("shape")) integers = integers && d.is_number_integer();
    if (!integers)
      fail(manifest_path + ": tensor " + name + " has offset " + offset.dump() + " and shape " +
           row.at("shape").dump() + ": both must be integers");
    TableEntry e;
    e.shape = row.at("shape").get<std::vector<int64_t>>();
    e.file = text_field("file");
    e.offset = offset.get<int64_t>();
    if (row.contains("checksum") && row["checksum"].is_string())
      e.checksum = row["checksum"].get<std::string>();
    const std::string dtype = text_field("dtype");
    if (dtype != "fp32" && dtype != "fp64")
      fail(manifest_path + ": tensor " + name + " has dtype " + dtype + "; a checkpoint stores fp32 or fp64");
    e.element_bytes = dtype == "fp64" ? 8 : 4;
    // The file name comes from the manifest; refuse anything that is not a plain name
    // in the checkpoint directory.
    if (e.file.empty() || e.file.find('/') != std::string::npos || e.file == "." || e.file == "..")
      fail(manifest_path + ": tensor " + name + " names file '" + e.file +
           "', which is not a file of the checkpoint directory");
    if (e.offset < 0 || e.offset % e.element_bytes != 0)
      fail(manifest_path + ": tensor " + name + " has an invalid offset " + std::to_string(e.offset));
    // Where the tensor's bytes end in its file, counted without overflow: a shape or an
    // offset edited to a huge value is refused here, by name, before any size is computed.
    int64_t end = e.element_bytes;
    for (int64_t d : e.shape)
      if (d < 0 || __builtin_mul_overflow(end, d, &end))
        fail(manifest_path + ": tensor " + name + " has shape " + row.at("shape").dump() +
             ": a dimension is negative, or the tensor has more bytes than a file can hold");
    if (__builtin_add_overflow(end, e.offset, &end))
      fail(manifest_path + ": tensor " + name + " has offset " + std::to_string(e.offset) + " and shape " +
           row.at("shape").dump() + ": its bytes would end past the largest file size");
    if (!table.emplace(name, std::move(e)).second)
      fail(manifest_path + ": tensor " + name + " is listed twice");
  }
  return table;
}

}  // namespace gpt::checkpoint_detail

namespace gpt {

ModelConfig checkpoint_model(const std::string& path) {
  const checkpoint_detail::json manifest = checkpoint_detail::read_manifest(path);
  const std::string manifest_path = path + "/manifest.json";
  const auto saved = manifest.find("model");
  if (saved == manifest.end() || !saved->is_object()) fail(manifest_path + " has no \"model\" object");
  const auto field = [&](const char* name) {
    const auto v = saved->find(name);
    if (v == saved->end() || !v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > (1 << 30))
      fail(manifest_path + ": model." + name + " is missing or not a positive integer");
    return int(v->get<int64_t>());
  };
  ModelConfig m;
  m.n_layer = field("n_layer");
  m.n_embd = field("n_embd");
  m.n_head = field("n_head");
  m.block_size = field("block_size");
  m.vocab_size = field("vocab_size");
  return m;
}

std::string checkpoint_config_json(const std::string& path) {
  const checkpoint_detail::json manifest = checkpoint_detail::read_manifest(path);
  const auto saved = manifest.find("config");
  if (saved == manifest.end()) return "";
  if (!saved->is_object()) fail(path + "/manifest.json: \"config\" is not an object");
  return saved->dump();
}

}  // namespace gpt
