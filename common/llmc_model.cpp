// llm.c's model file to and from this project's parameter layout (the format is drawn
// in llmc_model.h). The file holds one array per kind of tensor, layer after layer;
// the layout holds one layer's tensors together. So both directions walk the file's 16
// arrays in order and, for each layer, copy one tensor of the layout.
#include "common/llmc_model.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "common/error.h"
#include "common/finite.h"
#include "kernels/cpu/bf16.h"

namespace gpt {
namespace {

static_assert(std::endian::native == std::endian::little, "llm.c's files are little-endian");

constexpr int32_t kLlmcMagic = 20240326;
constexpr int64_t kHeaderBytes = 256 * 4;

// The file's 16 arrays in their order, each named by the layout's tensor it holds:
// "h.*." stands for every layer in turn, the others are one tensor.
constexpr const char* kFileArrays[16] = {
    "wte",                    "wpe",                    "h.*.ln_1.weight",        "h.*.ln_1.bias",
    "h.*.attn.c_attn.weight", "h.*.attn.c_attn.bias",   "h.*.attn.c_proj.weight", "h.*.attn.c_proj.bias",
    "h.*.ln_2.weight",        "h.*.ln_2.bias",          "h.*.mlp.c_fc.weight",    "h.*.mlp.c_fc.bias",
    "h.*.mlp.c_proj.weight",  "h.*.mlp.c_proj.bias",    "ln_f.weight",            "ln_f.bias"};

// One tensor's place in the file and in the layout. For wte the file may have other
// padding rows than the layout: `count` is the elements both hold (the real vocabulary's
// rows), `file_count` what the file holds.
struct Piece {
  int64_t file_offset;  // elements after the header
  int64_t file_count;
  const ParamTensor* tensor;
  int64_t count;
};

// The file's pieces in file order, for a layout of the whole model and a file whose wte
// has `file_vocab_rows` rows.
std::vector<Piece> file_pieces(const ParamLayout& layout, int64_t file_vocab_rows) {
  const ModelConfig& m = layout.model();
  std::vector<Piece> pieces;
  int64_t at = 0;
  for (const std::string array : kFileArrays) {
    const bool per_layer = array.rfind("h.*.", 0) == 0;
    for (int l = 0; l < (per_layer ? m.n_layer : 1); ++l) {
      const std::string name = per_layer ? "h." + std::to_string(l) + "." + array.substr(4) : array;
      const ParamTensor& t = layout.find(name);
      Piece p{at, t.numel, &t, t.numel};
      if (name == "wte") {
        p.file_count = file_vocab_rows * m.n_embd;
        p.count = int64_t(m.vocab_size) * m.n_embd;
      }
      pieces.push_back(p);
      at += p.file_count;
    }
  }
  return pieces;
}

int64_t bytes_per_value(int version) { return version == 5 ? 2 : 4; }

std::string shape_text(const ModelConfig& m) {
  return "n_layer=" + std::to_string(m.n_layer) + ", n_head=" + std::to_string(m.n_head) +
         ", n_embd=" + std::to_string(m.n_embd) + ", vocab_size=" + std::to_string(m.vocab_size) +
         ", max_seq_len=" + std::to_string(m.block_size);
}

}  // namespace

LlmcHeader read_llmc_header(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(path + ": no such file (an llm.c model file was expected)");
  if (!std::filesystem::is_regular_file(path, ec)) fail(path + ": not a regular file (an llm.c model file was expected)");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path + ": cannot open: " + std::strerror(errno));
  int32_t h[256] = {};
  f.read(reinterpret_cast<char*>(h), kHeaderBytes);
  if (f.gcount() != kHeaderBytes)
    fail(path + ": shorter than the 1024-byte header of an llm.c model file");
  if (h[0] != kLlmcMagic)
    fail(path + ": magic number " + std::to_string(h[0]) + ", not llm.c's model file magic " +
         std::to_string(kLlmcMagic) + " (a token shard has 20240520; a checkpoint of this project is a directory)");
  if (h[1] != 1 && h[1] != 3 && h[1] != 5)
    fail(path + ": version " + std::to_string(h[1]) + "; this reads llm.c model files of version 1 or 3 (fp32) "
         "and 5 (bf16)");
  LlmcHeader out;
  out.version = h[1];
  out.model.block_size = h[2];
  out.model.vocab_size = h[3];
  out.model.n_layer = h[4];
  out.model.n_head = h[5];
  out.model.n_embd = h[6];
  out.file_padded_vocab = out.version == 1 ? h[3] : h[7];
  const ModelConfig& m = out.model;
  if (m.block_size <= 0 || m.vocab_size <= 0 || m.n_layer <= 0 || m.n_head <= 0 || m.n_embd <= 0)
    fail(path + ": header with a size that is not positive (" + shape_text(m) + ")");
  if (m.n_embd % m.n_head != 0)
    fail(path + ": n_head=" + std::to_string(m.n_head) + " does not divide n_embd=" + std::to_string(m.n_embd));
  if (out.file_padded_vocab < m.vocab_size)
    fail(path + ": padded_vocab=" + std::to_string(out.file_padded_vocab) + " is below vocab_size=" +
         std::to_string(m.vocab_size));

  // The values the shape needs, in double: a corrupt header's huge sizes cannot
  // overflow, and the file's size, exact in a double, then tells them apart.
  const double values = gpt2_param_count(m, out.file_padded_vocab);
  const double want = double(kHeaderBytes) + values * double(bytes_per_value(out.version));
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) fail(path + ": cannot read its size: " + ec.message());
  if (double(size) != want) {
    char needs[32];
    std::snprintf(needs, sizeof needs, "%.0f", want);
    fail(path + ": " + std::to_string(size) + " bytes, but its header (" + shape_text(m) + ", version " +
         std::to_string(out.version) + ") needs " + needs + ": the file is truncated or not that model");
  }
  return out;
}

std::vector<float> read_llmc_model(const std::string& path, const ParamLayout& layout) {
  const LlmcHeader header = read_llmc_header(path);
  if (!(header.model == layout.model()))
    fail(path + " holds a model of " + shape_text(header.model) + ", not the " + shape_text(layout.model()) +
         " asked for");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path + ": cannot open: " + std::strerror(errno));
  std::vector<float> params(size_t(layout.total()), 0.0f);  // wte's padding rows stay zero
  const int64_t width = bytes_per_value(header.version);
  std::vector<uint16_t> halves;
  for (const Piece& p : file_pieces(layout, header.file_padded_vocab)) {
    f.seekg(std::streamoff(kHeaderBytes + p.file_offset * width));
    float* dst = params.data() + p.tensor->offset;
    if (width == 4) {
      f.read(reinterpret_cast<char*>(dst), std::streamsize(p.count * 4));
    } else {
      halves.resize(size_t(p.count));
      f.read(reinterpret_cast<char*>(halves.data()), std::streamsize(p.count * 2));
      for (int64_t i = 0; i < p.count; ++i) dst[i] = cpu::bf16_to_float(halves[size_t(i)]);
    }
    if (!f) fail(path + ": cannot read " + p.tensor->name + " (the file changed while it was read?)");
    require_finite(dst, p.count, path + ": tensor " + p.tensor->name, "a model that diverged or a broken converter");
  }
  return params;
}

void write_llmc_model(const std::string& path, const ParamLayout& layout, const float* params, int version) {
  require(version == 3 || version == 5, "llm.c model file version " + std::to_string(version) +
                                            ": this writes 3 (fp32) or 5 (bf16)");
  require(!path.empty() && path.back() != '/', "llm.c model file '" + path + "': name a file to write");
  const ModelConfig& m = layout.model();
  // Everything that allocates comes before the file exists, so that the only way out
  // after it is give_up(), which removes it.
  const std::vector<Piece> pieces = file_pieces(layout, m.padded_vocab());
  int64_t largest = 0;
  for (const Piece& p : pieces) largest = std::max(largest, p.file_count);
  std::vector<uint16_t> halves(version == 5 ? size_t(largest) : 0);
  // A temporary name of our own ("x": created here, never a file that was there), linked
  // to `path` once complete; on any failure it is removed, so no half file is left.
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wbx");
  if (!f)
    fail(path + ": cannot create " + tmp + ": " + std::strerror(errno) +
         (errno == EEXIST ? " (left by an earlier export? remove it)" : ""));
  const auto give_up = [&](const std::string& why) {
    std::fclose(f);
    std::remove(tmp.c_str());
    fail(path + ": cannot write " + tmp + ": " + why);
  };
  const auto put = [&](const void* data, size_t bytes) {
    if (std::fwrite(data, 1, bytes, f) != bytes) give_up(std::strerror(errno));
  };
  int32_t h[256] = {};
  h[0] = kLlmcMagic;
  h[1] = version;
  h[2] = m.block_size;
  h[3] = m.vocab_size;
  h[4] = m.n_layer;
  h[5] = m.n_head;
  h[6] = m.n_embd;
  h[7] = m.padded_vocab();
  put(h, kHeaderBytes);
  for (const Piece& p : pieces) {
    // The whole tensor, wte's padding rows included (zero here, as llm.c keeps them).
    const float* src = params + p.tensor->offset;
    if (version == 3) {
      put(src, size_t(p.file_count) * 4);
    } else {
      for (int64_t i = 0; i < p.file_count; ++i) halves[size_t(i)] = cpu::bf16_bits(src[i]);
      put(halves.data(), size_t(p.file_count) * 2);
    }
  }
  if (std::fflush(f) != 0) give_up(std::strerror(errno));
  if (std::fclose(f) != 0) {  // a failed close can mean lost data
    std::remove(tmp.c_str());
    fail(path + ": cannot write " + tmp + ": " + std::strerror(errno));
  }
  // link() refuses a name that exists (where rename() would replace it), so a file made at
  // `path` since the caller looked is never overwritten; then the temporary name goes.
  if (::link(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    fail(path + ": cannot create it from " + tmp + ": " + std::strerror(error) +
         (error == EEXIST ? " (nothing is overwritten)" : ""));
  }
  std::remove(tmp.c_str());
}

}  // namespace gpt
