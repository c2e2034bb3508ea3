// save_checkpoint_sharded on N ranks (run under mpirun with N = 1, 2, 3, 4).
//
// Each rank holds the floor-rule slice [floor(r*P/N), floor((r+1)*P/N)) of the flat
// buffers (uneven for N = 3; the edges cut through tensors), filled with values that
// are distinct per element and per kind. After a sharded save:
//   (a) rank 0 loads the whole checkpoint and gets, bit for bit, the union of the
//       slices the ranks held;
//   (b) every rank loads its own slice back;
//   (c) the slices of other slicings (1 to N+1 ranks' worth, single elements, empty
//       slices) load correctly: a dp=4 checkpoint resumes at dp=2, or on one rank;
//   (d) the files and manifest are byte for byte those that save_checkpoint writes
//       from the whole buffers (the requirement for N = 1; checked for every N);
//   (e) the same with slices of doubles (the fp64 runs' state): fp64 files, loaded back
//       bit for bit, and a rank passing floats among ranks passing doubles is refused;
// and the failures: bad slicings and mismatched kinds are refused on every rank, a
// corrupt tensor in one rank's slice fails load_checkpoint_sharded on every rank,
// an error on one rank (rank 0 cannot create the run directory) is reported on every
// rank with the same message, a write that fails on the last rank alone leaves no
// step_N.tmp behind and the published step as it was, and saving a step again replaces it.
//
// No Catch2: in an MPI job a check that fails (or throws) on one rank must not leave
// the others waiting in a collective. Every rank runs every check, counts its own
// failures, and the counts are summed over ranks at the end; the job exits non-zero
// on every rank if any rank failed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "common/checkpoint.h"
#include "common/comm.h"
#include "common/config.h"
#include "common/error.h"
#include "common/gpt2_layout.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Failures of this rank; each is printed with the rank, so the log says who saw what.
class Checks {
 public:
  explicit Checks(int rank) : rank_(rank) {}

  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failures_;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank_, what.c_str());
  }

  // Runs a group of checks; an exception escaping it is one more failure, not a crash
  // (the other ranks may be about to enter a collective this rank would never reach).
  // So a body must only throw from local work, never between two collectives.
  template <class F>
  void run(const std::string& name, F&& body) {
    try {
      body();
    } catch (const std::exception& e) {
      expect(false, name + ": unexpected exception: " + e.what());
    }
  }

  int failures() const { return failures_; }

 private:
  int rank_;
  int failures_ = 0;
};

gpt::Config tiny_config() {
  gpt::Config cfg;
  cfg.model.n_layer = 2;
  cfg.model.n_embd = 16;
  cfg.model.n_head = 2;
  cfg.model.block_size = 8;
  cfg.model.vocab_size = 256;
  cfg.seq_len = 8;
  return cfg;
}

gpt::CheckpointState some_state(int64_t step, int ranks) {
  gpt::CheckpointState st;
  st.step = step;
  st.sample_counter = 777 + uint64_t(step);
  st.layout_json = R"({"dp":)" + std::to_string(ranks) + R"(,"tp":1,"pp":1,"cp":1})";
  return st;
}

const char* const kKinds[] = {"param", "adam_m", "adam_v"};

// The value of flat element i of kind k: distinct within a kind and across kinds
// (exact in fp32 for the ~11k elements of the tiny model), so a slice written at the
// wrong offset or into the wrong file cannot go unnoticed. `salt` makes a second,
// different checkpoint of the same step.
float value_of(int k, int64_t i, float salt) {
  const float x = float(i);
  switch (k) {
    case 0: return 0.25f * x + 1.0f + salt;
    case 1: return -0.5f * x - 3.0f - salt;
    default: return 1e-3f * x + 7.0f + salt;
  }
}

// Elements [begin, end) of the three kinds (element 0 of each vector is flat element
// `begin`), as CheckpointBuffers.
struct Slice {
  int64_t begin = 0, end = 0;
  std::vector<float> data[3];

  Slice(int64_t b, int64_t e) : begin(b), end(e) {
    for (auto& d : data) d.assign(size_t(e - b), 0.0f);
  }

  static Slice filled(int64_t b, int64_t e, float salt = 0.0f) {
    Slice s(b, e);
    for (int k = 0; k < 3; ++k)
      for (int64_t i = b; i < e; ++i) s.data[k][size_t(i - b)] = value_of(k, i, salt);
    return s;
  }

  // Where a load should write every element: NaN, so an element it skips shows.
  static Slice poisoned(int64_t b, int64_t e) {
    Slice s(b, e);
    for (auto& d : s.data) std::fill(d.begin(), d.end(), std::numeric_limits<float>::quiet_NaN());
    return s;
  }

  std::vector<gpt::CheckpointBuffer> buffers() {
    std::vector<gpt::CheckpointBuffer> out;
    for (int k = 0; k < 3; ++k) out.push_back({kKinds[k], data[k].data(), begin, end});
    return out;
  }
};

// Bit for bit (NaN == NaN, -0 != +0). An empty vector may have a null data(), which
// memcmp must not see even for zero bytes.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Rank r's part of the floor rule for n parts of p elements.
int64_t floor_split(int64_t p, int n, int r) { return int64_t(r) * p / n; }

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Root's string on every rank (length, then the bytes as two-byte elements).
std::string broadcast_string(gpt::Communicator& comm, std::string text, int root) {
  double length = double(text.size());
  comm.broadcast(&length, 1, gpt::DType::F64, root);
  text.resize(size_t(length) + size_t(length) % 2);
  if (!text.empty()) comm.broadcast(text.data(), text.size() / 2, gpt::DType::BF16, root);
  text.resize(size_t(length));
  return text;
}

// What a collective call threw on this rank: "" if nothing, else "<type>: message".
template <class F>
std::string error_of(F&& body) {
  try {
    body();
  } catch (const gpt::UserError& e) {
    return std::string("UserError: ") + e.what();
  } catch (const std::invalid_argument& e) {
    return std::string("invalid_argument: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
  return "";
}

// Every rank must have thrown, with the same type and message as rank 0, and the
// message must contain `needle`.
void expect_same_error_everywhere(gpt::Communicator& comm, Checks& checks, const std::string& name,
                                  const std::string& mine, const std::string& type,
                                  const std::string& needle) {
  const std::string rank0 = broadcast_string(comm, mine, 0);
  checks.expect(mine.rfind(type + ": ", 0) == 0, name + ": expected a " + type + ", got '" + mine + "'");
  checks.expect(mine.find(needle) != std::string::npos,
                name + ": message '" + mine + "' does not contain '" + needle + "'");
  checks.expect(mine == rank0, name + ": message '" + mine + "' differs from rank 0's '" + rank0 + "'");
}

int run(gpt::Communicator& comm) {
  const int n = comm.size(), rank = comm.rank();
  Checks checks(rank);
  const gpt::Config cfg = tiny_config();
  const gpt::ParamLayout layout(cfg.model);
  const int64_t total = layout.total();

  // A fresh directory that every rank sees (the ranks share this machine's disk).
  std::string dir;
  if (rank == 0) {
    std::random_device rd;
    dir = (fs::temp_directory_path() / ("gpt_ckpt_sharded_" + std::to_string(rd()))).string();
    fs::create_directories(dir);
  }
  dir = broadcast_string(comm, dir, 0);
  const std::string run_dir = dir + "/run";

  // This rank's slice, and a sanity check that the test tests something: for N > 1
  // some slice edge must cut through a tensor (the case load must read whole).
  const int64_t begin = floor_split(total, n, rank), end = floor_split(total, n, rank + 1);
  Slice mine = Slice::filled(begin, end);
  if (n > 1 && rank == 0) {
    bool cut = false;
    for (int r = 1; r < n; ++r)
      for (const gpt::ParamTensor& t : layout.tensors())
        cut = cut || (t.offset < floor_split(total, n, r) && floor_split(total, n, r) < t.offset + t.numel);
    checks.expect(cut, "no slice edge cuts a tensor: the test does not cover straddling tensors");
  }

  const gpt::CheckpointState state = some_state(100, n);
  std::string path;
  const std::string save_error = error_of([&] {
    path = gpt::save_checkpoint_sharded(comm, run_dir, cfg, layout, state, mine.buffers());
  });
  checks.expect(save_error.empty(), "sharded save failed: " + save_error);
  checks.expect(path == run_dir + "/step_00000100", "save returned '" + path + "'");
  checks.expect(gpt::latest_checkpoint(run_dir) == path, "latest_checkpoint does not find the checkpoint");
  checks.expect(!fs::exists(run_dir + "/step_00000100.tmp"), "the .tmp directory is left behind");

  // The union of what the ranks held, assembled through the communicator: each rank
  // puts its slice into a zero buffer and the sum over ranks (x + 0 = x exactly, the
  // slices are disjoint) is the whole buffer.
  std::vector<float> held[3];
  for (int k = 0; k < 3; ++k) {
    held[k].assign(size_t(total), 0.0f);
    std::copy(mine.data[k].begin(), mine.data[k].end(), held[k].begin() + begin);
    comm.all_reduce(held[k].data(), held[k].size(), gpt::DType::F32);
  }

  // (a) Rank 0 loads everything.
  if (rank == 0)
    checks.run("(a) whole load", [&] {
      Slice whole = Slice::poisoned(0, total);
      const gpt::CheckpointState got = gpt::load_checkpoint(path, layout, whole.buffers());
      checks.expect(got.step == state.step && got.sample_counter == state.sample_counter,
                    "(a) step or sample_counter differ");
      checks.expect(json::parse(got.layout_json) == json::parse(state.layout_json), "(a) layout differs");
      for (int k = 0; k < 3; ++k)
        checks.expect(same_bits(whole.data[k], held[k]),
                      std::string("(a) whole ") + kKinds[k] + " differs from the union of the slices");
    });

  // (b) Every rank loads its own slice.
  checks.run("(b) own slice", [&] {
    Slice back = Slice::poisoned(begin, end);
    gpt::load_checkpoint(path, layout, back.buffers());
    for (int k = 0; k < 3; ++k)
      checks.expect(same_bits(back.data[k], mine.data[k]),
                    std::string("(b) own slice of ") + kKinds[k] + " differs");
  });

  // (c) Other slicings: the floor rule for m = 1 .. N+1 parts (N-1 is the dp=4 ->
  // dp=2 resume), the ranks sharing the parts out; plus a single element in the
  // middle of a tensor and an empty slice.
  checks.run("(c) other slicings", [&] {
    auto load_and_compare = [&](int64_t b, int64_t e, const std::string& what) {
      Slice back = Slice::poisoned(b, e);
      gpt::load_checkpoint(path, layout, back.buffers());
      for (int k = 0; k < 3; ++k) {
        const std::vector<float> want(held[k].begin() + b, held[k].begin() + e);
        checks.expect(same_bits(back.data[k], want), "(c) " + what + " of " + kKinds[k] + " differs");
      }
    };
    int part = 0;
    for (int m = 1; m <= n + 1; ++m)
      for (int j = 0; j < m; ++j, ++part)
        if (part % n == rank)
          load_and_compare(floor_split(total, m, j), floor_split(total, m, j + 1),
                           "part " + std::to_string(j) + " of " + std::to_string(m));
    const gpt::ParamTensor& fc = layout.find("h.1.mlp.c_fc.weight");
    load_and_compare(fc.offset + 37, fc.offset + 38, "one element inside h.1.mlp.c_fc.weight");
    load_and_compare(fc.offset, fc.offset, "an empty slice");
  });

  // (d) The single writer, given the union, writes the same bytes. Rank 0 saves
  // save_checkpoint's version into another run directory and compares file by file.
  if (rank == 0)
    checks.run("(d) same as save_checkpoint", [&] {
      Slice whole(0, total);
      for (int k = 0; k < 3; ++k) whole.data[k] = held[k];
      const std::string single = gpt::save_checkpoint(dir + "/single", cfg, layout, state, whole.buffers());
      for (const char* kind : kKinds) {
        const std::string file = std::string(kind) + ".bin";
        const std::string a = file_text(fs::path(path) / file), b = file_text(fs::path(single) / file);
        checks.expect(a.size() == size_t(total) * 4, "(d) " + file + " has the wrong size");
        checks.expect(a == b, "(d) " + file + " differs from save_checkpoint's");
      }
      const std::string ma = file_text(fs::path(path) / "manifest.json");
      const std::string mb = file_text(fs::path(single) / "manifest.json");
      // Parsed into named objects: a range-for over json::parse(...)["tensors"] would
      // iterate a member of a temporary that is already destroyed (before C++23).
      const json table = json::parse(ma)["tensors"];
      checks.expect(table.dump() == json::parse(mb)["tensors"].dump(), "(d) the tensor tables differ");
      checks.expect(ma == mb, "(d) manifest.json differs from save_checkpoint's");
      for (const json& row : table)
        checks.expect(row["checksum"].is_string(), "(d) " + row["name"].get<std::string>() + " has no checksum");
    });

  // (e) The same slices as doubles, each value a third away from a float (so rounding
  // anywhere would show): fp64 files, the union loaded back bit for bit on rank 0, and
  // the bytes and manifest save_checkpoint writes from the whole buffers.
  {
    std::vector<double> mine64[3], held64[3];
    std::vector<gpt::CheckpointBuffer> buffers64;
    for (int k = 0; k < 3; ++k) {
      for (float x : mine.data[k]) mine64[k].push_back(double(x) + 1.0 / 3.0);
      buffers64.push_back({kKinds[k], nullptr, begin, end, mine64[k].data()});
      held64[k].assign(size_t(total), 0.0);
      std::copy(mine64[k].begin(), mine64[k].end(), held64[k].begin() + begin);
      comm.all_reduce(held64[k].data(), held64[k].size(), gpt::DType::F64);
    }
    std::string path64;
    const std::string error = error_of([&] {
      path64 = gpt::save_checkpoint_sharded(comm, dir + "/run64", cfg, layout, state, buffers64);
    });
    checks.expect(error.empty(), "(e) fp64 sharded save failed: " + error);
    if (rank == 0 && error.empty())
      checks.run("(e) fp64", [&] {
        std::vector<double> whole[3];
        std::vector<gpt::CheckpointBuffer> into;
        for (int k = 0; k < 3; ++k) {
          whole[k].assign(size_t(total), std::numeric_limits<double>::quiet_NaN());
          into.push_back({kKinds[k], nullptr, 0, total, whole[k].data()});
        }
        gpt::load_checkpoint(path64, layout, into);
        for (int k = 0; k < 3; ++k)
          checks.expect(whole[k].size() == held64[k].size() &&
                            std::memcmp(whole[k].data(), held64[k].data(), whole[k].size() * sizeof(double)) == 0,
                        std::string("(e) whole fp64 ") + kKinds[k] + " differs from the union of the slices");
        for (int k = 0; k < 3; ++k) into[size_t(k)].data64 = held64[k].data();
        const std::string single = gpt::save_checkpoint(dir + "/single64", cfg, layout, state, into);
        for (const char* file : {"param.bin", "adam_m.bin", "adam_v.bin", "manifest.json"}) {
          const std::string a = file_text(fs::path(path64) / file), b = file_text(fs::path(single) / file);
          checks.expect(a == b, std::string("(e) fp64 ") + file + " differs from save_checkpoint's");
        }
        checks.expect(file_text(fs::path(path64) / "param.bin").size() == size_t(total) * 8,
                      "(e) fp64 param.bin is not 8 bytes an element");
      });
    // Floats on the last rank, doubles on the others: one file cannot hold both.
    if (n > 1) {
      const std::string mixed = error_of([&] {
        gpt::save_checkpoint_sharded(comm, dir + "/mixed", cfg, layout, state,
                                     rank == n - 1 ? mine.buffers() : buffers64);
      });
      expect_same_error_everywhere(comm, checks, "mixed types", mixed, "invalid_argument",
                                   "passes the kinds [param (fp32), adam_m (fp32), adam_v (fp32)] but rank 0 "
                                   "passes [param (fp64), adam_m (fp64), adam_v (fp64)]");
    }
  }

  // Saving the same step again (a rerun) replaces the checkpoint.
  checks.run("resave", [&] {
    Slice second = Slice::filled(begin, end, /*salt=*/1000.0f);
    const std::string error = error_of([&] {
      gpt::save_checkpoint_sharded(comm, run_dir, cfg, layout, state, second.buffers());
    });
    checks.expect(error.empty(), "resave failed: " + error);
    Slice back = Slice::poisoned(begin, end);
    gpt::load_checkpoint(path, layout, back.buffers());
    for (int k = 0; k < 3; ++k)
      checks.expect(same_bits(back.data[k], second.data[k]),
                    std::string("resave: ") + kKinds[k] + " is not the second save's");
    checks.expect(!fs::exists(run_dir + "/step_00000100.old"), "resave: the .old directory is left behind");
  });

  // Refused slicings: every rank must get the same std::invalid_argument, and nothing
  // may be written. A gap: the last rank stops one element short.
  {
    Slice s = Slice::filled(begin, rank == n - 1 ? end - 1 : end);
    const std::string error = error_of([&] {
      gpt::save_checkpoint_sharded(comm, run_dir, cfg, layout, some_state(200, n), s.buffers());
    });
    expect_same_error_everywhere(comm, checks, "gap", error, "invalid_argument",
                                 "nobody holds [" + std::to_string(total - 1) + ", " + std::to_string(total) + ")");
  }
  // An overlap (every rank passes the whole buffer, as replicated data parallelism
  // holds it): only meaningful with two ranks or more.
  if (n > 1) {
    Slice s = Slice::filled(0, total);
    const std::string error = error_of([&] {
      gpt::save_checkpoint_sharded(comm, run_dir, cfg, layout, some_state(200, n), s.buffers());
    });
    expect_same_error_everywhere(comm, checks, "overlap", error, "invalid_argument", "overlaps");
    // Kinds that differ between ranks (the last rank leaves adam_v out).
    std::vector<gpt::CheckpointBuffer> buffers = mine.buffers();
    if (rank == n - 1) buffers.pop_back();
    const std::string kinds_error = error_of([&] {
      gpt::save_checkpoint_sharded(comm, run_dir, cfg, layout, some_state(200, n), buffers);
    });
    expect_same_error_everywhere(comm, checks, "kinds", kinds_error, "invalid_argument",
                                 "rank " + std::to_string(n - 1) + ": save_checkpoint_sharded: rank " +
                                     std::to_string(n - 1) + " passes the kinds [param (fp32), adam_m (fp32)]");
  }
  // An error in one rank's slice alone, on load: a copy of the checkpoint whose last
  // tensor (inside the last rank's slice, read by no other rank) has one corrupt value.
  // load_checkpoint_sharded must throw that rank's checksum error on every rank, where a
  // plain load would fail on the last rank only and leave the others going on.
  {
    const gpt::ParamTensor& last = layout.tensors().back();
    checks.expect(last.offset >= floor_split(total, n, n - 1), "the last tensor is not inside the last slice");
    const std::string corrupt = dir + "/corrupt";
    if (rank == 0) {
      fs::copy(path, corrupt, fs::copy_options::recursive);
      const json table = json::parse(file_text(fs::path(corrupt) / "manifest.json"))["tensors"];
      for (const json& row : table)
        if (row["name"] == "param/" + last.name) {
          std::fstream f(fs::path(corrupt) / row["file"].get<std::string>(),
                         std::ios::in | std::ios::out | std::ios::binary);
          const float bad = 12345.0f;
          f.seekp(row["offset"].get<int64_t>());
          f.write(reinterpret_cast<const char*>(&bad), sizeof bad);
          break;
        }
    }
    comm.barrier();
    Slice back = Slice::poisoned(begin, end);
    const std::string error = error_of([&] { gpt::load_checkpoint_sharded(comm, corrupt, layout, back.buffers()); });
    const std::string origin = n > 1 ? "rank " + std::to_string(n - 1) + ": " : "";
    expect_same_error_everywhere(comm, checks, "corrupt slice", error, "UserError",
                                 origin + "tensor param/" + last.name + " in ");
    checks.expect(error.find("fails its checksum") != std::string::npos, "corrupt slice: '" + error + "'");
    // The control: the intact checkpoint loads on every rank through the same call.
    const std::string fine = error_of([&] { gpt::load_checkpoint_sharded(comm, path, layout, back.buffers()); });
    checks.expect(fine.empty(), "load_checkpoint_sharded of the intact checkpoint failed: " + fine);
  }

  // An error on rank 0 alone: its run directory cannot be created (a regular file is
  // in the way). Every rank must fail with rank 0's UserError, not hang.
  {
    const std::string blocked = dir + "/not_a_directory";
    if (rank == 0) std::ofstream(blocked) << "x";
    comm.barrier();
    const std::string error = error_of([&] {
      gpt::save_checkpoint_sharded(comm, blocked + "/run", cfg, layout, state, mine.buffers());
    });
    expect_same_error_everywhere(comm, checks, "rank 0 error", error, "UserError",
                                 n > 1 ? "rank 0: cannot create run directory" : "cannot create run directory");
  }
  checks.expect(gpt::latest_checkpoint(run_dir) == path, "a refused save changed the run directory");

  // A write that fails on the last rank alone, after rank 0 has made the .tmp directory
  // and its files: that rank's param slice lies in memory the kernel cannot read, so its
  // pwrite fails with EFAULT, as a disk that fills up fails with ENOSPC. Every rank must
  // get the last rank's error, rank 0 must remove step_00000100.tmp, and the published
  // step 100 must keep its bytes.
  {
    const std::string published = file_text(fs::path(path) / "param.bin");
    std::vector<gpt::CheckpointBuffer> buffers = mine.buffers();
    const size_t unreadable_bytes = std::max<size_t>(1, size_t(end - begin) * sizeof(float));
    void* unreadable = nullptr;
    if (rank == n - 1) {
      unreadable = ::mmap(nullptr, unreadable_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      checks.expect(unreadable != MAP_FAILED, "mmap of an unreadable page failed");
      if (unreadable == MAP_FAILED) unreadable = nullptr;
      else buffers[0].data = static_cast<float*>(unreadable);
    }
    const std::string error = error_of([&] {
      gpt::save_checkpoint_sharded(comm, run_dir, cfg, layout, state, buffers);
    });
    if (unreadable) ::munmap(unreadable, unreadable_bytes);
    const std::string origin = n > 1 ? "rank " + std::to_string(n - 1) + ": " : "";
    expect_same_error_everywhere(comm, checks, "failed write", error, "UserError",
                                 origin + "cannot write " + run_dir + "/step_00000100.tmp/param.bin");
    checks.expect(!fs::exists(run_dir + "/step_00000100.tmp"), "failed write: step_00000100.tmp is left behind");
    checks.expect(file_text(fs::path(path) / "param.bin") == published, "failed write: the published step changed");
    checks.expect(gpt::latest_checkpoint(run_dir) == path, "failed write: latest_checkpoint moved");
  }

  // Tally over ranks; rank 0 removes the directory once every rank is done with it.
  double failures = checks.failures();
  comm.all_reduce(&failures, 1, gpt::DType::F64);
  if (rank == 0) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    std::printf("test_checkpoint_sharded on %d rank%s: %s (%g failed check%s over all ranks)\n", n,
                n == 1 ? "" : "s", failures == 0 ? "PASSED" : "FAILED", failures, failures == 1 ? "" : "s");
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

// Usage: mpirun -np N test_checkpoint_sharded [N]. With N given, the world must have
// N ranks: a build without the MPI backend would otherwise run N one-rank copies and
// pass without testing anything sharded.
int main(int argc, char** argv) {
  return gpt::run_main("test_checkpoint_sharded", [&] {
    std::unique_ptr<gpt::Communicator> world = gpt::make_world(&argc, &argv, {});
    if (argc > 1 && std::stoi(argv[1]) != world->size())
      gpt::fail("expected " + std::string(argv[1]) + " ranks but the world has " +
                std::to_string(world->size()) + " (" + world->backend() + " backend)");
    return run(*world);
  });
}
