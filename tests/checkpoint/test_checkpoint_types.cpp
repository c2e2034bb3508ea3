// Checkpoints in the two types a run keeps its state in. Buffers of doubles (the fp64
// ground-truth runs) are saved as fp64 and load back bit for bit; a tensor loads into a
// buffer of the other type too: fp32 widened exactly, fp64 rounded to nearest, and a
// value beyond fp32's range refused rather than turned into an infinity.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "common/checkpoint.h"
#include "common/gpt2_layout.h"
#include "tests/checkpoint/checkpoint_fixture.h"

using namespace checkpoint_test;

namespace {

// Each of `from` converted to To by the compiler's conversion (widening, or rounding to
// nearest: the default IEEE-754 mode), as the expected values of a load.
template <class To, class From>
std::vector<To> converted(const std::vector<From>& from) {
  return std::vector<To>(from.begin(), from.end());
}

}  // namespace

TEST_CASE_METHOD(TinyModel, "an fp64 checkpoint holds doubles and loads back bit for bit", "[checkpoint]") {
  StateOf<double> saved = StateOf<double>::thirds(n);
  // The control of the values: most are not floats, so rounding anywhere would show.
  int64_t not_floats = 0;
  for (double x : saved.param) not_floats += double(float(x)) != x;
  REQUIRE(not_floats > n / 2);

  const fs::path path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(4), saved.buffers(0, n));
  for (const char* file : {"param.bin", "adam_m.bin", "adam_v.bin"})
    CHECK(fs::file_size(path / file) == uintmax_t(n) * 8);
  // Every row says fp64, at 8 bytes an element, with the documented checksum of its bytes.
  const json m = read_json(path / "manifest.json");
  for (const json& row : m.at("tensors")) {
    const std::string name = row.at("name");
    const gpt::ParamTensor& t = layout.find(name.substr(name.find('/') + 1));
    INFO(name);
    CHECK(row.at("dtype") == "fp64");
    CHECK(row.at("offset") == t.offset * 8);
    CHECK(row.at("checksum") == fnv1a64_hex(read_bytes(path / row.at("file").get<std::string>(), row.at("offset"),
                                                       t.numel * 8)));
  }

  StateOf<double> loaded(n);
  gpt::load_checkpoint(path.string(), layout, loaded.buffers(0, n));
  CHECK(same_bits(loaded.param, saved.param));
  CHECK(same_bits(loaded.adam_m, saved.adam_m));
  CHECK(same_bits(loaded.adam_v, saved.adam_v));

  // In two slices cut inside a tensor (a ZeRO shard's edge): the cut tensor is read whole
  // and converted from scratch, and gives the same bits.
  const int64_t cut = layout.find("h.0.attn.c_attn.weight").offset + 5;
  StateOf<double> low(cut), high(n - cut);
  gpt::load_checkpoint(path.string(), layout, low.buffers(0, cut));
  gpt::load_checkpoint(path.string(), layout, high.buffers(cut, n));
  for (auto [part, rest, want] : {std::tuple{&low.param, &high.param, &saved.param},
                                  {&low.adam_m, &high.adam_m, &saved.adam_m},
                                  {&low.adam_v, &high.adam_v, &saved.adam_v}}) {
    part->insert(part->end(), rest->begin(), rest->end());
    CHECK(same_bits(*part, *want));
  }
}

TEST_CASE_METHOD(TinyModel, "a checkpoint loads into the other type: fp32 widened, fp64 rounded to nearest",
                 "[checkpoint]") {
  // Whole, and in two slices (the cut tensor goes through the scratch copy).
  const int64_t inside_a_tensor = layout.find("h.1.mlp.c_fc.weight").offset + 7;
  const int64_t cut = GENERATE_COPY(n, inside_a_tensor);
  INFO("slices [0, " << cut << ") and [" << cut << ", " << n << ")");
  auto load_in_slices = [&](const std::string& path, auto& into) {
    using B = std::decay_t<decltype(into)>;
    B low(cut), high(n - cut);
    gpt::load_checkpoint(path, layout, low.buffers(0, cut));
    if (cut < n) gpt::load_checkpoint(path, layout, high.buffers(cut, n));
    for (auto [whole, a, b] : {std::tuple{&into.param, &low.param, &high.param},
                               {&into.adam_m, &low.adam_m, &high.adam_m}, {&into.adam_v, &low.adam_v, &high.adam_v}}) {
      *whole = *a;
      whole->insert(whole->end(), b->begin(), b->end());
    }
  };

  // Saved as From, loaded as To: each value is the compiler's conversion of the saved one.
  auto check_loads_as = [&](auto from, auto to) {
    using From = decltype(from);
    using To = decltype(to);
    StateOf<From> saved = StateOf<From>::thirds(n);
    const std::string path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(2), saved.buffers(0, n));
    StateOf<To> loaded(n);
    load_in_slices(path, loaded);
    CHECK(same_bits(loaded.param, converted<To>(saved.param)));
    CHECK(same_bits(loaded.adam_m, converted<To>(saved.adam_m)));
    CHECK(same_bits(loaded.adam_v, converted<To>(saved.adam_v)));
  };
  SECTION("fp32 into doubles: every value exactly") { check_loads_as(float(), double()); }
  SECTION("fp64 into floats: each value the float nearest it") {
    // The control of the rounding: a third rounds up in magnitude as often as down, so
    // a load that truncated toward zero would give other floats.
    int64_t rounded_up = 0;
    for (double x : StateOf<double>::thirds(n).param) rounded_up += std::fabs(double(float(x))) > std::fabs(x);
    REQUIRE(rounded_up > 0);
    check_loads_as(double(), float());
  }
}

TEST_CASE_METHOD(TinyModel, "an fp64 value beyond fp32's range is refused by an fp32 load, and loads as fp64",
                 "[checkpoint]") {
  const gpt::ParamTensor& t = layout.find("h.1.attn.c_proj.weight");
  StateOf<double> saved = StateOf<double>::thirds(n);
  // The least double that rounds to an infinity is halfway between FLT_MAX and 2^128,
  // FLT_MAX + 2^103 (a tie, which goes to the even side: the infinity).
  const double huge = GENERATE(1e300, -4e38, double(FLT_MAX) + std::ldexp(1.0, 103));
  saved.param[size_t(t.offset + 5)] = huge;
  const std::string path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(3), saved.buffers(0, n));

  StateOf<float> as_floats(n);
  const std::string msg = user_error_of([&] { gpt::load_checkpoint(path, layout, as_floats.buffers(0, n)); });
  CHECK_THAT(msg, Catch::Contains("param/h.1.attn.c_proj.weight") && Catch::Contains("param.bin"));
  CHECK_THAT(msg, Catch::Contains("at element 5") && Catch::Contains("beyond fp32's range"));
  // Controls: FLT_MAX, and a double just below the tie (FLT_MAX + 2^102), load as FLT_MAX.
  for (const double fits : {double(FLT_MAX), double(FLT_MAX) + std::ldexp(1.0, 102)}) {
    saved.param[size_t(t.offset + 5)] = std::copysign(fits, huge);
    gpt::load_checkpoint(gpt::save_checkpoint(dir.str(), cfg, layout, some_state(3), saved.buffers(0, n)), layout,
                         as_floats.buffers(0, n));
    CHECK(as_floats.param[size_t(t.offset + 5)] == std::copysign(FLT_MAX, float(huge)));
  }

  saved.param[size_t(t.offset + 5)] = huge;
  const std::string again = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(3), saved.buffers(0, n));
  StateOf<double> as_doubles(n);
  gpt::load_checkpoint(again, layout, as_doubles.buffers(0, n));
  CHECK(as_doubles.param[size_t(t.offset + 5)] == huge);
}

TEST_CASE_METHOD(TinyModel, "an fp64 checkpoint holding NaN or a negative second moment is refused", "[checkpoint]") {
  const int64_t at = layout.find("ln_f.weight").offset + 2;
  StateOf<double> saved = StateOf<double>::thirds(n);
  SECTION("NaN in a weight (planted: no save writes one), whichever type loads it") {
    const std::string path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(1), saved.buffers(0, n));
    plant_value(path, "param/ln_f.weight", 2, std::nan(""));
    StateOf<double> as_doubles(n);
    StateOf<float> as_floats(n);
    for (const std::string& msg : {user_error_of([&] { gpt::load_checkpoint(path, layout, as_doubles.buffers(0, n)); }),
                                   user_error_of([&] { gpt::load_checkpoint(path, layout, as_floats.buffers(0, n)); })})
      CHECK_THAT(msg, Catch::Contains("param/ln_f.weight") && Catch::Contains("NaN at element 2"));
  }
  SECTION("a second moment below zero") {
    saved.adam_v[size_t(at)] = -1e-300;  // rounds to -0 in fp32: the fp64 value is the one checked
    const std::string path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(1), saved.buffers(0, n));
    StateOf<float> as_floats(n);
    CHECK_THAT(user_error_of([&] { gpt::load_checkpoint(path, layout, as_floats.buffers(0, n)); }),
               Catch::Contains("adam_v/ln_f.weight") && Catch::Contains("never negative"));
  }
}

TEST_CASE_METHOD(TinyModel, "a dtype other than fp32 and fp64 is refused, naming the tensor", "[checkpoint]") {
  StateOf<double> saved = StateOf<double>::thirds(n);
  const fs::path path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(1), saved.buffers(0, n));
  json m = read_json(path / "manifest.json");
  const std::string dtype = GENERATE(as<std::string>{}, "fp16", "fp64 ", "FP64");
  m["tensors"][3]["dtype"] = dtype;
  std::ofstream(path / "manifest.json") << m.dump(2);
  StateOf<double> loaded(n);
  const std::string msg = user_error_of([&] { gpt::load_checkpoint(path.string(), layout, loaded.buffers(0, n)); });
  CHECK_THAT(msg, Catch::Contains(m["tensors"][3]["name"].get<std::string>()) &&
                      Catch::Contains("has dtype " + dtype + "; a checkpoint stores fp32 or fp64"));
}

TEST_CASE_METHOD(TinyModel, "a file whose rows name two dtypes is refused, naming both tensors", "[checkpoint]") {
  StateOf<double> saved = StateOf<double>::thirds(n);
  const fs::path path = gpt::save_checkpoint(dir.str(), cfg, layout, some_state(1), saved.buffers(0, n));
  json m = read_json(path / "manifest.json");
  // Row 1 (param/wpe) said to be fp32 at its own fp64 offset: a size that would still fit.
  m["tensors"][1]["dtype"] = "fp32";
  std::ofstream(path / "manifest.json") << m.dump(2);
  StateOf<double> loaded(n);
  const std::string msg = user_error_of([&] { gpt::load_checkpoint(path.string(), layout, loaded.buffers(0, n)); });
  CHECK_THAT(msg, Catch::Contains("param.bin holds tensors of two dtypes") && Catch::Contains("param/wpe") &&
                      Catch::Contains("a checkpoint file holds one"));
}

TEST_CASE_METHOD(TinyModel, "a buffer with both types, or neither, is the caller's bug", "[checkpoint]") {
  std::vector<float> floats(static_cast<size_t>(n));
  std::vector<double> doubles(static_cast<size_t>(n));
  gpt::CheckpointBuffer both{"param", floats.data(), 0, n, doubles.data()};
  gpt::CheckpointBuffer neither{"param", nullptr, 0, n};
  CHECK_THROWS_AS(gpt::save_checkpoint(dir.str(), cfg, layout, some_state(1), {both}), std::invalid_argument);
  CHECK_THROWS_AS(gpt::save_checkpoint(dir.str(), cfg, layout, some_state(1), {neither}), std::invalid_argument);
  // Control: each alone saves.
  gpt::CheckpointBuffer only64{"param", nullptr, 0, n, doubles.data()};
  CHECK_NOTHROW(gpt::save_checkpoint(dir.str(), cfg, layout, some_state(1), {only64}));
}
