// bench_gemm_cpu: the CPU GEMM (kernels/cpu/gemm.h) on the products one GPT-2 124M
// training step computes on the CPU, as scripts/bench_cpu.sh trains it (B x T = 4 x 64
// tokens by default).
//
// Each of the five linear layers (W stored (OC, C), as in PyTorch) is three products:
//   forward  out  = inp . W^T    M = tokens, N = OC, K = C     "NT"
//   dinp     dinp  = dout . W    M = tokens, N = C,  K = OC    "NN"
//   dW       dW  += dout^T . inp M = OC,     N = C,  K = tokens "TN"
// for qkv (768 -> 2304), the attention projection (768 -> 768), fc (768 -> 3072), the
// fc projection (3072 -> 768) and the LM head (768 -> 50304). A product costs 2 M N K
// flops; each row is the best of --reps timed runs (after one untimed run), so the
// machine's slow stretches, which a shared VM has, weigh least. The summary adds up one
// step: 12 layers x the first four, plus the LM head.
//
// Usage: bench_gemm_cpu [--tokens N] [--reps N] [--bf16] [--split rows|columns]
//   --bf16: operands stored as bf16 (widened to fp32 as they are packed), fp32 output.
//   --split: every product shares its work among the threads this way (gemm.h's
//            GemmSplit), rather than as gemm_split chooses; the "split" column says which.
// OMP_NUM_THREADS sets the threads; build/bin/cpu_peak gives the peak to compare with.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/bf16.h"
#include "kernels/cpu/bf16.h"
#include "kernels/bench/cpu_bench.h"
#include "kernels/cpu/gemm.h"

namespace {

struct Product {
  std::string name;
  bool trans_a, trans_b;
  int M, N, K;
  int per_step;  // how many times one training step computes it
};

std::vector<Product> gpt2_products(int tokens) {
  struct Linear {
    const char* name;
    int in, out, per_step;
  };
  const Linear linears[] = {{"qkv", 768, 2304, 12},
                            {"attn_proj", 768, 768, 12},
                            {"fc", 768, 3072, 12},
                            {"fc_proj", 3072, 768, 12},
                            {"lm_head", 768, 50304, 1}};
  std::vector<Product> products;
  for (const Linear& l : linears) {
    products.push_back({std::string(l.name) + ".fwd", false, true, tokens, l.out, l.in, l.per_step});
    products.push_back({std::string(l.name) + ".dinp", false, false, tokens, l.in, l.out, l.per_step});
    products.push_back({std::string(l.name) + ".dW", true, false, l.out, l.in, tokens, l.per_step});
  }
  return products;
}

// x as an operand stored as S: fp32 itself, or bf16 rounded to nearest even, as the
// trainer stores its bf16 tensors.
template <class S>
S stored(float x) {
  if constexpr (std::is_same_v<S, gpt::bf16>)
    return gpt::bf16{gpt::cpu::bf16_bits(x)};
  else
    return x;
}

// The best of `reps` timed runs of C (+)= op(A) op(B), in seconds; dW accumulates, as in
// training, the others overwrite.
template <class S>
double best_seconds(const Product& p, int reps, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<S> A(size_t(p.M) * p.K), B(size_t(p.K) * p.N);
  for (S& x : A) x = stored<S>(uniform(rng));
  for (S& x : B) x = stored<S>(uniform(rng));
  std::vector<float> C(size_t(p.M) * p.N, 0.0f);
  const int lda = p.trans_a ? p.M : p.K, ldb = p.trans_b ? p.K : p.N;
  const bool accumulate = p.trans_a;
  auto run = [&] {
    gpt::cpu::gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, A.data(), lda, B.data(), ldb, C.data(), p.N, accumulate);
  };
  return gpt::bench::best_seconds(reps, run);
}

constexpr const char* kProgram = "bench_gemm_cpu";
constexpr const char* kUsage = "bench_gemm_cpu [--tokens N] [--reps N] [--bf16] [--split rows|columns]";

[[noreturn]] void usage(const std::string& why) { gpt::bench::usage_error(kProgram, kUsage, why); }
int positive(const char* flag, const char* value) { return gpt::bench::positive_arg(kProgram, kUsage, flag, value); }

}  // namespace

int main(int argc, char** argv) {
  int tokens = 256, reps = 5;
  bool bf16 = false;
  gpt::cpu::GemmSplit forced = gpt::cpu::GemmSplit::automatic;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokens"))
      tokens = positive("--tokens", i + 1 < argc ? argv[++i] : nullptr);
    else if (!std::strcmp(argv[i], "--reps"))
      reps = positive("--reps", i + 1 < argc ? argv[++i] : nullptr);
    else if (!std::strcmp(argv[i], "--bf16"))
      bf16 = true;
    else if (!std::strcmp(argv[i], "--split") && i + 1 < argc && !std::strcmp(argv[i + 1], "rows"))
      forced = gpt::cpu::GemmSplit::rows, ++i;
    else if (!std::strcmp(argv[i], "--split") && i + 1 < argc && !std::strcmp(argv[i + 1], "columns"))
      forced = gpt::cpu::GemmSplit::columns, ++i;
    else if (!std::strcmp(argv[i], "--split"))
      usage("--split needs 'rows' or 'columns'");
    else
      usage(std::string("unknown argument '") + argv[i] + "'");
  }
  gpt::cpu::force_gemm_split(forced);
  const int threads = omp_get_max_threads();
  std::printf("CPU GEMM, GPT-2 124M products at %d tokens, %s operands, fp32 output, %d threads, best of %d%s\n",
              tokens, bf16 ? "bf16" : "fp32", threads, reps,
              forced == gpt::cpu::GemmSplit::automatic ? "" : ", split forced");
  std::printf("%-16s %6s %6s %6s %8s %10s %9s\n", "product", "M", "N", "K", "split", "ms", "GFLOP/s");
  std::mt19937 rng(1);
  double step_seconds = 0, step_flops = 0;
  for (const Product& p : gpt2_products(tokens)) {
    const double s = bf16 ? best_seconds<gpt::bf16>(p, reps, rng) : best_seconds<float>(p, reps, rng);
    const double flops = 2.0 * p.M * p.N * p.K;
    // Which way the threads shared it (one thread: no split).
    const gpt::cpu::GemmSplit split =
        forced != gpt::cpu::GemmSplit::automatic ? forced : gpt::cpu::gemm_split<float>(p.M, p.N, threads);
    const char* split_name = threads == 1 ? "-" : split == gpt::cpu::GemmSplit::rows ? "rows" : "columns";
    std::printf("%-16s %6d %6d %6d %8s %10.2f %9.1f\n", p.name.c_str(), p.M, p.N, p.K, split_name, s * 1e3,
                flops / s / 1e9);
    step_seconds += p.per_step * s;
    step_flops += p.per_step * flops;
  }
  std::printf("one step's products: %.1f ms, %.1f GFLOP/s\n", step_seconds * 1e3, step_flops / step_seconds / 1e9);
  return 0;
}
