// bench_gemm: every rung of the GEMM ladder (kernels/cuda/gemm/gemm.h) against cuBLASLt,
// on the products one GPT-2 124M training step really computes.
//
// GPT-2 124M at B*T = 16384 tokens (C = 768, padded vocabulary Vp = 50304) has five
// linear layers; each one is three products per step (W stored (OC, C) as in PyTorch):
//   forward  out  = inp . W^T + bias   M = 16384, N = OC, K = C      "NT", bf16 -> bf16
//   dinp     dinp  = dout . W          M = 16384, N = C,  K = OC     "NN", bf16 -> bf16
//   dW       dW  += dout^T . inp       M = OC,    N = C,  K = 16384  "TN", bf16 -> fp32
// for qkv (C -> 3C = 2304), the attention projection (768 -> 768), fc (768 -> 3072, with
// the GELU in the forward's epilogue), the fc projection (3072 -> 768) and the LM head
// (768 -> 50304, no bias). Plus the classic square 4096^3 bf16 NT product, the figure
// GEMM write-ups usually quote.
//
// Each product costs 2 M N K floating-point operations (a multiply and an add per term);
// TFLOP/s = 2 M N K / median time. "% cuBLAS" is cuBLAS's median time over the version's.
// Every version runs once on the same inputs as cuBLAS before it is timed, and the
// "error" column is max |C - C_cublas| / max |C_cublas| over the whole output (and the
// GELU output where there is one): a broken version shows as WRONG or NaN (outputs are
// poisoned with NaN first, so an element nobody wrote shows). cuBLAS's own row checks
// it against a float64 reference computed on 4096 sampled elements.
//
// The summary adds up what one training step spends in these products: 12 layers x
// (qkv, attention projection, fc, fc projection) x (forward, dinp, dW) + the LM head's
// three, per version.
//
// Usage: bench_gemm [--reps N] [--warmup N] [--seconds S] [--no-flush]
//                   [--versions cublas,v1,...,v5] [--shapes qkv,lmhead.fwd,...]
//                   [--skip-slow] [--list] [--help]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/bench/bench_common.h"
#include "kernels/cuda/gemm/gemm.h"

namespace {

using namespace gpt::bench;
using gpt::cuda::GemmArgs;
using gpt::cuda::GemmVersion;
using bf16 = __nv_bfloat16;

constexpr int kTokens = 16384;      // B * T
constexpr int kChannels = 768;      // C
constexpr int kVocabPadded = 50304;  // Vp
constexpr int kLayers = 12;

// v1 and v2 run at a few TFLOP/s: on the products above this many flops (the LM head's
// and the 4096^3, ~1.3 and 0.14 TFLOP) --skip-slow leaves them out.
constexpr double kSlowSkipFlops = 100e9;
constexpr int kReferenceSamples = 4096;

// Tolerances on the max-norm relative error against cuBLAS. Two correct kernels differ
// by the order of their fp32 additions (negligible here) and, for a bf16 output, by at
// most one rounding: 2^-7 of a value <= max |C| (a GELU epilogue may add a second): 2e-2.
// An fp32 output differs only by the order of the additions: 1e-3 is generous.
constexpr double kToleranceBf16 = 2e-2;
constexpr double kToleranceFp32 = 1e-3;

struct Shape {
  std::string name;   // "<layer>.<product>", e.g. "qkv.fwd"
  std::string layer;  // "qkv", for the step summary
  int M, N, K;
  bool trans_a, trans_b;
  bool out_fp32;  // Tout = float (dW into fp32 gradients), else bf16
  bool bias, gelu, accumulate;
  double flops() const { return 2.0 * M * double(N) * K; }
  std::string layout() const { return std::string(trans_a ? "T" : "N") + (trans_b ? "T" : "N"); }
  std::string types() const { return out_fp32 ? "bf16->f32" : "bf16->bf16"; }
  std::string epilogue() const {
    std::string e = accumulate ? "+=" : "=";
    if (bias) e += " +bias";
    if (gelu) e += " +gelu";
    return e;
  }
};

// The three products of a linear layer inp (16384, c_in) -> out (16384, oc).
void add_linear(std::vector<Shape>& shapes, const std::string& layer, int c_in, int oc, bool bias, bool gelu) {
  shapes.push_back({layer + ".fwd", layer, kTokens, oc, c_in, false, true, false, bias, gelu, false});
  shapes.push_back({layer + ".dinp", layer, kTokens, c_in, oc, false, false, false, false, false, false});
  shapes.push_back({layer + ".dW", layer, oc, c_in, kTokens, true, false, true, false, false, true});
}

std::vector<Shape> all_shapes() {
  std::vector<Shape> s;
  add_linear(s, "qkv", kChannels, 3 * kChannels, true, false);
  add_linear(s, "attproj", kChannels, kChannels, true, false);
  add_linear(s, "fc", kChannels, 4 * kChannels, true, true);
  add_linear(s, "fcproj", 4 * kChannels, kChannels, true, false);
  add_linear(s, "lmhead", kChannels, kVocabPadded, false, false);
  s.push_back({"square4096", "square4096", 4096, 4096, 4096, false, true, false, false, false, false});
  return s;
}

// How often each layer's products run in one training step.
int per_step(const std::string& layer) {
  if (layer == "lmhead") return 1;
  if (layer == "square4096") return 0;
  return kLayers;
}

const std::vector<GemmVersion> kAllVersions = {GemmVersion::Cublas, GemmVersion::V1, GemmVersion::V2,
                                               GemmVersion::V3,     GemmVersion::V4, GemmVersion::V5};

std::string name_of(GemmVersion v) { return gpt::cuda::gemm_version_name(v); }
bool is_slow(GemmVersion v) { return v == GemmVersion::V1 || v == GemmVersion::V2; }

// ---- float64 reference on sampled elements --------------------------------------------

// Sample s is the element (rows[s], cols[s]); one warp computes it: lane l adds the terms
// k = l, l + 32, ... in double, then the warp sums its lanes. op(A)[m,k] is A[m*lda + k],
// or A[k*lda + m] when trans_a; op(B)[k,n] is B[k*ldb + n], or B[n*ldb + k] when trans_b.
// c_initial holds C before the product (read only when accumulating).
template <class Tout>
__global__ void reference_samples_kernel(GemmArgs<bf16, Tout> g, const Tout* c_initial, int samples,
                                         uint64_t seed, int* rows, int* cols, double* ref) {
  const int warp = int((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = int(threadIdx.x % 32);
  if (warp >= samples) return;  // whole warps leave together: the shuffles below stay full
  const int m = int(detail::uniform01(seed, 2 * uint64_t(warp)) * float(g.M)) % g.M;
  const int n = int(detail::uniform01(seed, 2 * uint64_t(warp) + 1) * float(g.N)) % g.N;
  double acc = 0;
  for (int k = lane; k < g.K; k += 32) {
    const bf16 a = g.trans_a ? g.A[size_t(k) * g.lda + m] : g.A[size_t(m) * g.lda + k];
    const bf16 b = g.trans_b ? g.B[size_t(n) * g.ldb + k] : g.B[size_t(k) * g.ldb + n];
    acc += double(__bfloat162float(a)) * double(__bfloat162float(b));
  }
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (lane == 0) {
    if (g.bias) acc += double(__bfloat162float(g.bias[n]));
    if (g.accumulate) acc += double(detail::load_float(c_initial[size_t(m) * g.ldc + n]));
    rows[warp] = m;
    cols[warp] = n;
    ref[warp] = acc;
  }
}

template <class Tout>
__global__ void gather_samples_kernel(const Tout* c, int ldc, int samples, const int* rows, const int* cols,
                                      float* values) {
  const int s = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (s < samples) values[s] = detail::load_float(c[size_t(rows[s]) * ldc + cols[s]]);
}

double gelu_double(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

// Reference values (double) at kReferenceSamples sampled elements of C (and of gelu(C)).
template <class Tout>
class SampledReference {
 public:
  SampledReference() : rows_(kReferenceSamples), cols_(kReferenceSamples), ref_(kReferenceSamples), got_(kReferenceSamples) {}

  // Computes the reference from the inputs of g; call before C is overwritten.
  void compute(const GemmArgs<bf16, Tout>& g, const Tout* c_initial) {
    const int threads = 256, blocks = (kReferenceSamples * 32 + threads - 1) / threads;
    reference_samples_kernel<Tout><<<blocks, threads>>>(g, c_initial, kReferenceSamples, 0x5eed5a3full,
                                                        rows_.data(), cols_.data(), ref_.data());
    GPT_CUDA_CHECK_LAUNCH();
    host_ref_.resize(kReferenceSamples);
    GPT_CUDA_CHECK(cudaMemcpy(host_ref_.data(), ref_.data(), ref_.bytes(), cudaMemcpyDeviceToHost));
  }

  // max |c - ref| / max |ref| over the samples (of gelu(ref) when `gelu`).
  double error(const Tout* c, int ldc, bool gelu) {
    gather_samples_kernel<Tout><<<(kReferenceSamples + 255) / 256, 256>>>(c, ldc, kReferenceSamples, rows_.data(),
                                                                          cols_.data(), got_.data());
    GPT_CUDA_CHECK_LAUNCH();
    std::vector<float> got(kReferenceSamples);
    GPT_CUDA_CHECK(cudaMemcpy(got.data(), got_.data(), got_.bytes(), cudaMemcpyDeviceToHost));
    double diff = 0, mag = 0;
    for (int s = 0; s < kReferenceSamples; ++s) {
      const double r = gelu ? gelu_double(host_ref_[size_t(s)]) : host_ref_[size_t(s)];
      const double d = std::fabs(double(got[size_t(s)]) - r);
      if (std::isnan(d)) return NAN;
      diff = std::max(diff, d);
      mag = std::max(mag, std::fabs(r));
    }
    return mag > 0 ? diff / mag : diff;
  }

 private:
  DeviceBuffer<int> rows_, cols_;
  DeviceBuffer<double> ref_;
  DeviceBuffer<float> got_;
  std::vector<double> host_ref_;
};

// ---- operands ----------------------------------------------------------------------------

// One copy of everything a product reads and writes; several copies rotate when the
// working set would fit in the L2 (bench_common.h).
template <class Tout>
struct Operands {
  DeviceBuffer<bf16> a, b, bias;
  DeviceBuffer<Tout> c, gelu;

  Operands(const Shape& s, uint64_t seed)
      : a(size_t(s.M) * s.K), b(size_t(s.K) * s.N), bias(s.bias ? size_t(s.N) : 0), c(size_t(s.M) * s.N),
        gelu(s.gelu ? size_t(s.M) * s.N : 0) {
    fill_uniform(a.data(), a.size(), seed + 1);
    fill_uniform(b.data(), b.size(), seed + 2);
    fill_uniform(bias.data(), bias.size(), seed + 3);
    fill_uniform(c.data(), c.size(), seed + 4);  // the accumulation's starting values
  }

  static size_t bytes(const Shape& s) {
    const size_t mn = size_t(s.M) * s.N;
    return (size_t(s.M) * s.K + size_t(s.K) * s.N + (s.bias ? s.N : 0)) * sizeof(bf16) +
           mn * sizeof(Tout) * (s.gelu ? 2 : 1);
  }

  // The arguments of gemm.h's table for this shape (row strides of tightly packed matrices).
  GemmArgs<bf16, Tout> args(const Shape& s) const {
    GemmArgs<bf16, Tout> g;
    g.trans_a = s.trans_a;
    g.trans_b = s.trans_b;
    g.M = s.M;
    g.N = s.N;
    g.K = s.K;
    g.A = a.data();
    g.lda = s.trans_a ? s.M : s.K;  // A stored K x M when transposed, else M x K
    g.B = b.data();
    g.ldb = s.trans_b ? s.K : s.N;  // B stored N x K when transposed, else K x N
    g.C = c.data();
    g.ldc = s.N;
    g.accumulate = s.accumulate;
    g.bias = s.bias ? bias.data() : nullptr;
    g.gelu_out = s.gelu ? gelu.data() : nullptr;
    return g;
  }
};

// ---- the benchmark ---------------------------------------------------------------------------

struct Options {
  TimingOptions timing;
  std::vector<GemmVersion> versions;
  std::vector<Shape> shapes;
  bool skip_slow = false;
};

struct Result {
  std::string shape, layer, version;
  double ms = NAN;  // median
};

const char* kColumns[] = {"shape", "M x N x K", "op", "types", "version", "ms", "min", "max", "reps",
                          "TFLOP/s", "% cuBLAS", "error", "check"};

template <class Tout>
void run_shape(const Shape& s, const Options& opt, L2Flush& flush, size_t l2_bytes, Table& table,
               std::vector<Result>& results) {
  const std::string dims = format("%d x %d x %d", s.M, s.N, s.K);
  const double tolerance = std::is_same_v<Tout, float> ? kToleranceFp32 : kToleranceBf16;
  auto row = [&](const std::string& version, std::vector<std::string> rest) {
    std::vector<std::string> r = {s.name, dims, s.layout() + " " + s.epilogue(), s.types(), version};
    r.insert(r.end(), rest.begin(), rest.end());
    table.add(r);
  };
  auto note = [&](const std::string& version, const std::string& text) {
    table.add({s.name, dims, s.layout() + " " + s.epilogue(), s.types(), version}, text);
  };

  // Memory: the operand sets, a copy of cuBLAS's output (and GELU output) as the
  // reference, and the starting values of C for accumulating products.
  const size_t set_bytes = Operands<Tout>::bytes(s);
  const int sets = rotation_sets(set_bytes, l2_bytes);
  const size_t mn = size_t(s.M) * s.N;
  const size_t need = sets * set_bytes + mn * sizeof(Tout) * (s.gelu ? 3 : 2) + (size_t(256) << 20);
  if (need > free_device_bytes()) {
    note("all", format("skipped: needs %.1f GiB", double(need) / (1 << 30)));
    return;
  }
  std::vector<Operands<Tout>> operands;
  for (int i = 0; i < sets; ++i) operands.emplace_back(s, 1000 * uint64_t(i + 1));
  DeviceBuffer<Tout> c_initial(s.accumulate ? mn : 0), ref_c(mn), ref_gelu(s.gelu ? mn : 0);
  if (s.accumulate) GPT_CUDA_CHECK(cudaMemcpy(c_initial.data(), operands[0].c.data(), mn * sizeof(Tout), cudaMemcpyDeviceToDevice));

  // Before a checked run: C holds its starting values (accumulate) or NaN, as does gelu_out.
  auto reset_outputs = [&](Operands<Tout>& o) {
    if (s.accumulate)
      GPT_CUDA_CHECK(cudaMemcpy(o.c.data(), c_initial.data(), mn * sizeof(Tout), cudaMemcpyDeviceToDevice));
    else
      poison(o.c.data(), o.c.bytes());
    if (s.gelu) poison(o.gelu.data(), o.gelu.bytes());
  };

  std::optional<double> cublas_ms;
  bool have_reference = false;
  // cuBLAS first: its output is the reference and its time the baseline.
  std::vector<GemmVersion> order = {GemmVersion::Cublas};
  for (GemmVersion v : opt.versions)
    if (v != GemmVersion::Cublas) order.push_back(v);

  for (GemmVersion v : order) {
    const std::string vname = name_of(v);
    const auto args0 = operands[0].args(s);
    if (!gpt::cuda::gemm_version_supports(v, args0)) {
      note(vname, "not supported on this device or layout");
      continue;
    }
    if (opt.skip_slow && is_slow(v) && s.flops() > kSlowSkipFlops) {
      note(vname, "skipped (--skip-slow)");
      continue;
    }
    try {
      // The checked run, on operand set 0.
      double error = NAN;
      reset_outputs(operands[0]);
      if (v == GemmVersion::Cublas) {
        SampledReference<Tout> reference;
        reference.compute(args0, c_initial.data());
        gpt::cuda::gemm(v, args0);
        GPT_CUDA_CHECK(cudaDeviceSynchronize());
        error = reference.error(args0.C, args0.ldc, false);
        if (s.gelu) error = std::max(error, reference.error(args0.gelu_out, args0.ldc, true));
        GPT_CUDA_CHECK(cudaMemcpy(ref_c.data(), args0.C, mn * sizeof(Tout), cudaMemcpyDeviceToDevice));
        if (s.gelu)
          GPT_CUDA_CHECK(cudaMemcpy(ref_gelu.data(), args0.gelu_out, mn * sizeof(Tout), cudaMemcpyDeviceToDevice));
        have_reference = true;
      } else {
        gpt::cuda::gemm(v, args0);
        GPT_CUDA_CHECK(cudaDeviceSynchronize());
        if (have_reference) {
          error = compare(args0.C, ref_c.data(), mn).relative();
          if (s.gelu) {
            const double e = compare(args0.gelu_out, ref_gelu.data(), mn).relative();
            error = std::isnan(e) ? e : std::max(error, e);
          }
        }
      }

      TimingOptions timing = opt.timing;
      if (is_slow(v) && s.flops() > kSlowSkipFlops) timing.warmup = 1;  // a warm-up call takes seconds
      std::vector<GemmArgs<bf16, Tout>> args;
      for (const auto& o : operands) args.push_back(o.args(s));
      const Timing t = time_on_device([&](int call) { gpt::cuda::gemm(v, args[size_t(call) % args.size()]); },
                                      timing, flush);
      if (v == GemmVersion::Cublas) cublas_ms = t.median_ms;
      results.push_back({s.name, s.layer, vname, t.median_ms});
      row(vname, {fixed(t.median_ms, 3), fixed(t.min_ms, 3), fixed(t.max_ms, 3), std::to_string(t.reps),
                  fixed(s.flops() / (t.median_ms * 1e-3) * 1e-12, 1),
                  cublas_ms ? fixed(100.0 * *cublas_ms / t.median_ms, 1) : "-",
                  have_reference ? scientific(error) : "-",
                  have_reference ? verdict(error, tolerance) : "no reference"});
    } catch (const std::exception& e) {
      // A version that throws (or a CUDA error it caused) is reported in its row; a
      // sticky CUDA error would make every later call fail too, so that ends the run.
      note(vname, std::string("failed: ") + e.what());
      if (cudaPeekAtLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) throw;
    }
  }
  table.separator();
}

// One training step's time in these products, per version: sum over the layers of
// (fwd + dinp + dW) x (times per step). Only versions that ran every product count.
void print_summary(const std::vector<Result>& results, const Options& opt) {
  std::map<std::string, std::map<std::string, double>> ms;  // version -> shape -> ms
  for (const auto& r : results) ms[r.version][r.shape] = r.ms;
  std::vector<std::pair<std::string, int>> step;  // shape, times per step
  for (const auto& s : all_shapes())
    if (per_step(s.layer) > 0) step.emplace_back(s.name, per_step(s.layer));

  Table t({"version", "shapes run", "geomean % cuBLAS", "step products ms", "% cuBLAS"});
  const auto& cublas = ms["cublas"];
  auto step_ms = [&](const std::map<std::string, double>& m) -> double {
    double total = 0;
    for (const auto& [shape, times] : step) {
      auto it = m.find(shape);
      if (it == m.end()) return NAN;
      total += times * it->second;
    }
    return total;
  };
  const double cublas_step = step_ms(cublas);
  for (GemmVersion v : kAllVersions) {
    const std::string name = name_of(v);
    if (!ms.count(name)) continue;
    double log_sum = 0;
    int n = 0;
    for (const auto& [shape, t] : ms[name]) {
      auto it = cublas.find(shape);
      if (it == cublas.end()) continue;
      log_sum += std::log(it->second / t);
      ++n;
    }
    const double step_v = step_ms(ms[name]);
    t.add({name, std::to_string(ms[name].size()), n ? fixed(100.0 * std::exp(log_sum / n), 1) : "-",
           fixed(step_v, 2), fixed(100.0 * cublas_step / step_v, 1)});
  }
  std::printf("\nSummary. 'step products': one training step of GPT-2 124M at %d tokens,\n"
              "%d x (qkv, attproj, fc, fcproj) + lmhead, each fwd + dinp + dW (shown where a\n"
              "version ran all %zu of them%s).\n\n",
              kTokens, kLayers, step.size(), opt.skip_slow ? "; --skip-slow leaves v1/v2 without" : "");
  t.print();
}

void print_usage(FILE* f) {
  std::fprintf(f,
               "usage: bench_gemm [--reps N] [--warmup N] [--seconds S] [--no-flush]\n"
               "                  [--versions cublas,v1,v2,v3,v4,v5] [--shapes NAME,...] [--skip-slow] [--list]\n"
               "  --reps N       timed repetitions per product and version, at most (default 20)\n"
               "  --warmup N     untimed calls first (default 2)\n"
               "  --seconds S    time budget per measurement: fewer repetitions (at least 3) for slow ones (default 2)\n"
               "  --no-flush     do not evict the L2 between repetitions\n"
               "  --versions     which versions (default all; cuBLAS always runs: it is the reference)\n"
               "  --shapes       products by name or layer prefix: qkv, qkv.fwd, lmhead.dW, square4096 (default all)\n"
               "  --skip-slow    leave v1 and v2 out on products over %.0f GFLOP\n"
               "  --list         print the products and exit\n",
               kSlowSkipFlops * 1e-9);
}

Options parse(Args& args) {
  Options opt;
  opt.timing = args.timing(20);
  opt.skip_slow = args.flag("--skip-slow");
  const auto versions = args.list("--versions");
  for (GemmVersion v : kAllVersions) {
    bool wanted = versions.empty();
    for (const auto& name : versions) wanted = wanted || name == name_of(v);
    if (wanted) opt.versions.push_back(v);
  }
  for (const auto& name : versions) {
    bool known = false;
    for (GemmVersion v : kAllVersions) known = known || name == name_of(v);
    if (!known) args.fail("--versions", "unknown version '" + name + "' (cublas, v1 ... v5)");
  }
  const auto shapes = args.list("--shapes");
  for (const auto& s : all_shapes()) {
    bool wanted = shapes.empty();
    for (const auto& name : shapes) wanted = wanted || name == s.name || name == s.layer || name == "all";
    if (wanted) opt.shapes.push_back(s);
  }
  for (const auto& name : shapes) {
    bool known = name == "all";
    for (const auto& s : all_shapes()) known = known || name == s.name || name == s.layer;
    if (!known) args.fail("--shapes", "unknown product '" + name + "' (see --list)");
  }
  return opt;
}

int run(int argc, char** argv) {
  Args args(argc, argv);
  if (args.flag("--help") || args.flag("-h")) {
    print_usage(stdout);
    return 0;
  }
  const bool list_only = args.flag("--list");
  const Options opt = parse(args);
  args.finish();
  if (list_only) {
    for (const auto& s : opt.shapes)
      std::printf("%-12s %6d x %5d x %5d  %s %-10s %-12s %.1f GFLOP\n", s.name.c_str(), s.M, s.N, s.K,
                  s.layout().c_str(), s.epilogue().c_str(), s.types().c_str(), s.flops() * 1e-9);
    return 0;
  }

  if (!have_device("bench_gemm")) return 1;
  const DeviceInfo dev = device_info();
  std::printf("bench_gemm: GPT-2 124M training products at %d tokens, and 4096^3\n", kTokens);
  print_device(dev);
  print_timing(opt.timing);
  std::printf("error       max|C - C_cublas| / max|C_cublas|; cuBLAS's row: against float64 on %d samples\n"
              "            (ok within %.0e for bf16 outputs, %.0e for fp32)\n\n",
              kReferenceSamples, kToleranceBf16, kToleranceFp32);

  L2Flush flush(dev.l2_bytes);
  Table table(std::vector<std::string>(std::begin(kColumns), std::end(kColumns)), 5);
  std::vector<Result> results;
  for (const auto& s : opt.shapes) {
    if (s.out_fp32)
      run_shape<float>(s, opt, flush, dev.l2_bytes, table, results);
    else
      run_shape<bf16>(s, opt, flush, dev.l2_bytes, table, results);
    std::fprintf(stderr, "bench_gemm: %s done\n", s.name.c_str());  // progress; the table comes at the end
  }
  table.print();
  print_summary(results, opt);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return gpt::bench::bench_main("bench_gemm", argc, argv, run, print_usage); }
