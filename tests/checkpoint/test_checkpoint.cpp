// Checkpoints: a save followed by a load gives back every buffer bit for bit, in any
// slicing; the newest complete checkpoint is found and old ones pruned; and every
// kind of damage (flipped byte, truncated file, missing or garbage manifest, another
// model's checkpoint) is a UserError that says what is wrong and where.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "common/checkpoint.h"
#include "common/config.h"
#include "common/error.h"
#include "common/gpt2_layout.h"
#include "tests/checkpoint/checkpoint_fixture.h"

using namespace checkpoint_test;

TEST_CASE("checkpoint round trip is bit-exact for all three kinds", "[checkpoint]") {
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  State saved = State::filled(n);

  const std::string path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(100), saved.buffers(0, n));
  CHECK(fs::path(path) == dir.path() / "step_00000100");
  CHECK(fs::is_regular_file(fs::path(path) / "manifest.json"));
  CHECK_FALSE(fs::exists(dir.path() / "step_00000100.tmp"));
  for (const char* file : {"param.bin", "adam_m.bin", "adam_v.bin"})
    CHECK(fs::file_size(fs::path(path) / file) == uintmax_t(n) * 4);

  State loaded(n);
  const gpt::CheckpointState st = gpt::load_checkpoint(path, layout, loaded.buffers(0, n));
  CHECK(st.step == 100);
  CHECK(st.sample_counter == 12345 + 100);
  CHECK(json::parse(st.layout_json) == json::parse(some_state(100).layout_json));
  CHECK(same_bits(loaded.param, saved.param));
  CHECK(same_bits(loaded.adam_m, saved.adam_m));
  CHECK(same_bits(loaded.adam_v, saved.adam_v));
}

TEST_CASE("checkpoint manifest has the documented fields", "[checkpoint]") {
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  State saved = State::filled(n);
  const fs::path path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(7), saved.buffers(0, n));

  const json m = read_json(path / "manifest.json");
  CHECK(m.at("format") == "gpt-stages-checkpoint");
  CHECK(m.at("version") == 1);
  CHECK(m.at("step") == 7);
  CHECK(m.at("sample_counter") == 12345 + 7);
  CHECK(m.at("layout").at("dp") == 2);
  CHECK(m.at("data_position").at("step") == 7);
  CHECK(m.at("data_position").at("sequences") == 7 * cfg.batch_size);  // a fresh run: 7 batches
  CHECK(m.at("config").is_object());
  CHECK(m.at("model").at("n_embd") == 16);
  CHECK(m.at("model").at("padded_vocab") == cfg.model.padded_vocab());

  const json& tensors = m.at("tensors");
  REQUIRE(tensors.size() == 3 * layout.tensors().size());
  const gpt::ParamTensor& first = layout.tensors().front();
  CHECK(tensors[0].at("name") == "param/" + first.name);
  CHECK(tensors[0].at("kind") == "param");
  CHECK(tensors[0].at("dtype") == "fp32");
  CHECK(tensors[0].at("file") == "param.bin");
  CHECK(tensors[0].at("shape").get<std::vector<int64_t>>() == first.shape);

  // Every checksum is what the documented FNV-1a gives for the bytes in the file.
  for (const json& row : tensors) {
    const std::string name = row.at("name");
    const gpt::ParamTensor& t = layout.find(name.substr(name.find('/') + 1));
    CHECK(row.at("offset") == t.offset * 4);
    const auto bytes = read_bytes(path / row.at("file").get<std::string>(), row.at("offset"), t.numel * 4);
    CHECK(row.at("checksum") == fnv1a64_hex(bytes));
  }
}

TEST_CASE("loading two halves equals loading the whole", "[checkpoint]") {
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  State saved = State::filled(n);
  const std::string path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(3), saved.buffers(0, n));

  // Cut inside a tensor, as a ZeRO shard boundary generally does, so the loader must
  // handle a tensor that straddles two ranks.
  const gpt::ParamTensor& cut_tensor = layout.find("h.0.attn.c_attn.weight");
  const int64_t cut = GENERATE_COPY(cut_tensor.offset + 5, n / 2);
  INFO("cut at element " << cut << " of " << n);

  State low(cut), high(n - cut);
  gpt::load_checkpoint(path, layout, low.buffers(0, cut));
  gpt::load_checkpoint(path, layout, high.buffers(cut, n));

  auto joined = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> v(a);
    v.insert(v.end(), b.begin(), b.end());
    return v;
  };
  CHECK(same_bits(joined(low.param, high.param), saved.param));
  CHECK(same_bits(joined(low.adam_m, high.adam_m), saved.adam_m));
  CHECK(same_bits(joined(low.adam_v, high.adam_v), saved.adam_v));
}

TEST_CASE("a writer holding a slice checksums only the tensors it holds whole", "[checkpoint]") {
  // One rank of a sharded run on its own: the tensors outside its slice, and the one
  // its edge cuts, get a null checksum (a multi-rank writer fills them in from the
  // other ranks). A load that needs one of them must refuse, not trust unverified data.
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  const gpt::ParamTensor& cut_tensor = layout.find("h.0.attn.c_attn.weight");
  const int64_t cut = cut_tensor.offset + 5;
  State whole = State::filled(n);
  State low(cut);
  std::copy(whole.param.begin(), whole.param.begin() + cut, low.param.begin());
  std::copy(whole.adam_m.begin(), whole.adam_m.begin() + cut, low.adam_m.begin());
  std::copy(whole.adam_v.begin(), whole.adam_v.begin() + cut, low.adam_v.begin());
  const fs::path path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(1), low.buffers(0, cut));

  const json m = read_json(path / "manifest.json");
  for (const json& row : m.at("tensors")) {
    const std::string name = row.at("name");
    const gpt::ParamTensor& t = layout.find(name.substr(name.find('/') + 1));
    INFO(name);
    CHECK(row.at("checksum").is_null() == (t.offset + t.numel > cut));
  }

  // The tensors before the cut tensor are all whole and checksummed: they load.
  State head(cut_tensor.offset);
  gpt::load_checkpoint(path.string(), layout, head.buffers(0, cut_tensor.offset));
  CHECK(std::equal(head.param.begin(), head.param.end(), whole.param.begin()));

  State all(n);
  const std::string msg =
      user_error_of([&] { gpt::load_checkpoint(path.string(), layout, all.buffers(0, n)); });
  CHECK_THAT(msg, Catch::Contains("param/h.0.attn.c_attn.weight"));
  CHECK_THAT(msg, Catch::Contains("no checksum"));
}

// Two different states of the tiny model's buffers, one to be saved over the other.
struct TwoStates : TinyModel {
  State first = State::filled(n, 0.0f), second = State::filled(n, 100.0f);
};

TEST_CASE_METHOD(TwoStates, "saving a step again replaces the old copy", "[checkpoint]") {
  // A stale .tmp from a crashed save must not leak into the new checkpoint.
  fs::create_directories(dir.path() / "step_00000010.tmp");
  std::ofstream(dir.path() / "step_00000010.tmp" / "junk.bin") << "junk";

  gpt::save_checkpoint(dir.str(), cfg, layout, some_state(10), first.buffers(0, n));
  const std::string path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(10), second.buffers(0, n));
  CHECK_FALSE(fs::exists(fs::path(path) / "junk.bin"));
  CHECK_FALSE(fs::exists(dir.path() / "step_00000010.tmp"));
  CHECK_FALSE(fs::exists(dir.path() / "step_00000010.old"));

  State loaded(n);
  gpt::load_checkpoint(path, layout, loaded.buffers(0, n));
  CHECK(same_bits(loaded.param, second.param));
  CHECK(same_bits(loaded.adam_v, second.adam_v));
}

TEST_CASE_METHOD(TwoStates, "a save that fails removes its .tmp directory and leaves the old copy", "[checkpoint]") {
  const std::string path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(10), first.buffers(0, n));

  // The manifest is written after the tensor files: a state whose layout is not JSON
  // fails the save there, with every file of the .tmp directory already written (as a
  // disk that fills up during the manifest would).
  gpt::CheckpointState broken = some_state(10);
  broken.layout_json = "not json";
  CHECK_THROWS(gpt::save_checkpoint(dir.str(), cfg, layout, broken, second.buffers(0, n)));
  CHECK_FALSE(fs::exists(dir.path() / "step_00000010.tmp"));

  State loaded(n);
  gpt::load_checkpoint(path, layout, loaded.buffers(0, n));  // the published copy is untouched
  CHECK(same_bits(loaded.param, first.param));
}

TEST_CASE("latest_checkpoint picks the highest complete step", "[checkpoint]") {
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  State s = State::filled(n);

  CHECK(gpt::latest_checkpoint(dir.str()).empty());
  CHECK(gpt::latest_checkpoint((dir.path() / "does-not-exist").string()).empty());

  for (int64_t step : {1, 5, 3}) gpt::save_checkpoint(dir.str(), cfg, layout, some_state(step), s.buffers(0, n));

  // Higher-numbered directories that are not complete checkpoints: a save in
  // progress (even one that already has its manifest), a directory without a
  // manifest, a copy aside, and a stray file.
  fs::create_directories(dir.path() / "step_00000009.tmp");
  std::ofstream(dir.path() / "step_00000009.tmp" / "manifest.json") << "{}";
  fs::create_directories(dir.path() / "step_00000008");
  fs::create_directories(dir.path() / "step_00000007.old");
  std::ofstream(dir.path() / "step_00000006") << "not a directory";

  CHECK(gpt::latest_checkpoint(dir.str()) == (dir.path() / "step_00000005").string());
}

// A save killed between publish()'s two renames can leave step_N (the new copy) and
// step_N.old (the one it replaced) side by side: step_N is the checkpoint of step N,
// whichever of the two the directory lists first. Both creation orders, 8 steps each.
TEST_CASE("latest_checkpoint takes step_N over step_N.old, in any listing order", "[checkpoint]") {
  for (int trial = 0; trial < 8; ++trial) {
    TempDir dir;
    char name[32];
    std::snprintf(name, sizeof name, "step_%08d", 3 + trial);
    const fs::path fresh = dir.path() / name, old = dir.path() / (std::string(name) + ".old");
    for (const fs::path& d : trial % 2 ? std::vector<fs::path>{fresh, old} : std::vector<fs::path>{old, fresh}) {
      fs::create_directories(d);
      std::ofstream(d / "manifest.json") << "{}";  // no step to read: ranked by the name
    }
    INFO("trial " << trial);
    CHECK(gpt::latest_checkpoint(dir.str()) == fresh.string());
  }
}

TEST_CASE("prune_checkpoints keeps the newest N", "[checkpoint]") {
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  State s = State::filled(n);
  for (int64_t step = 1; step <= 5; ++step)
    gpt::save_checkpoint(dir.str(), cfg, layout, some_state(step), s.buffers(0, n));

  gpt::prune_checkpoints(dir.str(), 0);  // 0 keeps everything
  for (int step = 1; step <= 5; ++step)
    CHECK(fs::exists(dir.path() / ("step_0000000" + std::to_string(step))));

  gpt::prune_checkpoints(dir.str(), 2);
  CHECK_FALSE(fs::exists(dir.path() / "step_00000001"));
  CHECK_FALSE(fs::exists(dir.path() / "step_00000002"));
  CHECK_FALSE(fs::exists(dir.path() / "step_00000003"));
  CHECK(fs::exists(dir.path() / "step_00000004" / "manifest.json"));
  CHECK(fs::exists(dir.path() / "step_00000005" / "manifest.json"));
  CHECK(gpt::latest_checkpoint(dir.str()) == (dir.path() / "step_00000005").string());
}

TEST_CASE("a damaged or foreign checkpoint is a UserError naming the problem", "[checkpoint]") {
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  State saved = State::filled(n);
  const fs::path path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(42), saved.buffers(0, n));
  State loaded(n);
  auto load = [&] { gpt::load_checkpoint(path.string(), layout, loaded.buffers(0, n)); };

  SECTION("a flipped byte in param.bin names the tensor") {
    const gpt::ParamTensor& t = layout.find("h.1.mlp.c_fc.weight");
    std::fstream f(path / "param.bin", std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = std::streamoff(t.offset * 4 + 10);
    f.seekg(at);
    char byte = 0;
    f.read(&byte, 1);
    byte = char(byte ^ 0x01);
    f.seekp(at);
    f.write(&byte, 1);
    f.close();
    const std::string msg = user_error_of(load);
    CHECK_THAT(msg, Catch::Contains("param/h.1.mlp.c_fc.weight"));
    CHECK_THAT(msg, Catch::Contains("param.bin"));
    CHECK_THAT(msg, Catch::Contains("checksum"));
  }

  SECTION("a truncated adam_v.bin names the file") {
    fs::resize_file(path / "adam_v.bin", fs::file_size(path / "adam_v.bin") - 4);
    CHECK_THAT(user_error_of(load), Catch::Contains("adam_v.bin"));
  }

  SECTION("a missing adam_m.bin names the file") {
    fs::remove(path / "adam_m.bin");
    CHECK_THAT(user_error_of(load), Catch::Contains("adam_m.bin"));
  }

  SECTION("a checkpoint of another model shape names the field") {
    const gpt::Config wider = tiny_config(32);
    const gpt::ParamLayout wide_layout(wider.model);
    State wide(wide_layout.total());
    const std::string msg = user_error_of(
        [&] { gpt::load_checkpoint(path.string(), wide_layout, wide.buffers(0, wide_layout.total())); });
    CHECK_THAT(msg, Catch::Contains("n_embd"));
    CHECK_THAT(msg, Catch::Contains("16"));
    CHECK_THAT(msg, Catch::Contains("32"));
  }

  SECTION("a param.bin that is a directory") {
    fs::remove(path / "param.bin");
    fs::create_directory(path / "param.bin");
    CHECK_THAT(user_error_of(load), Catch::Contains("param.bin is not a regular file"));
  }

  SECTION("a param.bin that is a pipe is refused, not waited on") {
    // A blocking open of a FIFO waits for a writer that never comes: the load would hang.
    fs::remove(path / "param.bin");
    REQUIRE(::mkfifo((path / "param.bin").c_str(), 0644) == 0);
    CHECK_THAT(user_error_of(load), Catch::Contains("param.bin is not a regular file"));
  }

  SECTION("a run directory in the place of its checkpoint names the latest") {
    const std::string msg =
        user_error_of([&] { gpt::load_checkpoint(dir.str(), layout, loaded.buffers(0, n)); });
    CHECK_THAT(msg, Catch::Contains("is a run directory") && Catch::Contains(path.filename().string()));
  }

  SECTION("a checkpoint that does not exist") {
    const std::string msg = user_error_of(
        [&] { gpt::load_checkpoint((dir.path() / "step_00000043").string(), layout, loaded.buffers(0, n)); });
    CHECK_THAT(msg, Catch::Contains("step_00000043 does not exist"));
  }

  SECTION("a missing manifest") {
    fs::remove(path / "manifest.json");
    CHECK_THAT(user_error_of(load), Catch::Contains("manifest.json"));
    // ...is also not a complete checkpoint for latest_checkpoint.
    CHECK(gpt::latest_checkpoint(dir.str()).empty());
  }

  SECTION("a garbage manifest") {
    std::ofstream(path / "manifest.json", std::ios::trunc) << "{ this is not json";
    CHECK_THAT(user_error_of(load), Catch::Contains("manifest.json"));
  }

  SECTION("a manifest of another format") {
    json m = read_json(path / "manifest.json");
    m["format"] = "something-else";
    std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
    CHECK_THAT(user_error_of(load), Catch::Contains("format"));
  }

  SECTION("a manifest of another version") {
    json m = read_json(path / "manifest.json");
    m["version"] = 99;
    std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
    CHECK_THAT(user_error_of(load), Catch::Contains("version"));
  }

  SECTION("a tensor missing from the table") {
    json m = read_json(path / "manifest.json");
    auto& rows = m["tensors"];
    for (auto it = rows.begin(); it != rows.end(); ++it)
      if ((*it)["name"] == "adam_m/ln_f.bias") {
        rows.erase(it);
        break;
      }
    std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
    CHECK_THAT(user_error_of(load), Catch::Contains("adam_m/ln_f.bias"));
  }

  SECTION("a tensor of the wrong shape") {
    json m = read_json(path / "manifest.json");
    for (auto& row : m["tensors"])
      if (row["name"] == "param/wpe") row["shape"] = {4, 32};
    std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
    const std::string msg = user_error_of(load);
    CHECK_THAT(msg, Catch::Contains("param/wpe"));
    CHECK_THAT(msg, Catch::Contains("shape"));
  }

  // Numbers where integers belong, which a reader that converts would truncate (1.9 to
  // version 1, offset 16384.5 to 16384), a row of no kind a checkpoint holds, and a data
  // position other than the step: each refused, naming the field.
  auto edited = [&](const std::function<void(json&)>& edit) {
    json m = read_json(path / "manifest.json");
    edit(m);
    std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
    return user_error_of(load);
  };
  SECTION("a fractional version") {
    CHECK_THAT(edited([](json& m) { m["version"] = 1.9; }), Catch::Contains("has version 1.9"));
  }
  SECTION("a fractional step") {
    CHECK_THAT(edited([](json& m) { m["step"] = 42.5; }), Catch::Contains("has step 42.5"));
  }
  SECTION("a fractional offset") {
    const std::string msg = edited([](json& m) {
      for (auto& row : m["tensors"])
        if (row["name"] == "param/wpe") row["offset"] = row["offset"].get<double>() + 0.5;
    });
    CHECK_THAT(msg, Catch::Contains("param/wpe") && Catch::Contains("must be integers"));
  }
  // Sizes that overflow 64 bits (a reader that multiplied first would compute a wrapped
  // size, and a sanitizer build would stop on it): refused by name, not as a read error.
  SECTION("an offset near 2^63") {
    const std::string msg = edited([](json& m) {
      for (auto& row : m["tensors"])
        if (row["name"] == "param/wpe") row["offset"] = int64_t(9223372036854775800);
    });
    CHECK_THAT(msg, Catch::Contains("param/wpe has offset 9223372036854775800") &&
                        Catch::Contains("past the largest file size"));
  }
  SECTION("a shape of 2^120 elements, and a negative dimension") {
    const auto with_shape = [&](json shape) {
      return edited([&](json& m) {
        for (auto& row : m["tensors"])
          if (row["name"] == "param/wpe") row["shape"] = shape;
      });
    };
    CHECK_THAT(with_shape({int64_t(1) << 40, int64_t(1) << 40, int64_t(1) << 40}),
               Catch::Contains("param/wpe has shape [1099511627776,1099511627776,1099511627776]") &&
                   Catch::Contains("more bytes than a file can hold"));
    CHECK_THAT(with_shape({-4, -8}), Catch::Contains("param/wpe has shape [-4,-8]") &&
                                         Catch::Contains("a dimension is negative"));
  }
  SECTION("a row of another kind") {
    const std::string msg = edited([](json& m) {
      json row = m["tensors"][0];
      row["name"] = "adam_x/wte";
      m["tensors"].push_back(row);
    });
    CHECK_THAT(msg, Catch::Contains("adam_x/wte") && Catch::Contains("not of a kind"));
  }
  SECTION("a row of a tensor the model does not have") {
    const std::string msg = edited([](json& m) {
      json row = m["tensors"][0];
      row["name"] = "param/h.9.mlp.c_fc.weight";
      m["tensors"].push_back(row);
    });
    CHECK_THAT(msg, Catch::Contains("tensor param/h.9.mlp.c_fc.weight is not a tensor of the model"));
  }
  SECTION("a row whose kind is not its name's") {
    const std::string msg = edited([](json& m) {
      for (auto& row : m["tensors"])
        if (row["name"] == "param/wte") row["kind"] = "adam_m";
    });
    CHECK_THAT(msg, Catch::Contains("param/wte has kind \"adam_m\", not \"param\""));
    CHECK_THAT(edited([](json& m) { m["tensors"][0].erase("kind"); }), Catch::Contains("has kind (none)"));
  }
  // A tensor row that is no object, or a field of the wrong type, is named.
  SECTION("a tensor row that is no object") {
    CHECK_THAT(edited([](json& m) { m["tensors"][0] = 42; }), Catch::Contains("tensor row 0 is 42, not an object"));
  }
  SECTION("a tensor's dtype that is no string") {
    CHECK_THAT(edited([](json& m) {
                 for (auto& row : m["tensors"])
                   if (row["name"] == "param/wpe") row["dtype"] = 5;
               }),
               Catch::Contains("tensor param/wpe has dtype 5, not a string"));
  }
  SECTION("a tensor's name that is no string") {
    CHECK_THAT(edited([](json& m) { m["tensors"][1]["name"] = 7; }), Catch::Contains("tensor row 1 has no name"));
  }
  SECTION("a manifest missing a field is malformed, in words, not nlohmann's") {
    const std::string msg = edited([](json& m) { m.erase("data_position"); });
    CHECK_THAT(msg, Catch::Contains("is malformed") && Catch::Contains("data_position"));
    CHECK_THAT(msg, !Catch::Contains("json.exception"));
  }
  // Nesting a quoted value would recurse through (nlohmann's dump, once a level: 100,000
  // levels overflowed the stack), and bytes after a NUL that nlohmann would not read.
  SECTION("a manifest nested too deep, or with a NUL byte") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    std::string text = read_json(path / "manifest.json").dump();
    std::ofstream(path / "manifest.json", std::ios::trunc) << text.substr(0, text.size() - 1) << ", \"notes\": " << deep
                                                          << "}";
    CHECK_THAT(user_error_of(load), Catch::Contains("nested deeper than 64 levels"));
    std::ofstream(path / "manifest.json", std::ios::trunc | std::ios::binary) << text << '\0' << "{{{ garbage";
    CHECK_THAT(user_error_of(load), Catch::Contains("a NUL byte at offset " + std::to_string(text.size())));
  }
  SECTION("a data position other than the step") {
    CHECK_THAT(edited([](json& m) { m["data_position"]["step"] = 41; }),
               Catch::Contains("data_position.step 41 but step 42"));
    // The same number written as a float, which nlohmann's == calls equal, is refused as
    // a top-level "step": 42.0 is.
    CHECK_THAT(edited([](json& m) { m["data_position"]["step"] = 42.0; }),
               Catch::Contains("data_position.step 42.0 but step 42: they are the same position, an integer"));
  }
  SECTION("a data position that is no object") {
    for (const json& bad : {json(nullptr), json(42), json::array({42, 168})})
      CHECK_THAT(edited([&](json& m) { m["data_position"] = bad; }),
                 Catch::Contains("has a data_position of type " + std::string(bad.type_name()) +
                                 ": the data position is an object"));
  }
  SECTION("a count of sequences that is no count, or fewer than the steps") {
    CHECK_THAT(edited([](json& m) { m["data_position"]["sequences"] = 3.5; }),
               Catch::Contains("data_position.sequences 3.5: a count of sequences is an integer in [0, 2^62]"));
    CHECK_THAT(edited([](json& m) { m["data_position"]["sequences"] = (int64_t(1) << 62) + 1; }),
               Catch::Contains("integer in [0, 2^62]"));  // the steps after it would overflow int64
    json m = read_json(path / "manifest.json");
    m["data_position"]["sequences"] = int64_t(1) << 62;  // control: the largest count loads
    std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
    CHECK_NOTHROW(load());
    CHECK_THAT(edited([](json& edit) { edit["data_position"]["sequences"] = -1; }),
               Catch::Contains("data_position.sequences -1"));
    CHECK_THAT(edited([](json& edit) { edit["data_position"]["sequences"] = 41; }),
               Catch::Contains("data_position.sequences 41 at step 42: each step reads at least one sequence"));
  }
  SECTION("a size of the training data that is no count") {
    for (const json& bad : {json(3.5), json(-1), json("4096"), json(uint64_t(1) << 63)})
      CHECK_THAT(edited([&](json& m) { m["data_position"]["train_tokens"] = bad; }),
                 Catch::Contains("data_position.train_tokens " + bad.dump() + ": a count of tokens is an integer"));
    // JSON's -0 is a count (0), though nlohmann reads it as a signed integer.
    json minus_zero = read_json(path / "manifest.json");
    minus_zero["data_position"]["train_tokens"] = json::parse("-0");
    std::ofstream(path / "manifest.json", std::ios::trunc) << minus_zero.dump();
    CHECK_NOTHROW(load());
    json m = read_json(path / "manifest.json");
    m["data_position"].erase("train_tokens");  // control: a checkpoint that recorded none loads
    std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
    CHECK_NOTHROW(load());
  }
  SECTION("a layout that is no record of a mesh") {
    for (const json& bad : {json(nullptr), json("dp=2"), json::array({2, 1})})
      CHECK_THAT(edited([&](json& m) { m["layout"] = bad; }),
                 Catch::Contains("has layout " + bad.dump() + ": the mesh that wrote a checkpoint is an object"));
    for (const json& bad : {json(0), json(2.5), json("2")})
      CHECK_THAT(edited([&](json& m) { m["layout"] = {{"dp", 1}, {"tp", 1}, {"pp", bad}, {"cp", 1}}; }),
                 Catch::Contains("has layout.pp " + bad.dump() + ": a mesh axis is an integer >= 1"));
    json m = read_json(path / "manifest.json");  // control: a record with keys of its own loads
    m["layout"] = {{"imported_from", "llm.c"}, {"dp", 4}};
    std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
    CHECK_NOTHROW(load());
  }
  SECTION("control: the manifest rewritten unchanged loads") {
    json m = read_json(path / "manifest.json");
    std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
    CHECK_NOTHROW(load());
  }
}

// A checksum proves the bytes are the ones written, not that they are numbers: a
// checkpoint holding a NaN weight, an infinite first moment or a negative second moment
// (planted in the file, all with correct checksums) is refused at load, naming the
// tensor, its file and the element. Control: the same checkpoint with those values
// finite loads.
TEST_CASE("a checkpoint holding values that are not numbers is a UserError naming the tensor", "[checkpoint]") {
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  const gpt::ParamTensor& t = layout.find("h.1.attn.c_proj.weight");
  const int64_t at = t.offset + 5;
  auto load_with = [&](const char* kind, float value) {
    State saved = State::filled(n);
    const fs::path path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(7), saved.buffers(0, n));
    plant_value(path, std::string(kind) + "/h.1.attn.c_proj.weight", at - t.offset, value);
    State loaded(n);
    return user_error_of([&] { gpt::load_checkpoint(path.string(), layout, loaded.buffers(0, n)); });
  };
  SECTION("NaN in a weight") {
    const std::string msg = load_with("param", std::nanf(""));
    CHECK_THAT(msg, Catch::Contains("param/h.1.attn.c_proj.weight") && Catch::Contains("param.bin"));
    CHECK_THAT(msg, Catch::Contains("NaN at element 5 of"));
  }
  SECTION("an infinite first moment") {
    const std::string msg = load_with("adam_m", -INFINITY);
    CHECK_THAT(msg, Catch::Contains("adam_m/h.1.attn.c_proj.weight") && Catch::Contains("an infinity"));
  }
  SECTION("a negative second moment") {
    const std::string msg = load_with("adam_v", -1e-6f);
    CHECK_THAT(msg, Catch::Contains("adam_v/h.1.attn.c_proj.weight") && Catch::Contains("never negative"));
  }
  SECTION("control: the same values finite, a negative first moment") {
    State saved = State::filled(n);
    saved.adam_m[size_t(at)] = -1e-6f;  // moments of the first order take either sign
    const fs::path path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(7), saved.buffers(0, n));
    State loaded(n);
    gpt::load_checkpoint(path.string(), layout, loaded.buffers(0, n));
    CHECK(same_bits(loaded.adam_m, saved.adam_m));
  }
}

// A save refuses weights or moments that are not numbers (a run whose update overflowed),
// naming the tensor and the element, and leaves nothing in the run directory: a diverged
// run never publishes them, and never prunes a good checkpoint for them. Control: the
// largest finite float saves.
TEST_CASE("a save of values that are not numbers is a UserError naming the tensor, and writes nothing",
          "[checkpoint]") {
  TempDir dir;
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  const int64_t at = layout.find("h.0.mlp.c_fc.weight").offset + 3;
  int64_t step = 4;  // one step a kind: the control's save of one must not stand for the next's
  for (const char* kind : {"param", "adam_m", "adam_v"}) {
    ++step;
    const std::string name = "step_0000000" + std::to_string(step);
    State saved = State::filled(n);
    std::vector<float>& values = std::string(kind) == "param" ? saved.param
                                 : std::string(kind) == "adam_m" ? saved.adam_m
                                                                 : saved.adam_v;
    values[size_t(at)] = INFINITY;
    const std::string msg = user_error_of([&] {
      gpt::save_checkpoint(dir.str(), cfg, layout, some_state(step), saved.buffers(0, n));
    });
    CHECK_THAT(msg, Catch::Contains("step " + std::to_string(step) + ": " + kind + "/h.0.mlp.c_fc.weight element 3 of") &&
                        Catch::Contains("is inf") && Catch::Contains("diverged"));
    CHECK(!fs::exists(dir.path() / name));
    CHECK(!fs::exists(dir.path() / (name + ".tmp")));
    values[size_t(at)] = FLT_MAX;  // control
    CHECK(gpt::save_checkpoint(dir.str(), cfg, layout, some_state(step), saved.buffers(0, n)) == dir.file(name));
  }
}

// The data position: sequences consumed, so that a resume may change batch_size.
TEST_CASE("the data position counts sequences across a change of batch_size", "[checkpoint]") {
  gpt::CheckpointState st;
  st.step = 5;
  CHECK(st.sequences(8) == 40);  // a fresh run: 5 batches of 8
  st.resumed_step = 3, st.resumed_sequences = 24;  // resumed after 3 steps of 8, trained on at 16
  CHECK(st.sequences(16) == 24 + 2 * 16);
  st.resumed_sequences = -1;  // a checkpoint that recorded no position: its steps read this run's batch
  CHECK(st.sequences(16) == 5 * 16);

  // Saved, and read back by a load.
  TempDir dir;
  gpt::Config cfg = tiny_config();
  cfg.batch_size = 16;
  const gpt::ParamLayout layout(cfg.model);
  const int64_t n = layout.total();
  State saved = State::filled(n), loaded(n);
  st.resumed_sequences = 24;
  const fs::path path = gpt::save_checkpoint(dir.str(), cfg, layout, st, saved.buffers(0, n));
  CHECK(read_json(path / "manifest.json").at("data_position").at("sequences") == 56);
  gpt::CheckpointState back = gpt::load_checkpoint(path.string(), layout, loaded.buffers(0, n));
  CHECK(back.resumed_step == 5);
  CHECK(back.resumed_sequences == 56);
  CHECK(back.sequences(4) == 56);  // the position after the resumed step, whatever batch follows
  back.step = 6;
  CHECK(back.sequences(4) == 60);

  // A checkpoint written before the position was recorded: step x its config's
  // batch_size; with no config either, unknown (-1).
  json m = read_json(path / "manifest.json");
  m["data_position"].erase("sequences");
  std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
  CHECK(gpt::load_checkpoint(path.string(), layout, loaded.buffers(0, n)).resumed_sequences == 5 * 16);
  m.erase("config");
  std::ofstream(path / "manifest.json", std::ios::trunc) << m.dump();
  CHECK(gpt::load_checkpoint(path.string(), layout, loaded.buffers(0, n)).resumed_sequences == -1);
}
