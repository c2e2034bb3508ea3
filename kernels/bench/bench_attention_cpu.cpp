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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/bench/cpu_bench.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/ops.h"

namespace {

constexpr const char* kProgram = "bench_attention_cpu";
constexpr const char* kUsage = "bench_attention_cpu [--reps N] [--tokens N]";

[[noreturn]] void usage(const std::string& why) { gpt::bench::usage_error(kProgram, kUsage, why); }
int positive(const char* flag, const char* value) { return gpt::bench::positive_arg(kProgram, kUsage, flag, value); }

}  // namespace

int main(int argc, char** argv) {
  int reps = 5, tokens = 1024;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps"))
      reps = positive("--reps", i + 1 < argc ? argv[++i] : nullptr);
    else if (!std::strcmp(argv[i], "--tokens"))
      tokens = positive("--tokens", i + 1 < argc ? argv[++i] : nullptr);
    else
      usage(std::string("unknown argument '") + argv[i] + "'");
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
    const double forward = gpt::bench::best_seconds(reps, [&] {
      gpt::cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, tile, tile);
    });
    const double backward = gpt::bench::best_seconds(reps, [&] {
      gpt::cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                                         NH, tile, tile);
    });
    std::printf("%6d %4d %12.2f %10.1f %12.2f %10.1f\n", T, B, forward * 1e3, 4.0 * hs * pairs / forward / 1e9,
                backward * 1e3, 10.0 * hs * pairs / backward / 1e9);
  }
  return 0;
}
