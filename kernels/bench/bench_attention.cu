// bench_attention: the causal attention ladder (kernels/cuda/attention/attention.h), v1
// naive to v5 Hopper, forward, backward and forward+backward, at the shapes of GPT-2
// training: head size 64 (C = 768, NH = 12: GPT-2 124M) and 128 (C = 1024, NH = 8),
// T = 1024, 2048, 4096, B = 16384 / T, so every row processes the same 16384 tokens.
//
// What each version's rows time (a kernel is timed alone once, then in its pipeline):
//   v1  fwd v1, bwd v1, fwd+bwd v1 + v1     scores (B,NH,T,T) materialised: only where
//                                            two such fp32 buffers fit in memory
//   v2  fwd v2                               flash forward (no backward of its own)
//   v3  bwd v3, fwd+bwd v2 + v3              flash backward
//   v4  fwd v4, bwd v4, fwd+bwd v4 + v4      tensor cores (bf16 only)
//   v5  fwd v5, fwd+bwd v5 + v4 bwd          Hopper forward (bf16 only, sm_90)
//
// FLOPs, by the convention the comparison with PyTorch uses: the forward is two products
// of (T x hs) by (hs x T) shape per head, S = Q K^T and O = P V, 2 * 2 * T^2 * hs flops
// per (batch, head), halved because causal attention skips the masked half:
//   forward  = 4 B T^2 NH hs / 2
//   backward = 2.5 x forward   (five products: dV, dP, dQ, dK, and S recomputed)
//   fwd+bwd  = 3.5 x forward
// TFLOP/s = flops / median time.
//
// Correctness: each version first runs once on the inputs of the reference (v1 where its
// scores fit, else v2 + v3), with `out` and `lse` poisoned with NaN and dqkv zeroed
// (the backward accumulates), and the error column is max|x - x_ref| / max|x_ref|: out
// for the forward, dqkv for the backward rows. Every row is also written as one JSON line
// to --json FILE, which kernels/bench/attention_vs_pytorch.py joins with bench_sdpa.py's.
//
// Usage: bench_attention [--reps N] [--warmup N] [--seconds S] [--no-flush]
//                        [--versions v1,...,v5] [--T 1024,2048,4096] [--hs 64,128]
//                        [--tokens 16384] [--fp32] [--json FILE] [--help]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/bench/bench_common.h"
#include "kernels/cuda/attention/attention.h"

namespace {

using namespace gpt::bench;
using bf16 = __nv_bfloat16;

// bf16 outputs: two correct versions differ by about one bf16 rounding of the output
// (2^-7 of max|x| at most) plus the bf16 rounding of P and dS that tensor-core versions
// apply before their products; fp32 outputs only by the order of additions.
constexpr double kToleranceBf16 = 2e-2;
constexpr double kToleranceFp32 = 1e-3;

struct Shape {
  int B, T, C, NH;
  int hs() const { return C / NH; }
  double forward_flops() const { return 4.0 * B * double(T) * T * NH * hs() / 2.0; }  // causal: half
};

enum class Pass { Forward, Backward, ForwardBackward };
const char* pass_name(Pass p) { return p == Pass::Forward ? "fwd" : p == Pass::Backward ? "bwd" : "fwd+bwd"; }
double flops_factor(Pass p) { return p == Pass::Forward ? 1.0 : p == Pass::Backward ? 2.5 : 3.5; }

struct Version {
  int number;
  const char* name;
  const char* forward_kernel;   // the forward its pipeline runs
  const char* backward_kernel;  // the backward its pipeline runs ("" for none)
  std::vector<Pass> passes;     // the rows it reports (see the table at the top)
  bool bf16_only;
  int min_major;  // compute capability it needs
  std::string kernels(Pass p) const {
    if (p == Pass::Forward) return forward_kernel;
    if (p == Pass::Backward) return backward_kernel;
    return std::string(forward_kernel) + " + " + backward_kernel;
  }
};

const std::vector<Version> kVersions = {
    {1, "v1", "v1", "v1", {Pass::Forward, Pass::Backward, Pass::ForwardBackward}, false, 0},
    {2, "v2", "v2", "", {Pass::Forward}, false, 0},
    {3, "v3", "v2", "v3", {Pass::Backward, Pass::ForwardBackward}, false, 0},
    {4, "v4", "v4", "v4", {Pass::Forward, Pass::Backward, Pass::ForwardBackward}, true, 8},
    {5, "v5", "v5", "v4", {Pass::Forward, Pass::ForwardBackward}, true, 9},
};

// ---- buffers --------------------------------------------------------------------------------

// One copy of a layer's attention inputs, outputs and gradients (layouts in attention.h).
template <class T>
struct Tensors {
  DeviceBuffer<T> qkv, out, dout, dqkv;  // (B,T,3C), (B,T,C), (B,T,C), (B,T,3C)
  DeviceBuffer<float> lse;               // (B,NH,T)

  Tensors(const Shape& s, uint64_t seed)
      : qkv(size_t(s.B) * s.T * 3 * s.C), out(size_t(s.B) * s.T * s.C), dout(out.size()), dqkv(qkv.size()),
        lse(gpt::cuda::attention_rows_floats(s.B, s.T, s.NH)) {
    fill_uniform(qkv.data(), qkv.size(), seed + 1);
    fill_uniform(dout.data(), dout.size(), seed + 2);
    fill_uniform(dqkv.data(), dqkv.size(), seed + 3);  // the backward adds to it
  }
  static size_t bytes(const Shape& s) {
    return size_t(s.B) * s.T * s.C * 8 * sizeof(T) + gpt::cuda::attention_rows_floats(s.B, s.T, s.NH) * 4;
  }
};

// Buffers shared by all sets: only ever live inside one call (dsum, dscores) or too large
// to copy (v1's probabilities, which alone exceed the L2 many times over).
struct Scratch {
  DeviceBuffer<float> dsum, att, dscores;
};

size_t scores_bytes(const Shape& s) { return gpt::cuda::attention_scores_floats(s.B, s.T, s.NH) * sizeof(float); }

// ---- the versions' calls --------------------------------------------------------------------

template <class T>
void forward(int version, Tensors<T>& x, Scratch& scratch, const Shape& s) {
  using namespace gpt::cuda;
  switch (version) {
    case 1: attention_forward_v1(x.out.data(), scratch.att.data(), x.qkv.data(), s.B, s.T, s.C, s.NH); return;
    case 2:
    case 3: attention_forward_v2(x.out.data(), x.lse.data(), x.qkv.data(), s.B, s.T, s.C, s.NH); return;
    case 4:
      if constexpr (std::is_same_v<T, bf16>) {
        attention_forward_v4(x.out.data(), x.lse.data(), x.qkv.data(), s.B, s.T, s.C, s.NH);
        return;
      }
      break;
    case 5:
      if constexpr (std::is_same_v<T, bf16>) {
        attention_forward_v5(x.out.data(), x.lse.data(), x.qkv.data(), s.B, s.T, s.C, s.NH);
        return;
      }
      break;
  }
  throw std::invalid_argument("bench_attention: forward: version " + std::to_string(version) +
                              " does not take this element type");
}

template <class T>
void backward(int version, Tensors<T>& x, Scratch& scratch, const Shape& s) {
  using namespace gpt::cuda;
  switch (version) {
    case 1:
      attention_backward_v1(x.dqkv.data(), scratch.dscores.data(), x.dout.data(), x.qkv.data(), scratch.att.data(),
                            s.B, s.T, s.C, s.NH);
      return;
    case 3:
      attention_backward_v3(x.dqkv.data(), scratch.dsum.data(), x.dout.data(), x.qkv.data(), x.out.data(),
                            x.lse.data(), s.B, s.T, s.C, s.NH);
      return;
    case 4:
    case 5:  // v5 is a forward only; its pipeline continues with v4's backward
      if constexpr (std::is_same_v<T, bf16>) {
        attention_backward_v4(x.dqkv.data(), scratch.dsum.data(), x.dout.data(), x.qkv.data(), x.out.data(),
                              x.lse.data(), s.B, s.T, s.C, s.NH);
        return;
      }
      break;
  }
  throw std::invalid_argument("bench_attention: backward: version " + std::to_string(version) +
                              " has no backward for this element type");
}

bool has_backward(int version) { return version != 2; }

// ---- the benchmark ---------------------------------------------------------------------------

struct Options {
  TimingOptions timing;
  std::vector<int> versions, Ts, head_sizes;
  int tokens = 16384;
  bool fp32 = false;
  std::string json_path;
};

struct Context {
  const Options& opt;
  const DeviceInfo& dev;
  L2Flush& flush;
  Table& table;
  std::ofstream* json;
};

// The outputs of the check run: the forward's out and the backward's dqkv.
struct Errors {
  double forward = NAN, backward = NAN;
};

// One checked run of `version` on set 0: out and lse poisoned, dqkv zeroed first.
// Leaves out/lse (and dqkv) as the version computed them.
template <class T>
void checked_run(int version, Tensors<T>& x, Scratch& scratch, const Shape& s) {
  poison(x.out.data(), x.out.bytes());
  poison(x.lse.data(), x.lse.bytes());
  forward(version, x, scratch, s);
  if (has_backward(version)) {
    GPT_CUDA_CHECK(cudaMemset(x.dqkv.data(), 0, x.dqkv.bytes()));
    backward(version, x, scratch, s);
  }
  GPT_CUDA_CHECK(cudaDeviceSynchronize());
}

template <class T>
void add_row(const Context& ctx, const Shape& s, const Version& v, Pass pass, const Timing& t, double error,
             const std::string& reference) {
  const char* dtype = std::is_same_v<T, bf16> ? "bf16" : "fp32";
  const double tolerance = std::is_same_v<T, bf16> ? kToleranceBf16 : kToleranceFp32;
  const double flops = s.forward_flops() * flops_factor(pass);
  const double tflops = flops / (t.median_ms * 1e-3) * 1e-12;
  const std::string kernels = v.kernels(pass);
  const bool have_ref = !reference.empty();
  ctx.table.add({dtype, v.name, pass_name(pass), kernels, std::to_string(s.B), std::to_string(s.T),
                 std::to_string(s.NH), std::to_string(s.hs()), fixed(t.median_ms, 3), fixed(t.min_ms, 3),
                 fixed(t.max_ms, 3), std::to_string(t.reps), fixed(tflops, 1), have_ref ? scientific(error) : "-",
                 have_ref ? verdict(error, tolerance) : "no reference"});
  if (ctx.json) {
    JsonLine j;
    j.add("bench", "attention").add("impl", v.name).add("kernels", kernels).add("dtype", dtype);
    j.add("pass", pass_name(pass)).add("B", s.B).add("T", s.T).add("NH", s.NH).add("hs", s.hs()).add("C", s.C);
    j.add("causal", true).add("ms", t.median_ms).add("ms_min", t.min_ms).add("ms_max", t.max_ms).add("reps", t.reps);
    j.add("tflops", tflops).add("flops", flops).add("error", error).add("reference", reference);
    j.add("check", have_ref ? verdict(error, tolerance) : "no reference").add("device", ctx.dev.name);
    *ctx.json << j.str() << '\n' << std::flush;
  }
}

template <class T>
void skip_row(const Context& ctx, const Shape& s, const Version& v, const std::string& why) {
  ctx.table.add({std::is_same_v<T, bf16> ? "bf16" : "fp32", v.name, "-", "-", std::to_string(s.B),
                 std::to_string(s.T), std::to_string(s.NH), std::to_string(s.hs())},
                why);
}

template <class T>
void run_shape(const Context& ctx, const Shape& s) {
  constexpr bool is_bf16 = std::is_same_v<T, bf16>;
  // v1's two (B,NH,T,T) fp32 buffers, allocated only where they fit beside everything else.
  const size_t set_bytes = Tensors<T>::bytes(s);
  const int sets = rotation_sets(set_bytes, ctx.dev.l2_bytes);
  const size_t margin = size_t(512) << 20;
  if (sets * set_bytes + 2 * set_bytes + margin > free_device_bytes()) {  // + reference copies
    std::fprintf(stderr, "bench_attention: T=%d hs=%d does not fit in memory, skipped\n", s.T, s.hs());
    return;
  }
  std::vector<Tensors<T>> tensors;
  for (int i = 0; i < sets; ++i) tensors.emplace_back(s, 1000 * uint64_t(i + 1));
  Scratch scratch;
  scratch.dsum = DeviceBuffer<float>(gpt::cuda::attention_rows_floats(s.B, s.T, s.NH));
  const bool v1_fits = 2 * scores_bytes(s) + 2 * set_bytes + margin <= free_device_bytes();
  if (v1_fits) {
    scratch.att = DeviceBuffer<float>(gpt::cuda::attention_scores_floats(s.B, s.T, s.NH));
    scratch.dscores = DeviceBuffer<float>(scratch.att.size());
  }

  // The reference: v1 (the plainest) where it fits, else the flash pair v2 + v3.
  const int ref_version = v1_fits ? 1 : 3;
  std::string reference;
  DeviceBuffer<T> ref_out(tensors[0].out.size()), ref_dqkv(tensors[0].dqkv.size());
  try {
    checked_run(ref_version, tensors[0], scratch, s);
    GPT_CUDA_CHECK(cudaMemcpy(ref_out.data(), tensors[0].out.data(), ref_out.bytes(), cudaMemcpyDeviceToDevice));
    GPT_CUDA_CHECK(cudaMemcpy(ref_dqkv.data(), tensors[0].dqkv.data(), ref_dqkv.bytes(), cudaMemcpyDeviceToDevice));
    reference = ref_version == 1 ? "v1" : "v2+v3";
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "bench_attention: reference %d failed: %s\n", ref_version, e.what());
  }

  for (const Version& v : kVersions) {
    if (std::find(ctx.opt.versions.begin(), ctx.opt.versions.end(), v.number) == ctx.opt.versions.end()) continue;
    if (v.bf16_only && !is_bf16) continue;  // fp32 rows exist for v1-v3 only
    if (ctx.dev.major < v.min_major) {
      skip_row<T>(ctx, s, v, format("needs sm_%d0", v.min_major));
      continue;
    }
    if (v.number == 1 && !v1_fits) {
      skip_row<T>(ctx, s, v, format("scores need 2 x %.1f GiB", double(scores_bytes(s)) / (1 << 30)));
      continue;
    }
    try {
      Errors err;
      checked_run(v.number, tensors[0], scratch, s);
      if (!reference.empty()) {
        err.forward = compare(tensors[0].out.data(), ref_out.data(), ref_out.size()).relative();
        if (has_backward(v.number))
          err.backward = compare(tensors[0].dqkv.data(), ref_dqkv.data(), ref_dqkv.size()).relative();
      }
      // v1's probabilities live in the one shared scratch: it uses set 0 only (its working
      // set is far beyond the L2 anyway).
      const size_t n = v.number == 1 ? 1 : tensors.size();
      auto set = [&](int call) -> Tensors<T>& { return tensors[size_t(call) % n]; };
      for (Pass pass : v.passes) {
        Timing t;
        if (pass == Pass::Forward) {
          t = time_on_device([&](int call) { forward(v.number, set(call), scratch, s); }, ctx.opt.timing, ctx.flush);
        } else if (pass == Pass::Backward) {
          // The backward reads the forward's out and lse: compute them for every set first.
          for (size_t i = 0; i < n; ++i) forward(v.number, tensors[i], scratch, s);
          t = time_on_device([&](int call) { backward(v.number, set(call), scratch, s); }, ctx.opt.timing, ctx.flush);
        } else {
          t = time_on_device(
              [&](int call) {
                forward(v.number, set(call), scratch, s);
                backward(v.number, set(call), scratch, s);
              },
              ctx.opt.timing, ctx.flush);
        }
        add_row<T>(ctx, s, v, pass, t, pass == Pass::Forward ? err.forward : err.backward, reference);
      }
    } catch (const std::exception& e) {
      // A version that throws is reported in its row; a CUDA error it caused would make
      // every later call fail too (errors are sticky), so that ends the run.
      skip_row<T>(ctx, s, v, std::string("failed: ") + e.what());
      if (cudaPeekAtLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) throw;
    }
  }
  ctx.table.separator();
}

void print_usage(FILE* f) {
  std::fprintf(f,
               "usage: bench_attention [--reps N] [--warmup N] [--seconds S] [--no-flush] [--versions v1,...,v5]\n"
               "                       [--T 1024,2048,4096] [--hs 64,128] [--tokens 16384] [--fp32] [--json FILE]\n"
               "  --reps N       timed repetitions, at most (default 20); --warmup N untimed calls first (default 2)\n"
               "  --seconds S    time budget per measurement: fewer repetitions (at least 3) for slow ones (default 2)\n"
               "  --no-flush     do not evict the L2 between repetitions\n"
               "  --versions     which versions (default all)\n"
               "  --T, --hs      sequence lengths and head sizes (64: C=768, NH=12; 128: C=1024, NH=8)\n"
               "  --tokens N     B*T of every shape (default 16384; B = N / T)\n"
               "  --fp32         also fp32 rows (v1-v3)\n"
               "  --json FILE    also write every row as a JSON line to FILE\n");
}

std::vector<int> int_list(Args& args, const std::string& name, std::vector<int> fallback, int lo, int hi) {
  const auto items = args.list(name);
  if (items.empty()) return fallback;
  std::vector<int> xs;
  for (const auto& item : items) {
    std::string text = item;
    if (name == "--versions" && !text.empty() && text[0] == 'v') text = text.substr(1);
    char* end = nullptr;
    const long x = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || x < lo || x > hi) args.fail(name, "'" + item + "' is not valid");
    xs.push_back(int(x));
  }
  return xs;
}

Options parse(Args& args) {
  Options opt;
  opt.timing = args.timing(20);
  opt.versions = int_list(args, "--versions", {1, 2, 3, 4, 5}, 1, 5);
  opt.Ts = int_list(args, "--T", {1024, 2048, 4096}, 1, 1 << 20);
  opt.head_sizes = int_list(args, "--hs", {64, 128}, 64, 128);
  for (int hs : opt.head_sizes)
    if (hs != 64 && hs != 128) args.fail("--hs", "head sizes are 64 or 128");
  opt.tokens = int(args.integer("--tokens", opt.tokens, 1, 1 << 24));
  for (int T : opt.Ts)
    if (opt.tokens % T != 0) args.fail("--T", format("%d does not divide --tokens %d", T, opt.tokens));
  opt.fp32 = args.flag("--fp32");
  opt.json_path = args.value("--json");
  return opt;
}

template <class T>
void run_all(const Context& ctx) {
  for (int hs : ctx.opt.head_sizes)
    for (int T_ : ctx.opt.Ts) {
      const int NH = hs == 64 ? 12 : 8;
      const Shape s{ctx.opt.tokens / T_, T_, NH * hs, NH};
      run_shape<T>(ctx, s);
      std::fprintf(stderr, "bench_attention: %s hs=%d T=%d done\n", std::is_same_v<T, bf16> ? "bf16" : "fp32", hs, T_);
    }
}

int run(int argc, char** argv) {
  Args args(argc, argv);
  if (args.flag("--help") || args.flag("-h")) {
    print_usage(stdout);
    return 0;
  }
  const Options opt = parse(args);
  args.finish();

  if (!have_device("bench_attention")) return 1;
  std::ofstream json = open_json("bench_attention", opt.json_path);
  const DeviceInfo dev = device_info();
  std::printf("bench_attention: causal attention, %d tokens per shape\n", opt.tokens);
  print_device(dev);
  print_timing(opt.timing);
  std::printf("flops       fwd 4*B*T^2*NH*hs/2 (causal), bwd 2.5x, fwd+bwd 3.5x\n");
  std::printf("error       max|x - x_ref| / max|x_ref| (out for fwd, dqkv for bwd), reference v1 or v2+v3\n\n");

  L2Flush flush(dev.l2_bytes);
  Table table({"dtype", "version", "pass", "kernels", "B", "T", "NH", "hs", "ms", "min", "max", "reps", "TFLOP/s",
               "error", "check"},
              4);
  const Context ctx{opt, dev, flush, table, json.is_open() ? &json : nullptr};
  run_all<bf16>(ctx);
  if (opt.fp32) run_all<float>(ctx);
  table.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return gpt::bench::bench_main("bench_attention", argc, argv, run, print_usage); }
