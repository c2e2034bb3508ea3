// bench_attention_cpu: the CPU flash attention (kernels/cpu/flash_attention.h) at GPT-2's
// attention shape, 12 heads of 64, causal, forward and backward, for each sequence length.
//
// The work counted is the causal pairs a head computes, T (T + 1) / 2 per head and sequence:
//   forward   2 products of that size (Q K^T, P V):                      4 hs flops a pair
//   backward  5 (Q K^T and dO V^T recomputed, P^T dO, dS^T Q, dS K):    10 hs flops a pair
// (the exps and the softmax's sums are not counted). Each row is the best of --reps timed
// runs after one untimed run, so a shared machine's slow stretches weigh least.
//
// Usage: bench_attention_cpu [--reps N] [--tokens N]
//   --tokens: each row runs tokens / T sequences (at least one), default 1024: the same
//             tokens at every length, so the rows differ only in the attention's span.
// OMP_NUM_THREADS sets the threads (the kernel splits the (sequence, head) pairs). The bf16
// op widens its operands to float and runs this same kernel.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "kernels/ops.h"

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "bench_attention_cpu: %s\nusage: bench_attention_cpu [--reps N] [--tokens N]\n", why);
  std::exit(2);
}

int positive(const char* flag, const char* value) {
  char* end = nullptr;
  const long n = value ? std::strtol(value, &end, 10) : 0;
  if (!value || *end != '\0' || n < 1 || n > 1 << 20) usage((std::string(flag) + " needs a whole number >= 1").c_str());
  return int(n);
}

template <class F>
double best_seconds(int reps, F&& run) {
  run();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5, tokens = 1024;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps"))
      reps = positive("--reps", i + 1 < argc ? argv[++i] : nullptr);
    else if (!std::strcmp(argv[i], "--tokens"))
      tokens = positive("--tokens", i + 1 < argc ? argv[++i] : nullptr);
    else
      usage((std::string("unknown argument '") + argv[i] + "'").c_str());
  }
  const int NH = 12, hs = 64, C = NH * hs, tile = gpt::ops::kCpuFlashTile;
  std::printf("CPU flash attention, causal, %d heads of %d, tiles %d x %d, %d threads, best of %d\n", NH, hs, tile,
              tile, omp_get_max_threads(), reps);
  std::printf("%6s %4s %12s %10s %12s %10s\n", "T", "B", "forward ms", "GFLOP/s", "backward ms", "GFLOP/s");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (const int T : {64, 256, 1024, 2048}) {
    const int B = std::max(1, tokens / T);
    std::vector<float> qkv(size_t(B) * T * 3 * C), out(size_t(B) * T * C), lse(size_t(B) * NH * T);
    std::vector<float> dout(out.size()), dqkv(qkv.size());
    for (float& x : qkv) x = normal(rng);
    for (float& x : dout) x = normal(rng);
    const double pairs = double(B) * NH * T * (T + 1) / 2;
    const double forward = best_seconds(reps, [&] {
      gpt::cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, tile, tile);
    });
    const double backward = best_seconds(reps, [&] {
      gpt::cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                                         NH, tile, tile);
    });
    std::printf("%6d %4d %12.2f %10.1f %12.2f %10.1f\n", T, B, forward * 1e3, 4.0 * hs * pairs / forward / 1e9,
                backward * 1e3, 10.0 * hs * pairs / backward / 1e9);
  }
  return 0;
}
