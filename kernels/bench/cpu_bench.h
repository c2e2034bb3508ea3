/// @file
/// What the CPU benchmarks (bench_gemm_cpu, bench_attention_cpu) share: their command
/// lines (a wrong argument prints what is wrong and the program's usage to stderr and
/// exits with status 2) and their timing (the best of N runs after an untimed one, so a
/// shared machine's slow stretches weigh least).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace gpt::bench {

/// Prints "PROGRAM: WHY" and "usage: USAGE" to stderr, then exits with status 2.
[[noreturn]] inline void usage_error(const char* program, const char* usage, const std::string& why) {
  std::fprintf(stderr, "%s: %s\nusage: %s\n", program, why.c_str(), usage);
  std::exit(2);
}

/// The whole number `value` that follows `flag` (null when the flag came last), from 1 to
/// 2^20; anything else is a usage_error naming the flag.
inline int positive_arg(const char* program, const char* usage, const char* flag, const char* value) {
  char* end = nullptr;
  const long n = value ? std::strtol(value, &end, 10) : 0;
  if (!value || *end != '\0' || n < 1 || n > 1 << 20)
    usage_error(program, usage, std::string(flag) + " needs a whole number from 1 to 1048576");
  return int(n);
}

/// Calls run() once untimed, then `reps` times, and returns the fastest of those, in seconds.
template <class Run>
double best_seconds(int reps, Run&& run) {
  run();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace gpt::bench
