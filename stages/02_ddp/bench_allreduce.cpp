// bench_allreduce: the hand-written ring all-reduce against the backend's all-reduce
// (comm.all_reduce) and, with the MPI backend, the plain blocking MPI_Allreduce, on one
// fp32 buffer, on every rank of the job.
//
//   mpirun -np 4 build/bin/bench_allreduce [MiB=64] [reps=10] [piece_KiB]
//
// (piece_KiB: the ring's message size, default kRingPieceBytes.) Each repetition
// restores the input, waits at a barrier so all ranks start together, and times the
// call on every rank; a repetition takes as long as its slowest rank (the max over
// ranks). The implementations take turns, repetition by repetition, after one untimed
// warm-up call each, and the table reports each one's median. Columns:
//   ms         median time of one all-reduce
//   ring/this  the ring's time over this row's (above 1: the ring is slower)
//   algbw      size / time                  what the caller sees
//   busbw      size * 2(N-1)/N / time       the bytes each rank really sent (see
//                                           ring_allreduce.h): comparable across N
//                                           and with the links' own bandwidth
// (the two bandwidths as nccl-tests defines them).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#ifdef GPT_HAVE_MPI
#include <mpi.h>
#endif

#include "common/comm.h"
#include "common/error.h"
#include "stages/02_ddp/ring_allreduce.h"

using namespace gpt;

namespace {

// One implementation under test, and its time per repetition (the slowest rank's).
struct Candidate {
  std::string name;
  std::function<void()> run;
  std::vector<double> seconds;
  double median() const {
    std::vector<double> t = seconds;
    std::sort(t.begin(), t.end());
    const size_t mid = t.size() / 2;
    return t.size() % 2 ? t[mid] : 0.5 * (t[mid - 1] + t[mid]);
  }
};

// Times every candidate `reps` times, interleaved (ring, backend, ..., ring, backend,
// ...) so that a busy moment of the machine falls on all of them alike, not on one.
void time_candidates(Communicator& comm, int reps, const std::function<void()>& restore,
                     std::vector<Candidate>& candidates) {
  for (Candidate& c : candidates) {  // warm-up: first-touch page faults, connection set-up
    restore();
    c.run();
  }
  std::vector<double> per_rank(size_t(comm.size()));
  for (int rep = 0; rep < reps; ++rep)
    for (Candidate& c : candidates) {
      restore();
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      c.run();
      const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      comm.all_gather(&mine, per_rank.data(), 1, DType::F64);
      c.seconds.push_back(*std::max_element(per_rank.begin(), per_rank.end()));
    }
}

double parse_positive(const char* text, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  require(end != text && *end == '\0' && v > 0, std::string(what) + " must be a positive number, got '" + text + "'");
  return v;
}

int bench(Communicator& comm, int argc, char** argv) {
  require(argc <= 4, "usage: bench_allreduce [MiB=64] [reps=10] [piece_KiB]");
  const double mib = argc > 1 ? parse_positive(argv[1], "MiB") : 64.0;
  const int reps = argc > 2 ? int(parse_positive(argv[2], "reps")) : 10;
  const size_t piece_bytes =
      argc > 3 ? size_t(parse_positive(argv[3], "piece_KiB") * 1024) : kRingPieceBytes;
  const size_t count = size_t(mib * 1024 * 1024) / sizeof(float);
  const int n = comm.size();

  // Multiples of 1/8 below 1: sums over any practical number of ranks are exact, so
  // every implementation must give the same bits, a check that the timed code did the work.
  std::vector<float> input(count), buf(count), ring_result;
  for (size_t i = 0; i < count; ++i) input[i] = float((i + size_t(comm.rank())) % 8) / 8.0f;
  const auto restore = [&] { std::memcpy(buf.data(), input.data(), count * sizeof(float)); };

  std::vector<Candidate> candidates;
  candidates.push_back({"ring (stage 02)", [&] {
                          ring_all_reduce(comm, Device::CPU, buf.data(), count, DType::F32, piece_bytes);
                        }, {}});
  candidates.push_back({std::string("backend all_reduce (") + comm.backend() + ")",
                        [&] { comm.all_reduce(buf.data(), count, DType::F32); }, {}});
#ifdef GPT_HAVE_MPI
  // The backend posts MPI_Iallreduce and polls it (to time out on a lost peer and to
  // leave the core to other ranks while waiting); the plain blocking call is the
  // reference the ring is measured against (its target: at most 1.5x the time of this
  // call, docs/benchmarks/README.md). This communicator is the whole world.
  if (std::string(comm.backend()) == "mpi")
    candidates.push_back({"MPI_Allreduce (blocking)", [&] {
                            MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(count), MPI_FLOAT, MPI_SUM,
                                          MPI_COMM_WORLD);
                          }, {}});
#endif
  time_candidates(comm, reps, restore, candidates);

  // One more call of each, compared with the ring's result.
  double mismatch = 0;
  for (Candidate& c : candidates) {
    restore();
    c.run();
    if (ring_result.empty()) ring_result = buf;
    if (buf != ring_result) mismatch = 1;
  }
  comm.all_reduce(&mismatch, 1, DType::F64);

  if (comm.rank() == 0) {
    const double bytes = double(count) * sizeof(float);
    const double bus = n > 1 ? 2.0 * (n - 1) / n : 0.0;
    std::printf("all-reduce of fp32 over %d ranks, ring in pieces of %zu KiB; median of %d repetitions "
                "of the slowest rank\n",
                n, piece_bytes / 1024, reps);
    std::printf("%-28s %9s %6s %9s %10s %11s %11s\n", "implementation", "size_MiB", "ranks", "ms",
                "ring/this", "algbw_GB/s", "busbw_GB/s");
    const double ring_s = candidates[0].median();
    for (const Candidate& c : candidates) {
      const double t = c.median();
      std::printf("%-28s %9.2f %6d %9.2f %10.2f %11.2f %11.2f\n", c.name.c_str(), bytes / (1 << 20), n,
                  t * 1e3, ring_s / t, bytes / t * 1e-9, bytes * bus / t * 1e-9);
    }
    std::printf("results %s\n", mismatch > 0 ? "DIFFER between implementations" : "identical");
  }
  return mismatch > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<Communicator> comm;
  return run_main("bench_allreduce", [&] {
    comm = make_world(&argc, &argv, CommOptions{});
    return bench(*comm, argc, argv);
  });
}
