// Shards and the data loader: the shard format round-trips and every malformed file
// is rejected by name; the loader's order is a permutation per epoch, depends only on
// (seed, data position) and is the same for every data-parallel / micro-batch layout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "common/data.h"
#include "common/token_stream.h"
#include "tests/temp_dir.h"
#include "common/error.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

// A fresh directory per test case, removed at the end.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("gpt_test_data") {}
};

// Writes a shard byte by byte, so the tests can build files write_shard never would.
void write_raw_shard(const std::string& path, int32_t magic, int32_t version, int32_t count,
                     const std::vector<uint16_t>& tokens, int extra_bytes = 0) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 256 * 4);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  for (int i = 0; i < extra_bytes; ++i) out.put('x');
}

void write_bytes(const std::string& path, size_t n) {
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < n; ++i) out.put('\0');
}

// Tokens 0, 1, 2, ...: token value = position, so a window is known by its first input.
std::vector<uint16_t> counting_tokens(int n) {
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) tokens[size_t(i)] = uint16_t(i);
  return tokens;
}

constexpr int kVocab = 50257;  // GPT-2's: every counting token below stays in range

// One loader over n counting tokens in a single shard.
struct CountingData {
  TempDir dir;
  std::string path;
  explicit CountingData(int n) : path(dir.file("train.bin")) { gpt::write_shard(path, counting_tokens(n)); }
  gpt::DataLoader loader(int seq_len, uint64_t seed) const {
    return gpt::DataLoader(path, kVocab, seq_len, seed);
  }
};

// Windows visited by epoch e, in order.
std::vector<int64_t> epoch_order(const gpt::DataLoader& loader, int64_t epoch) {
  std::vector<int64_t> order;
  const int64_t w = loader.num_windows();
  for (int64_t i = 0; i < w; ++i) order.push_back(loader.window_of(epoch * w + i));
  return order;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

// Step `step` of a run whose batch_size never changed: its first sequence (the data
// position) is step x batch_size.
Batch get_batch(const gpt::DataLoader& loader, int seq_len, int64_t step, int micro_step,
                int dp_rank, int dp, int micro_batch, int batch_size) {
  Batch b{std::vector<int32_t>(size_t(micro_batch * seq_len)),
          std::vector<int32_t>(size_t(micro_batch * seq_len))};
  loader.batch(step * batch_size, micro_step, dp_rank, dp, micro_batch, batch_size, b.inputs.data(),
               b.targets.data());
  return b;
}

}  // namespace

// ---- shard format ---------------------------------------------------------------

TEST_CASE("write_shard / read_shard round trip", "[data]") {
  TempDir dir;
  const std::string path = dir.file("round.bin");
  const std::vector<uint16_t> tokens = {0, 1, 255, 10, 42, 65535};
  gpt::write_shard(path, tokens);

  CHECK(gpt::read_shard(path, 65536) == tokens);
  CHECK(fs::file_size(path) == 1024 + 2 * tokens.size());
  CHECK_FALSE(fs::exists(path + ".tmp"));  // the temporary was renamed away

  // The header is llm.c's: magic, version, count as little-endian int32.
  std::ifstream in(path, std::ios::binary);
  int32_t header[3];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(header[2] == int32_t(tokens.size()));

  // Overwriting replaces the file.
  gpt::write_shard(path, {7, 8});
  CHECK(gpt::read_shard(path, 256) == std::vector<uint16_t>{7, 8});
}

TEST_CASE("write_shards puts a set in place all or none", "[data]") {
  TempDir dir;
  const std::string train = dir.file("train.bin"), val = dir.file("val.bin");
  const std::vector<uint16_t> old_train = {1, 2, 3}, old_val = {4, 5}, new_train = {9, 9, 9, 9}, new_val = {8};
  gpt::write_shards({{train, old_train}, {val, old_val}});
  SECTION("a target that is a directory is refused before anything is written") {
    const std::string dir_target = dir.file("dir.bin");
    fs::create_directory(dir_target);
    CHECK_THROWS_WITH(gpt::write_shards({{train, new_train}, {dir_target, new_val}}),
                      Contains("dir.bin") && Contains("not a regular file"));
    CHECK(gpt::read_shard(train, 256) == old_train);
    CHECK(fs::is_directory(dir_target));
  }
  SECTION("a file of the user's under the backup name is left alone") {
    // The old shards get a second name while the new ones go in place: not one taken.
    std::ofstream(train + ".old") << "my notes";
    fs::create_directories(val + ".old/inside");
    gpt::write_shards({{train, new_train}, {val, new_val}});
    CHECK(gpt::read_shard(train, 256) == new_train);
    CHECK(gpt::read_shard(val, 256) == new_val);
    std::ifstream notes(train + ".old");
    CHECK(std::string(std::istreambuf_iterator<char>(notes), {}) == "my notes");
    CHECK(fs::exists(val + ".old/inside"));
    for (const std::string& left : {train + ".old.1", val + ".old.1", train + ".tmp"}) CHECK_FALSE(fs::exists(left));
  }
  SECTION("a shard the disk refuses leaves the old set whole and no temporary behind") {
    // A file-size limit (SIGXFSZ ignored, so the write fails with EFBIG instead of ending
    // the process) lets the small train shard through and stops the large val shard.
    const std::vector<uint16_t> large_val(20000, 1);  // 40 KB
    struct rlimit old_limit {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    struct rlimit limit = old_limit;
    limit.rlim_cur = 16 * 1024;
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    std::string message;
    {
      // The limit and the handler are put back however the block ends (a failed REQUIRE).
      const std::unique_ptr<void, std::function<void(void*)>> restore(&limit, [&](void*) {
        ::setrlimit(RLIMIT_FSIZE, &old_limit);
        std::signal(SIGXFSZ, old_handler);
      });
      REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
      try {
        gpt::write_shards({{train, new_train}, {val, large_val}});
      } catch (const gpt::UserError& e) {
        message = e.what();
      }
    }
    CHECK_THAT(message, Contains("val.bin") && Contains("write failed"));
    CHECK(gpt::read_shard(train, 256) == old_train);
    CHECK(gpt::read_shard(val, 256) == old_val);
    std::vector<std::string> left;
    for (const auto& entry : fs::directory_iterator(fs::path(train).parent_path()))
      left.push_back(entry.path().filename().string());
    std::sort(left.begin(), left.end());
    CHECK(left == std::vector<std::string>{"train.bin", "val.bin"});
    // Control: without the limit the same set replaces the old one.
    gpt::write_shards({{train, new_train}, {val, large_val}});
    CHECK(gpt::read_shard(val, 256) == large_val);
  }
  SECTION("control: with nothing in the way the set is replaced, and no backup is left") {
    gpt::write_shards({{train, new_train}, {val, new_val}});
    CHECK(gpt::read_shard(train, 256) == new_train);
    CHECK(gpt::read_shard(val, 256) == new_val);
    CHECK_FALSE(fs::exists(train + ".old"));
    CHECK_FALSE(fs::exists(val + ".old"));
  }
}

TEST_CASE("read_shard accepts a shard that uses the whole vocabulary", "[data]") {
  TempDir dir;
  const std::string path = dir.file("edge.bin");
  gpt::write_shard(path, {0, 255});
  CHECK(gpt::read_shard(path, 256).size() == 2);
}

TEST_CASE("read_shard rejects bad shards, naming the file", "[data]") {
  TempDir dir;
  const std::vector<uint16_t> ten = counting_tokens(10);

  SECTION("missing file") {
    const std::string path = dir.file("missing_shard.bin");
    REQUIRE_THROWS_AS(gpt::read_shard(path, 256), gpt::UserError);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("missing_shard.bin") && Contains("no such file"));
  }
  SECTION("empty file") {
    const std::string path = dir.file("empty_shard.bin");
    write_bytes(path, 0);
    REQUIRE_THROWS_AS(gpt::read_shard(path, 256), gpt::UserError);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("empty_shard.bin") && Contains("empty"));
  }
  SECTION("shorter than the header") {
    const std::string path = dir.file("short_shard.bin");
    write_bytes(path, 100);
    REQUIRE_THROWS_AS(gpt::read_shard(path, 256), gpt::UserError);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("short_shard.bin") && Contains("header"));
  }
  SECTION("wrong magic") {
    const std::string path = dir.file("magic_shard.bin");
    write_raw_shard(path, 12345, 1, 10, ten);
    REQUIRE_THROWS_AS(gpt::read_shard(path, 256), gpt::UserError);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("magic_shard.bin") && Contains("magic") && Contains("12345"));
  }
  SECTION("wrong version") {
    const std::string path = dir.file("version_shard.bin");
    write_raw_shard(path, 20240520, 2, 10, ten);
    REQUIRE_THROWS_AS(gpt::read_shard(path, 256), gpt::UserError);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("version_shard.bin") && Contains("version 2"));
  }
  SECTION("negative count") {
    const std::string path = dir.file("negative_shard.bin");
    write_raw_shard(path, 20240520, 1, -5, ten);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("negative_shard.bin") && Contains("-5"));
  }
  SECTION("truncated payload") {
    const std::string path = dir.file("truncated_shard.bin");
    write_raw_shard(path, 20240520, 1, 11, ten);  // header says 11, file has 10
    REQUIRE_THROWS_AS(gpt::read_shard(path, 256), gpt::UserError);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("truncated_shard.bin") && Contains("truncated"));
  }
  SECTION("odd trailing byte") {
    const std::string path = dir.file("trailing_shard.bin");
    write_raw_shard(path, 20240520, 1, 10, ten, 1);
    REQUIRE_THROWS_AS(gpt::read_shard(path, 256), gpt::UserError);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("trailing_shard.bin") && Contains("1 trailing bytes"));
  }
  SECTION("whole extra tokens") {
    const std::string path = dir.file("long_shard.bin");
    write_raw_shard(path, 20240520, 1, 9, ten);  // header says 9, file has 10
    REQUIRE_THROWS_AS(gpt::read_shard(path, 256), gpt::UserError);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("long_shard.bin") && Contains("2 trailing bytes"));
  }
  SECTION("token out of the vocabulary") {
    const std::string path = dir.file("vocab_shard.bin");
    std::vector<uint16_t> tokens = ten;
    tokens[7] = 300;
    gpt::write_shard(path, tokens);
    REQUIRE_THROWS_AS(gpt::read_shard(path, 256), gpt::UserError);
    // Names the file, the token's index and byte offset, its value and the vocab.
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("vocab_shard.bin") && Contains("token 7") &&
                            Contains("1038") && Contains("300") && Contains("256"));
    CHECK(gpt::read_shard(path, 301).size() == 10);  // fine under a larger vocabulary
  }
  SECTION("a directory") {
    const std::string path = dir.file("dir_shard.bin");
    fs::create_directories(path);
    REQUIRE_THROWS_WITH(gpt::read_shard(path, 256),
                        Contains("dir_shard.bin") && Contains("not a regular file"));
  }
}

// ---- file lists -----------------------------------------------------------------

TEST_CASE("expand_shards sorts glob matches and names what is missing", "[data]") {
  TempDir dir;
  for (const char* name : {"shard_002.bin", "shard_000.bin", "shard_010.bin", "shard_001.bin",
                           "other.txt"}) {
    gpt::write_shard(dir.file(name), {1, 2, 3});
  }

  CHECK(gpt::expand_shards(dir.file("shard_*.bin")) ==
        std::vector<std::string>{dir.file("shard_000.bin"), dir.file("shard_001.bin"),
                                 dir.file("shard_002.bin"), dir.file("shard_010.bin")});
  CHECK(gpt::expand_shards(dir.file("shard_00?.bin")).size() == 3);
  CHECK(gpt::expand_shards(dir.file("other.txt")) ==
        std::vector<std::string>{dir.file("other.txt")});

  REQUIRE_THROWS_AS(gpt::expand_shards(dir.file("nomatch_*.bin")), gpt::UserError);
  REQUIRE_THROWS_WITH(gpt::expand_shards(dir.file("nomatch_*.bin")), Contains("nomatch_*.bin"));
  REQUIRE_THROWS_AS(gpt::expand_shards(dir.file("absent.bin")), gpt::UserError);
  REQUIRE_THROWS_WITH(gpt::expand_shards(dir.file("absent.bin")),
                      Contains("absent.bin") && Contains("does not exist"));
}

TEST_CASE("expand_shards: a file named as written is that file, pattern characters and all", "[data]") {
  TempDir dir;
  gpt::write_shard(dir.file("s1.bin"), {1, 2, 3});
  // Absent, "s[1].bin" is a pattern, and s1.bin is what it matches (the control) ...
  CHECK(gpt::expand_shards(dir.file("s[1].bin")) == std::vector<std::string>{dir.file("s1.bin")});
  // ... present, it is itself, not the other file.
  gpt::write_shard(dir.file("s[1].bin"), {4, 5, 6, 7});
  CHECK(gpt::expand_shards(dir.file("s[1].bin")) == std::vector<std::string>{dir.file("s[1].bin")});
}

TEST_CASE("expand_shards and the shard check name a path that cannot be looked up, and why", "[data]") {
  TempDir dir;
  std::filesystem::create_symlink(dir.file("loop2.bin"), dir.file("loop1.bin"));
  std::filesystem::create_symlink(dir.file("loop1.bin"), dir.file("loop2.bin"));
  // Named: a UserError naming the file and the system's reason, not a filesystem_error.
  REQUIRE_THROWS_AS(gpt::expand_shards(dir.file("loop1.bin")), gpt::UserError);
  REQUIRE_THROWS_WITH(gpt::expand_shards(dir.file("loop1.bin")),
                      Contains("loop1.bin") && Contains("cannot look it up") && Contains("symbolic links"));
  REQUIRE_THROWS_WITH(gpt::expand_shards(dir.file(std::string(300, 'x') + ".bin")), Contains("too long"));
  // Matched by a pattern, the shard check says the same, not "no such file".
  REQUIRE_THROWS_WITH(gpt::shard_token_count(dir.file("loop1.bin")),
                      Contains("loop1.bin") && Contains("cannot look it up") && Contains("symbolic links"));
}

TEST_CASE("expand_shards refuses a pattern that matches one file under two names", "[data]") {
  TempDir dir;
  gpt::write_shard(dir.file("a.bin"), {1, 2, 3});
  gpt::write_shard(dir.file("b.bin"), {1, 2, 3});  // the same tokens, another file
  CHECK(gpt::expand_shards(dir.file("*.bin")).size() == 2);  // control: two files, two shards
  std::filesystem::remove(dir.file("b.bin"));
  std::filesystem::create_symlink(dir.file("a.bin"), dir.file("b.bin"));
  REQUIRE_THROWS_WITH(gpt::expand_shards(dir.file("*.bin")),
                      Contains("matches one file twice") && Contains("a.bin") && Contains("b.bin"));
}

// ---- the loader -----------------------------------------------------------------

TEST_CASE("loader concatenates shards in sorted order and cuts windows at stride T", "[data]") {
  TempDir dir;
  // 0..99 split over three shards written out of order; windows cross shard edges.
  const std::vector<uint16_t> all = counting_tokens(100);
  gpt::write_shard(dir.file("part_2.bin"), {all.begin() + 70, all.end()});
  gpt::write_shard(dir.file("part_0.bin"), {all.begin(), all.begin() + 33});
  gpt::write_shard(dir.file("part_1.bin"), {all.begin() + 33, all.begin() + 70});

  const int T = 8;
  const gpt::DataLoader loader(dir.file("part_*.bin"), 256, T, 1);
  CHECK(loader.num_tokens() == 100);
  CHECK(loader.num_windows() == (100 - 1) / T);

  // Validation batches are windows k*n .. k*n+n-1 in order, wrapping around.
  const int n = 5;
  std::vector<int32_t> in(size_t(n * T)), tg(size_t(n * T));
  loader.sequential_batch(0, n, in.data(), tg.data());
  for (int b = 0; b < n; ++b) {
    for (int t = 0; t < T; ++t) {
      CHECK(in[size_t(b * T + t)] == b * T + t);  // tokens == positions, in file order
      CHECK(tg[size_t(b * T + t)] == b * T + t + 1);
    }
  }
  loader.sequential_batch(2, n, in.data(), tg.data());  // windows 10, 11, 12->0, 1, 2
  CHECK(in[0] == 10 * T);
  CHECK(in[size_t(2 * T)] == 0);
  CHECK(in[size_t(4 * T)] == 2 * T);
}

TEST_CASE("loader: every window exactly once per epoch, a new order each epoch", "[data]") {
  // Window counts that are 1, 2, prime, a power of two and highly composite, so the
  // search for a multiplier coprime to W is exercised.
  for (int windows : {1, 2, 3, 7, 12, 16, 30, 97, 360}) {
    const int T = 4;
    CountingData data(windows * T + 1);
    const gpt::DataLoader loader = data.loader(T, 1234);
    REQUIRE(loader.num_windows() == windows);

    std::set<std::vector<int64_t>> orders;
    for (int64_t epoch = 0; epoch < 6; ++epoch) {
      const std::vector<int64_t> order = epoch_order(loader, epoch);
      const std::set<int64_t> seen(order.begin(), order.end());
      INFO("windows " << windows << ", epoch " << epoch);
      CHECK(seen.size() == size_t(windows));
      CHECK(*seen.begin() == 0);
      CHECK(*seen.rbegin() == windows - 1);
      orders.insert(order);
    }
    if (windows >= 12) {
      INFO("windows " << windows);
      CHECK(epoch_order(loader, 0) != epoch_order(loader, 1));
      CHECK(epoch_order(loader, 1) != epoch_order(loader, 2));
      CHECK(orders.size() >= 4);
    }
  }
}

TEST_CASE("loader: the order depends on the seed", "[data]") {
  CountingData data(30 * 4 + 1);
  CHECK(epoch_order(data.loader(4, 1), 0) == epoch_order(data.loader(4, 1), 0));
  CHECK(epoch_order(data.loader(4, 1), 0) != epoch_order(data.loader(4, 2), 0));
}

TEST_CASE("loader: targets are the inputs shifted by one token", "[data]") {
  const int T = 16;
  CountingData data(50 * T + 3);  // a few tokens past the last window are never used
  const gpt::DataLoader loader = data.loader(T, 7);
  const int mb = 4;
  const Batch b = get_batch(loader, T, 3, 0, 0, 1, mb, mb);
  for (int s = 0; s < mb; ++s) {
    const int32_t start = b.inputs[size_t(s * T)];
    CHECK(start % T == 0);  // windows start at multiples of T
    for (int t = 0; t < T; ++t) {
      CHECK(b.inputs[size_t(s * T + t)] == start + t);
      CHECK(b.targets[size_t(s * T + t)] == start + t + 1);
    }
  }
}

TEST_CASE("loader: same (seed, step) gives the same batch, whatever came before", "[data]") {
  const int T = 4;
  CountingData data(37 * T + 1);
  const gpt::DataLoader first = data.loader(T, 99);
  // Walk steps 0..19 (several epochs), keeping step 13.
  Batch walked;
  for (int64_t step = 0; step < 20; ++step) {
    const Batch b = get_batch(first, T, step, 0, 0, 1, 6, 6);
    if (step == 13) walked = b;
  }
  // A fresh loader asked for step 13 directly, as on resume, agrees.
  const gpt::DataLoader resumed = data.loader(T, 99);
  CHECK(get_batch(resumed, T, 13, 0, 0, 1, 6, 6) == walked);
  CHECK(get_batch(first, T, 13, 0, 0, 1, 6, 6) == walked);
  // Different steps and different seeds give different batches.
  CHECK(get_batch(resumed, T, 14, 0, 0, 1, 6, 6) != walked);
  CHECK(get_batch(data.loader(T, 100), T, 13, 0, 0, 1, 6, 6) != walked);
}

TEST_CASE("loader: a larger batch from a data position reads on where the smaller one stopped", "[data]") {
  // Three steps of 6 sequences read sequences 0..17; a resumed run with batches of 12
  // starts at position 18, and its step is the smaller batch's steps 3 and 4 together,
  // across an epoch boundary too (37 windows).
  const int T = 4;
  CountingData data(37 * T + 1);
  const gpt::DataLoader loader = data.loader(T, 99);
  for (int64_t steps_before : {3, 6}) {
    INFO("resumed after " << steps_before << " steps of 6");
    const Batch a = get_batch(loader, T, steps_before, 0, 0, 1, 6, 6);
    const Batch b = get_batch(loader, T, steps_before + 1, 0, 0, 1, 6, 6);
    Batch twelve{std::vector<int32_t>(size_t(12 * T)), std::vector<int32_t>(size_t(12 * T))};
    loader.batch(steps_before * 6, 0, 0, 1, 12, 12, twelve.inputs.data(), twelve.targets.data());
    Batch joined = a;
    joined.inputs.insert(joined.inputs.end(), b.inputs.begin(), b.inputs.end());
    joined.targets.insert(joined.targets.end(), b.targets.begin(), b.targets.end());
    CHECK(twelve == joined);
    // Negative control: the position taken as step x the new batch (36, or 72) is
    // other sequences: the data a resume with a larger batch would skip.
    loader.batch(steps_before * 12, 0, 0, 1, 12, 12, twelve.inputs.data(), twelve.targets.data());
    CHECK_FALSE(twelve == joined);
  }
}

TEST_CASE("loader: a step's batch is the same for every dp x micro-batch layout", "[data]") {
  const int T = 4, batch_size = 12;
  CountingData data(29 * T + 1);  // 29 windows: steps straddle epoch boundaries
  const gpt::DataLoader loader = data.loader(T, 5);

  for (int64_t step : {0, 1, 2, 7}) {
    // Reference: the whole batch in one micro-step on one rank.
    const Batch whole = get_batch(loader, T, step, 0, 0, 1, batch_size, batch_size);
    for (int dp : {1, 2, 3, 4, 6, 12}) {
      for (int mb = 1; mb * dp <= batch_size; ++mb) {
        if (batch_size % (mb * dp) != 0) continue;
        const int micro_steps = batch_size / (mb * dp);
        // Reassemble the global batch: sequence g = (micro_step*dp + rank)*mb + b.
        Batch assembled{std::vector<int32_t>(whole.inputs.size()),
                        std::vector<int32_t>(whole.targets.size())};
        for (int ms = 0; ms < micro_steps; ++ms) {
          for (int rank = 0; rank < dp; ++rank) {
            const Batch part = get_batch(loader, T, step, ms, rank, dp, mb, batch_size);
            const size_t offset = size_t((ms * dp + rank) * mb * T);
            std::copy(part.inputs.begin(), part.inputs.end(), assembled.inputs.begin() + long(offset));
            std::copy(part.targets.begin(), part.targets.end(), assembled.targets.begin() + long(offset));
          }
        }
        INFO("step " << step << ", dp " << dp << ", micro_batch " << mb);
        CHECK(assembled == whole);
      }
    }
  }
}

TEST_CASE("loader: consecutive steps walk the epochs in permutation order", "[data]") {
  // 10 windows, 4 sequences a step: steps 0..4 are exactly two epochs.
  const int T = 4;
  CountingData data(10 * T + 1);
  const gpt::DataLoader loader = data.loader(T, 3);
  std::vector<int> visits(10, 0);
  std::vector<int64_t> sequence;
  for (int64_t step = 0; step < 5; ++step) {
    const Batch b = get_batch(loader, T, step, 0, 0, 1, 4, 4);
    for (int s = 0; s < 4; ++s) {
      const int64_t window = b.inputs[size_t(s * T)] / T;
      ++visits[size_t(window)];
      sequence.push_back(window);
    }
  }
  CHECK(visits == std::vector<int>(10, 2));
  for (int64_t j = 0; j < 20; ++j) CHECK(sequence[size_t(j)] == loader.window_of(j));
}

TEST_CASE("loader: clear errors for too little data and bad positions", "[data]") {
  const int T = 8;
  CountingData data(T);  // T tokens: one short of a window
  REQUIRE_THROWS_AS(data.loader(T, 1), gpt::UserError);
  REQUIRE_THROWS_WITH(data.loader(T, 1),
                      Contains("train.bin") && Contains("8 tokens") && Contains("seq_len 8"));
  CHECK(data.loader(T - 1, 1).num_windows() == 1);
  {  // 2T tokens hold one window of T inputs and their T shifted targets, not two: a
     // second would need token 2T as its last target (W = floor((n - 1) / T), data.h)
    CountingData exact(2 * T);
    CHECK(exact.loader(T, 1).num_windows() == 1);
    CountingData one_more(2 * T + 1);
    CHECK(one_more.loader(T, 1).num_windows() == 2);
  }

  REQUIRE_THROWS_WITH(gpt::DataLoader(data.dir.file("nothing_*.bin"), kVocab, T, 1),
                      Contains("nothing_*.bin"));

  CountingData big(10 * T + 1);
  const gpt::DataLoader loader = big.loader(T, 1);
  std::vector<int32_t> in(size_t(4 * T)), tg(size_t(4 * T));
  // first_sequence, micro_step, dp_rank, dp, micro_batch, batch_size
  REQUIRE_THROWS_WITH(loader.batch(0, 0, 2, 2, 1, 4, in.data(), tg.data()), Contains("dp_rank 2"));
  REQUIRE_THROWS_WITH(loader.batch(0, 0, -1, 2, 1, 4, in.data(), tg.data()), Contains("dp_rank -1"));
  REQUIRE_THROWS_WITH(loader.batch(0, 0, 0, 0, 1, 4, in.data(), tg.data()), Contains("dp"));
  REQUIRE_THROWS_WITH(loader.batch(0, 0, 0, 1, 0, 4, in.data(), tg.data()), Contains("micro_batch"));
  REQUIRE_THROWS_WITH(loader.batch(0, 0, 0, 2, 2, 6, in.data(), tg.data()), Contains("batch_size 6"));
  REQUIRE_THROWS_WITH(loader.batch(0, 2, 0, 2, 1, 4, in.data(), tg.data()), Contains("micro_step 2"));
  REQUIRE_THROWS_WITH(loader.batch(-1, 0, 0, 1, 1, 4, in.data(), tg.data()), Contains("first sequence -1"));
  REQUIRE_THROWS_AS(loader.window_of(-1), gpt::UserError);
  REQUIRE_THROWS_AS(loader.sequential_batch(0, 0, in.data(), tg.data()), gpt::UserError);
}

TEST_CASE("loader: the loader of no data has no windows and gives no batch", "[data]") {
  const gpt::DataLoader none = gpt::DataLoader::none(8);
  CHECK(none.num_windows() == 0);
  CHECK(none.num_tokens() == 0);
  CHECK(none.seq_len() == 8);
  std::vector<int32_t> in(16), tg(16);
  REQUIRE_THROWS_AS(none.sequential_batch(0, 2, in.data(), tg.data()), gpt::InternalError);
  REQUIRE_THROWS_AS(none.batch(0, 0, 0, 1, 2, 2, in.data(), tg.data()), gpt::InternalError);
}

TEST_CASE("loader: a bad shard among good ones is reported by name", "[data]") {
  TempDir dir;
  gpt::write_shard(dir.file("s_0.bin"), counting_tokens(100));
  std::vector<uint16_t> bad = counting_tokens(100);
  bad[50] = 256;
  gpt::write_shard(dir.file("s_1.bin"), bad);
  REQUIRE_THROWS_WITH(gpt::DataLoader(dir.file("s_*.bin"), 256, 8, 1),
                      Contains("s_1.bin") && Contains("256"));
}

// ---- the mapped token stream ----------------------------------------------------

TEST_CASE("token stream: copies across shard edges and empty shards, in sorted order", "[data]") {
  TempDir dir;
  const std::vector<uint16_t> all = counting_tokens(50);
  gpt::write_shard(dir.file("p_0.bin"), {all.begin(), all.begin() + 7});
  gpt::write_shard(dir.file("p_1.bin"), {});  // an empty shard between two others
  gpt::write_shard(dir.file("p_2.bin"), {all.begin() + 7, all.begin() + 8});  // one token
  gpt::write_shard(dir.file("p_3.bin"), {all.begin() + 8, all.end()});
  const gpt::TokenStream stream(dir.file("p_*.bin"), 256);
  REQUIRE(stream.size() == 50);
  // Every (first, n) range: token value = position, so each element is known.
  for (int64_t first = 0; first <= 50; ++first) {
    for (int64_t n = 0; first + n <= 50; ++n) {
      std::vector<int32_t> out(size_t(n) + 1, -1);
      stream.copy(first, n, out.data());
      for (int64_t i = 0; i < n; ++i) REQUIRE(out[size_t(i)] == first + i);
      REQUIRE(out[size_t(n)] == -1);  // nothing written past n
    }
  }
  std::vector<int32_t> out(4);
  REQUIRE_THROWS_AS(stream.copy(48, 3, out.data()), gpt::InternalError);
  REQUIRE_THROWS_AS(stream.copy(-1, 1, out.data()), gpt::InternalError);
  // Moved, the stream keeps its tokens and the source holds none.
  gpt::TokenStream moved = gpt::TokenStream(dir.file("p_*.bin"), 256);
  gpt::TokenStream target = std::move(moved);
  CHECK(moved.size() == 0);
  target.copy(6, 3, out.data());
  CHECK(out[0] == 6);
  CHECK(out[2] == 8);
}

// A shard rewritten in place after the stream checked it (the mapping shows the new bytes):
// a token now outside the vocabulary is an error naming the shard and the token when a
// copy reads it, not a token handed to the model. Control: a copy that does not reach it
// goes on as before.
TEST_CASE("token stream: a token rewritten in place outside the vocabulary is named with its shard", "[data]") {
  TempDir dir;
  gpt::write_shard(dir.file("q_0.bin"), counting_tokens(20));
  gpt::write_shard(dir.file("q_1.bin"), counting_tokens(20));
  const gpt::TokenStream stream(dir.file("q_*.bin"), 64);
  {
    std::fstream f(dir.file("q_1.bin"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1024 + 2 * 5);  // the header's 1024 bytes, then token 5 of the second shard
    const uint16_t bad = 300;
    f.write(reinterpret_cast<const char*>(&bad), sizeof bad);
  }
  std::vector<int32_t> out(8);
  stream.copy(16, 8, out.data());  // tokens 16..19 of q_0, 0..3 of q_1: not the rewritten one
  CHECK(out[7] == 3);
  REQUIRE_THROWS_AS(stream.copy(18, 8, out.data()), gpt::UserError);
  REQUIRE_THROWS_WITH(stream.copy(18, 8, out.data()),
                      Contains("q_1.bin") && Contains("token 5 is now 300") && Contains("vocab_size 64"));
}

namespace {

// A field of /proc/self/status in kB ("RssAnon:     1234 kB"), or -1 where there is none.
int64_t status_kb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (status >> key) {
    if (key == field + ":") {
      status >> value;
      return value;
    }
    std::getline(status, unit);
  }
  return -1;
}

}  // namespace

TEST_CASE("loader: a split is the files' shared pages, not a copy in the rank's own memory", "[data]") {
  REQUIRE(status_kb("RssAnon") >= 0);  // Linux (the only system the project builds on) has it
  TempDir dir;
  const std::string path = dir.file("big.bin");
  constexpr int64_t kTokens = int64_t(32) << 20;  // 64 MiB of tokens
  {
    std::vector<uint16_t> tokens(size_t(kTokens), 7);
    gpt::write_shard(path, tokens);
  }  // freed: the measurements below start without it
  // A copy of the tokens would add their 64 MiB to the process's anonymous memory; the
  // mapping adds them to its file-backed pages instead (the validation reads them all).
  // The threshold, half the shard, leaves room for the allocator's and the kernel's
  // counting slack on either side.
  constexpr int64_t kHalfShardKb = kTokens * 2 / 1024 / 2;
  const int64_t anon_before = status_kb("RssAnon"), file_before = status_kb("RssFile");
  const gpt::DataLoader loader(path, 256, 64, 1);
  REQUIRE(loader.num_tokens() == kTokens);
  CHECK(status_kb("RssAnon") - anon_before < kHalfShardKb);
  CHECK(status_kb("RssFile") - file_before > kHalfShardKb);
  std::vector<int32_t> in(64), tg(64);
  loader.batch(0, 0, 0, 1, 1, 1, in.data(), tg.data());
  CHECK(in == std::vector<int32_t>(64, 7));
  // Control: read_shard's copy is seen by the same measurement.
  const int64_t anon_mapped = status_kb("RssAnon");
  const std::vector<uint16_t> copied = gpt::read_shard(path, 256);
  CHECK(status_kb("RssAnon") - anon_mapped > kHalfShardKb);
}
