// cpu_peak: measures this machine's fp32 fused-multiply-add peak, in GFLOP/s.
//
// The peak is what the FMA units can do when nothing else limits them: every
// thread runs ACC independent chains x <- x * a + b on registers only (no memory
// traffic). One FMA on a vector of W floats counts 2 * W flops. A chain waits for
// its previous FMA (latency ~4 cycles) while the core can start ~2 FMAs per cycle,
// so at least 2 x 4 = 8 chains must be in flight; ACC = 12 covers that with room
// and still fits in the register file (12 accumulators + a + b: 14 of 16 ymm or of
// 32 zmm registers).
//
// The figure is the denominator of scripts/bench_cpu.sh's "share of peak". It is
// measured, not computed from a datasheet, so it includes the clock the cores really
// run at with every thread busy (AVX-512 and all-core turbo lower it).
//
// Usage: cpu_peak [seconds]   (default 0.5 s per measurement; OMP_NUM_THREADS is honoured)
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace {

// The widest vector the compiler targets: 64 bytes with AVX-512, else 32 (AVX) or 16.
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif
typedef float vec __attribute__((vector_size(kVectorBytes)));
constexpr int W = kVectorBytes / int(sizeof(float));  // floats per vector
constexpr int ACC = 12;                                // independent FMA chains per thread

// Read through a volatile so the compiler cannot fold the recurrence at compile time.
volatile float g_a = 0.999999f, g_b = 1e-6f;
volatile float g_sink = 0.f;  // the result is stored here, so the loop cannot be removed

// Runs `iters` rounds of ACC FMAs on one thread; returns a value depending on all of them.
float fma_chains(long iters, int seed) {
  vec a, b, x[ACC];
  for (int l = 0; l < W; ++l) {
    a[l] = g_a;
    b[l] = g_b;
  }
  for (int k = 0; k < ACC; ++k)
    for (int l = 0; l < W; ++l) x[k][l] = float(seed + k + l) * 1e-3f;
  for (long i = 0; i < iters; ++i) {
    // x converges to b / (1 - a) = 1: no overflow, no denormals, no early exit.
#pragma GCC unroll 12
    for (int k = 0; k < ACC; ++k) x[k] = x[k] * a + b;
  }
  vec s = x[0];
  for (int k = 1; k < ACC; ++k) s += x[k];
  float total = 0.f;
  for (int l = 0; l < W; ++l) total += s[l];
  return total;
}

double flops_of(long iters, int threads) { return 2.0 * W * ACC * double(iters) * threads; }

// Best GFLOP/s of `reps` runs of `iters` rounds on `threads` threads (all start together).
double measure(long iters, int threads, int reps) {
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    float sum = 0.f;
    double t0 = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    sum += fma_chains(iters, omp_get_thread_num());
    double t1 = omp_get_wtime();
    g_sink = g_sink + sum;
    best = std::max(best, flops_of(iters, threads) / (t1 - t0) * 1e-9);
  }
  return best;
}

// Rounds per thread that take about `seconds` on this machine (one thread, warm).
long calibrate(double seconds) {
  long iters = 1 << 16;
  for (;;) {
    double t0 = omp_get_wtime();
    g_sink = g_sink + fma_chains(iters, 0);
    double dt = omp_get_wtime() - t0;
    if (dt > 0.05) return std::max(1L, long(double(iters) * seconds / dt));
    iters *= 4;
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  if (!(seconds > 0.0) || seconds > 60.0) {
    std::fprintf(stderr, "usage: %s [seconds per measurement, 0 < s <= 60]\n", argv[0]);
    return 2;
  }
  const int threads = omp_get_max_threads();
  constexpr int reps = 3;
  const long iters = calibrate(seconds / reps);

  double one = measure(iters, 1, reps);
  double all = measure(iters, threads, reps);

  std::printf("vector width %d floats, %d chains per thread\n", W, ACC);
  std::printf("threads %d\n", threads);
  std::printf("fp32 FMA peak GFLOP/s 1-thread %.1f\n", one);
  std::printf("fp32 FMA peak GFLOP/s %.1f\n", all);
  // g_sink is never NaN for these inputs; printing it on that impossible path keeps
  // the value observable without cluttering the output.
  if (g_sink != g_sink) std::printf("checksum %g\n", double(g_sink));
  return 0;
}
