// What the checkpoint tests share: a temporary directory, the tiny model's config, a
// rank's three buffers filled with telling values, a state to save, the documented
// checksum written out on its own, and catching the UserError a load must give.
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/checkpoint.h"
#include "common/config.h"
#include "common/error.h"
#include "common/gpt2_layout.h"
#include "tests/temp_dir.h"

namespace checkpoint_test {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh directory, removed with everything in it at the end of the test.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("gpt_ckpt_test") {}
};

// A model small enough that a checkpoint is a few hundred KB.
inline gpt::Config tiny_config(int n_embd = 16) {
  gpt::Config cfg;
  cfg.model.n_layer = 2;
  cfg.model.n_embd = n_embd;
  cfg.model.n_head = 2;
  cfg.model.block_size = 8;
  cfg.model.vocab_size = 256;
  cfg.seq_len = 8;
  return cfg;
}

// A test's directory and the tiny model's layout, for TEST_CASE_METHOD.
struct TinyModel {
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout{cfg.model};
  const int64_t n = layout.total();
};

// The three buffers a rank holds, as T (float, or double as the fp64 runs hold them),
// each filled with values distinct within the buffer and across kinds, so that a tensor
// read at a wrong offset or from the wrong file cannot go unnoticed.
template <class T>
struct StateOf {
  std::vector<T> param, adam_m, adam_v;

  explicit StateOf(int64_t n) : param(size_t(n)), adam_m(size_t(n)), adam_v(size_t(n)) {}

  static StateOf filled(int64_t n, float salt = 0.0f) {
    StateOf s(n);
    for (int64_t i = 0; i < n; ++i) {
      const float x = float(i);
      s.param[size_t(i)] = 0.25f * x + 1.0f + salt;
      s.adam_m[size_t(i)] = -0.5f * x - 3.0f - salt;
      s.adam_v[size_t(i)] = 1e-3f * x + 7.0f + salt;
    }
    return s;
  }

  // Thirds: as doubles most lie between two floats, so a save that rounded to fp32 or a
  // load that truncated would change them.
  static StateOf thirds(int64_t n) {
    StateOf s(n);
    for (int64_t i = 0; i < n; ++i) {
      const double x = double(i);
      s.param[size_t(i)] = T((x + 1) / 3.0);
      s.adam_m[size_t(i)] = T(-(x + 2) / 3.0);
      s.adam_v[size_t(i)] = T(1e-3 * x + 7.0 / 3.0);
    }
    return s;
  }

  // The buffers for the slice [begin, end) of the flat layout; `this` holds only
  // that slice (element 0 of each vector is flat element `begin`).
  std::vector<gpt::CheckpointBuffer> buffers(int64_t begin, int64_t end) {
    std::vector<gpt::CheckpointBuffer> out;
    for (auto [kind, values] : {std::pair{"param", &param}, {"adam_m", &adam_m}, {"adam_v", &adam_v}}) {
      gpt::CheckpointBuffer b{kind, nullptr, begin, end};
      if constexpr (std::is_same_v<T, double>) b.data64 = values->data();
      else b.data = values->data();
      out.push_back(b);
    }
    return out;
  }
};
using State = StateOf<float>;

// Runs `body`, expects a gpt::UserError, and returns its message (so the test can
// check what it names). Any other outcome fails the test.
template <class F>
std::string user_error_of(F&& body) {
  try {
    body();
  } catch (const gpt::UserError& e) {
    return e.what();
  }
  FAIL("expected a gpt::UserError, but the call succeeded");
  return "";
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

inline json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// The checksum as docs/checkpoints.md defines it, written out independently of the
// implementation: 64-bit FNV-1a over the bytes as stored in the file.
inline std::string fnv1a64_hex(const std::vector<unsigned char>& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

inline std::vector<unsigned char> read_bytes(const fs::path& path, int64_t offset, int64_t n) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  std::vector<unsigned char> bytes(static_cast<size_t>(n));
  in.read(reinterpret_cast<char*>(bytes.data()), n);
  REQUIRE(in.gcount() == n);
  return bytes;
}

// Element `index` of tensor `name` ("param/ln_f.weight") in the checkpoint at `dir` set
// to `value` (T: the file's type, float or double), with the tensor's checksum in the
// manifest made to match: a file no save would write (a save refuses values that are not
// numbers), which only a load's own checks can refuse.
template <class T>
void plant_value(const fs::path& dir, const std::string& name, int64_t index, T value) {
  json manifest = read_json(dir / "manifest.json");
  for (json& row : manifest["tensors"]) {
    if (row["name"] != name) continue;
    int64_t numel = 1;
    for (const json& d : row["shape"]) numel *= d.get<int64_t>();
    const fs::path file = dir / row["file"].get<std::string>();
    const int64_t offset = row["offset"].get<int64_t>();
    {
      std::fstream out(file, std::ios::binary | std::ios::in | std::ios::out);
      out.seekp(offset + index * int64_t(sizeof(T)));
      out.write(reinterpret_cast<const char*>(&value), sizeof(T));
      REQUIRE(out.good());
    }
    row["checksum"] = fnv1a64_hex(read_bytes(file, offset, numel * int64_t(sizeof(T))));
    std::ofstream(dir / "manifest.json", std::ios::trunc) << manifest.dump(2);
    return;
  }
  FAIL("plant_value: no tensor " << name << " in " << dir);
}

inline gpt::CheckpointState some_state(int64_t step) {
  gpt::CheckpointState st;
  st.step = step;
  st.sample_counter = 12345 + uint64_t(step);
  st.layout_json = R"({"dp":2,"tp":1,"pp":1,"cp":1})";
  return st;
}

}  // namespace checkpoint_test
