// Checks for test programs that run on every rank of an MPI job without Catch2 (a rank
// that stopped at a failed check would leave the others blocked in a collective): each
// check counts and reports its failure, every rank runs every check, and the program
// sums the counts over the world at the end (finish).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/comm.h"
#include "common/error.h"

namespace gpt::test {

struct RankChecks {
  int rank = 0, failures = 0;

  void expect(bool ok, const std::string& what) {
    if (ok) return;
    if (++failures <= 30) std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  }
  // The failures of all ranks; rank 0 prints the verdict. Returns the exit status.
  int finish(Communicator& world, const char* program) {
    double all = failures;
    world.all_reduce(&all, 1, DType::F64);
    if (world.rank() == 0)
      std::printf("%s: %d ranks: %s (%d failed checks)\n", program, world.size(), all == 0 ? "PASS" : "FAIL", int(all));
    return all == 0 ? 0 : 1;
  }
};

// The world must have the ranks the test's launcher line asked for (GPT_TEST_RANKS, set by
// its CMake entry): a launcher that started N worlds of one rank each would otherwise pass
// every check trivially. Without the variable (a program run by hand) nothing is checked.
inline void require_world_size(const Communicator& world, const char* program) {
  const char* expected = std::getenv("GPT_TEST_RANKS");
  if (expected == nullptr || *expected == 0) return;
  if (world.size() != std::atoi(expected))
    fail(std::string(program) + ": GPT_TEST_RANKS=" + expected + ", but the world has " +
         std::to_string(world.size()) + " rank(s) (backend " + world.backend() + ")");
}

inline std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// max |got - want| / max |want| over n values; infinite when got has a NaN or infinity.
inline double normwise(const double* got, const double* want, size_t n) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - want[i])), scale = std::max(scale, std::fabs(want[i]));
  }
  return scale > 0 ? err / scale : err;
}

}  // namespace gpt::test
