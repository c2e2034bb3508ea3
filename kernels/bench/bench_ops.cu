// bench_ops: the memory-bound ops of kernels/cuda/cuda_ops.h (everything but the matmuls
// and attention) at the sizes of one GPT-2 124M training step, against the DRAM bandwidth
// of the device.
//
// These ops do a few flops per byte, so their speed limit is how fast DRAM moves bytes:
//   time >= bytes / bandwidth
// The figure of merit is the achieved bandwidth, bytes / median time, as a share of
//   * the theoretical peak, 2 transfers per clock x memory clock x bus width / 8, from the
//     device attributes cudaDevAttrMemoryClockRate and cudaDevAttrGlobalMemoryBusWidth
//     (printed raw: a device may report them as 0, and then there is no peak column);
//   * what a device-to-device cudaMemcpy of 1 GiB achieves: the practical ceiling, usually
//     90-95% of the theoretical peak. A kernel near the copy's figure has nothing left to win.
//
// Bytes are what the op's definition must read and write at least once each (its
// compulsory DRAM traffic), written next to every row, with b = bytes per element of
// the storage type (2 for bf16, 4 for fp32; statistics, parameter gradients, losses and
// optimizer state are always fp32):
//   embedding fwd    out N C b (w) + wte rows D C b + wpe T C b + tokens 4 N (r)
//                    (D = distinct tokens in the batch: each wte row read once)
//   embedding bwd    dout N C b (r) + dwte rows 8 D C (r+w) + dwpe 8 T C (r+w) + tokens 4 N
//                    (the sort of the tokens, a few passes over 8 N bytes, is not counted)
//   layernorm fwd    inp, out N C b + w, b 2 C b + mean, rstd 8 N
//   layernorm bwd    dout, inp N C b + dinp 2 N C b (r+w) + w C b + mean, rstd 8 N + dw, db 16 C
//   gelu fwd         inp, out n b                           (n = N 4C: the MLP's hidden layer)
//   gelu bwd         inp, dout n b + dinp 2 n b (r+w)
//   residual fwd     a, b, out n b                          (n = N C: the residual stream)
//   residual bwd     dout n b + da, db 2 n b (r+w)
//   scale            x 2 n b (r+w)                          (fp32 n = parameters: gradients)
//   cross-entropy    logits N V b (r: the padding is not read) + targets, losses 8 N
//                    + dlogits N Vp b (w, padding zeroed) when asked for
//   sum of squares   g 4 n (r)                              (n = parameters)
//   adamw            p, g, m, v 16 n (r) + p, m, v 12 n (w) + the copy 2 n (bf16) or 4 n (fp32)
//   round_to_bf16    x 8 n (r+w)
//   convert          4 n + 2 n
// with N = B T = 16384 tokens, C = 768, T = 1024, V = 50257, Vp = 50304 and n = 124,475,904
// parameters (GPT-2 124M with the padded vocabulary).
//
// Timing (kernels/bench/bench_common.h): warm-up calls first, then the median of up to
// --reps repetitions, each bracketed by CUDA events, with the L2 flushed before each (a
// memset of a buffer larger than the L2), so every repetition reads its inputs from DRAM
// as training does. Backward ops accumulate (but gelu_backward, which writes its dinp),
// so their gradients keep growing across repetitions; the values stay finite and the
// traffic is the same.
//
// Correctness is the job of tests/gpu/test_ops_gpu.cpp. Here, only a guard against
// timing a kernel that does nothing: outputs are poisoned with NaN before one untimed
// call, and the "written" column says "ok" when every output element came back finite.
//
// Usage: bench_ops [--reps N] [--warmup N] [--seconds S] [--no-flush] [--ops name,...]
//                  [--fp32] [--json FILE] [--list] [--help]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/bench/bench_common.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

using namespace gpt::bench;

// GPT-2 124M training step: B = 16 sequences of T = 1024 tokens.
constexpr int kBatch = 16;
constexpr int kSeq = 1024;
constexpr int kTokens = kBatch * kSeq;  // N
constexpr int kChannels = 768;          // C
constexpr int kHidden = 4 * kChannels;  // 4C
constexpr int kVocab = 50257;           // V
constexpr int kVocabPadded = 50304;     // Vp
constexpr size_t kParams = 124475904;   // n: wte Vp C + wpe T C + 12 layers + final layernorm

// The names --ops takes, in the order the table lists them.
const std::vector<std::string> kOpNames = {
    "copy", "embedding_forward", "embedding_backward", "layernorm_forward", "layernorm_backward",
    "gelu_forward", "gelu_backward", "bias_backward", "residual_forward", "residual_backward", "scale",
    "crossentropy", "crossentropy_loss_only", "sum_of_squares", "adamw", "round_to_bf16", "convert"};

template <class A>
const char* dtype_name() {
  return std::is_same_v<A, gpt::bf16> ? "bf16" : "fp32";
}

struct Options {
  TimingOptions timing;
  std::vector<std::string> ops;  // empty: all
  bool fp32 = false;
  std::string json_path;
};

struct Context {
  const Options& opt;
  const DeviceInfo& dev;
  L2Flush& flush;
  Table& table;
  std::ofstream* json;
  double copy_gbs = NAN;  // the device-to-device copy's achieved bandwidth
  double sink = 0;        // sum_of_squares results, kept so the calls are not idle

  bool wanted(const std::string& name) const {
    return opt.ops.empty() || std::find(opt.ops.begin(), opt.ops.end(), name) != opt.ops.end();
  }
};

// One row of the table: what ran, on what, and how many bytes its definition moves.
struct Row {
  std::string op, dtype, shape, rule;
  double bytes;
};

// Every element finite (none left as the NaN it was poisoned with)? compare(x, x) is exact
// for finite values and NaN as soon as one element is NaN or infinite.
template <class T>
bool all_finite(const T* p, size_t n) {
  return std::isfinite(compare(p, p, n).relative());
}

void add_row(Context& ctx, const Row& row, const Timing& t, const char* written) {
  const double gbs = row.bytes / (t.median_ms * 1e-3) * 1e-9;
  const double peak = ctx.dev.dram_bandwidth_gbs > 0 ? 100.0 * gbs / ctx.dev.dram_bandwidth_gbs : NAN;
  const double of_copy = 100.0 * gbs / ctx.copy_gbs;
  ctx.table.add({row.op, row.dtype, row.shape, row.rule, fixed(row.bytes * 1e-6, 1), fixed(t.median_ms, 4),
                 fixed(t.min_ms, 4), fixed(t.max_ms, 4), std::to_string(t.reps), fixed(gbs, 0), fixed(peak, 1),
                 fixed(of_copy, 1), written});
  if (ctx.json) {
    JsonLine j;
    j.add("bench", "ops").add("op", row.op).add("dtype", row.dtype).add("shape", row.shape);
    j.add("bytes", row.bytes).add("ms", t.median_ms).add("ms_min", t.min_ms).add("ms_max", t.max_ms);
    j.add("reps", t.reps).add("gbs", gbs).add("peak_gbs", ctx.dev.dram_bandwidth_gbs);
    j.add("copy_gbs", ctx.copy_gbs).add("written", written).add("device", ctx.dev.name);
    *ctx.json << j.str() << '\n' << std::flush;
  }
}

// Runs `launch` once (untimed) and asks `finite` whether its outputs were all written,
// then times it. An op that throws is reported in its row; a CUDA error it caused would
// make every later call fail too (errors are sticky), so that ends the run.
template <class Launch, class Finite>
void measure(Context& ctx, const Row& row, Launch&& launch, Finite&& finite) {
  try {
    launch();
    GPT_CUDA_CHECK(cudaDeviceSynchronize());
    const char* written = finite() ? "ok" : "NaN";
    const Timing t = time_on_device([&](int) { launch(); }, ctx.opt.timing, ctx.flush);
    add_row(ctx, row, t, written);
  } catch (const std::exception& e) {
    ctx.table.add({row.op, row.dtype, row.shape, row.rule}, std::string("failed: ") + e.what());
    if (cudaPeekAtLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) throw;
  }
}

std::string shape2(long rows, long cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

// ---- the ops ---------------------------------------------------------------------------------

// The practical ceiling: cudaMemcpy device to device, 1 GiB read and 1 GiB written.
void bench_copy(Context& ctx) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer<unsigned char> src(bytes), dst(bytes);
  GPT_CUDA_CHECK(cudaMemset(src.data(), 1, bytes));
  const Row row{"copy", "-", "1 GiB", "2 x 1 GiB (r+w)", 2.0 * double(bytes)};
  const Timing t = time_on_device(
      [&](int) { GPT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice)); },
      ctx.opt.timing, ctx.flush);
  ctx.copy_gbs = row.bytes / (t.median_ms * 1e-3) * 1e-9;
  add_row(ctx, row, t, "-");
}

// Distinct values among n device tokens: the wte rows an embedding op touches.
size_t distinct_tokens(const int32_t* tokens, size_t n) {
  std::vector<int32_t> host(n);
  GPT_CUDA_CHECK(cudaMemcpy(host.data(), tokens, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  std::sort(host.begin(), host.end());
  return size_t(std::unique(host.begin(), host.end()) - host.begin());
}

template <class A>
void bench_embedding(Context& ctx) {
  if (!ctx.wanted("embedding_forward") && !ctx.wanted("embedding_backward")) return;
  const size_t N = kTokens, C = kChannels, T = kSeq, b = sizeof(A);
  DeviceBuffer<int32_t> tokens(N);
  DeviceBuffer<A> wte(size_t(kVocabPadded) * C), wpe(T * C), out(N * C), dout(N * C);
  DeviceBuffer<float> dwte(size_t(kVocabPadded) * C), dwpe(T * C);
  fill_indices(tokens.data(), N, 1, kVocab);
  fill_uniform(wte.data(), wte.size(), 2);
  fill_uniform(wpe.data(), wpe.size(), 3);
  fill_uniform(dout.data(), dout.size(), 4);
  fill_uniform(dwte.data(), dwte.size(), 5);
  fill_uniform(dwpe.data(), dwpe.size(), 6);
  const double D = double(distinct_tokens(tokens.data(), N));
  const std::string shape = "B16 T1024 C768";
  if (ctx.wanted("embedding_forward")) {
    poison(out.data(), out.bytes());
    measure(
        ctx,
        {"embedding_forward", dtype_name<A>(), shape, "NCb + DCb + TCb + 4N",
         double(N * C * b) + D * double(C * b) + double(T * C * b) + 4.0 * N},
        [&] {
          gpt::cuda::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), kBatch, kSeq, kChannels);
        },
        [&] { return all_finite(out.data(), out.size()); });
  }
  if (ctx.wanted("embedding_backward")) {
    measure(
        ctx,
        {"embedding_backward", dtype_name<A>(), shape, "NCb + 8DC + 8TC + 4N",
         double(N * C * b) + 8.0 * D * double(C) + 8.0 * double(T * C) + 4.0 * N},
        [&] {
          gpt::cuda::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), kBatch, kSeq,
                                        kChannels);
        },
        [&] { return all_finite(dwte.data(), dwte.size()) && all_finite(dwpe.data(), dwpe.size()); });
  }
}

template <class A>
void bench_layernorm(Context& ctx) {
  if (!ctx.wanted("layernorm_forward") && !ctx.wanted("layernorm_backward")) return;
  const size_t N = kTokens, C = kChannels, b = sizeof(A);
  DeviceBuffer<A> inp(N * C), out(N * C), w(C), bias(C), dout(N * C), dinp(N * C);
  DeviceBuffer<float> mean(N), rstd(N), dw(C), db(C);
  fill_uniform(inp.data(), inp.size(), 11);
  fill_uniform(w.data(), C, 12, 0.5f, 1.5f);
  fill_uniform(bias.data(), C, 13);
  fill_uniform(dout.data(), dout.size(), 14);
  fill_uniform(dinp.data(), dinp.size(), 15);
  fill_uniform(dw.data(), C, 16);
  fill_uniform(db.data(), C, 17);
  const std::string shape = shape2(long(N), long(C));
  poison(out.data(), out.bytes());
  poison(mean.data(), mean.bytes());
  poison(rstd.data(), rstd.bytes());
  // The forward also produces the statistics the backward reads.
  auto forward = [&] {
    gpt::cuda::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), bias.data(), kTokens,
                                 kChannels);
  };
  if (ctx.wanted("layernorm_forward")) {
    measure(ctx,
            {"layernorm_forward", dtype_name<A>(), shape, "2NCb + 2Cb + 8N",
             double(2 * N * C * b + 2 * C * b + 8 * N)},
            forward, [&] {
              return all_finite(out.data(), out.size()) && all_finite(mean.data(), N) &&
                     all_finite(rstd.data(), N);
            });
  } else {
    try {
      forward();
    } catch (const std::exception& e) {
      ctx.table.add({"layernorm_backward", dtype_name<A>(), shape}, std::string("failed: forward: ") + e.what());
      return;
    }
  }
  if (ctx.wanted("layernorm_backward")) {
    measure(
        ctx,
        {"layernorm_backward", dtype_name<A>(), shape, "4NCb + Cb + 8N + 16C",
         double(4 * N * C * b + C * b + 8 * N + 16 * C)},
        [&] {
          gpt::cuda::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                                        mean.data(), rstd.data(), kTokens, kChannels);
        },
        [&] {
          return all_finite(dinp.data(), dinp.size()) && all_finite(dw.data(), C) && all_finite(db.data(), C);
        });
  }
}

template <class A>
void bench_gelu(Context& ctx) {
  if (!ctx.wanted("gelu_forward") && !ctx.wanted("gelu_backward")) return;
  const size_t n = size_t(kTokens) * kHidden, b = sizeof(A);
  DeviceBuffer<A> inp(n), out(n), dout(n), dinp(n);
  fill_uniform(inp.data(), n, 21, -4.0f, 4.0f);
  fill_uniform(dout.data(), n, 22);
  const std::string shape = shape2(kTokens, kHidden);
  if (ctx.wanted("gelu_forward")) {
    poison(out.data(), out.bytes());
    measure(
        ctx, {"gelu_forward", dtype_name<A>(), shape, "2nb", double(2 * n * b)},
        [&] { gpt::cuda::gelu_forward(out.data(), inp.data(), n); }, [&] { return all_finite(out.data(), n); });
  }
  if (ctx.wanted("gelu_backward")) {
    poison(dinp.data(), dinp.bytes());  // written, not added: an element left unwritten stays NaN
    measure(
        ctx, {"gelu_backward", dtype_name<A>(), shape, "3nb", double(3 * n * b)},
        [&] { gpt::cuda::gelu_backward(dinp.data(), inp.data(), dout.data(), n); },
        [&] { return all_finite(dinp.data(), n); });
  }
}

// The column sums of dout into an fp32 bias gradient, at the widths of GPT-2's biases:
// C (attproj, fcproj; qkv's 3C lies between) and 4C (fc).
template <class A>
void bench_bias_backward(Context& ctx) {
  if (!ctx.wanted("bias_backward")) return;
  for (const size_t OC : {size_t(kChannels), size_t(kHidden)}) {
    const size_t N = kTokens, b = sizeof(A);
    DeviceBuffer<A> dout(N * OC);
    DeviceBuffer<float> dbias(OC);
    fill_uniform(dout.data(), dout.size(), 41);
    fill_uniform(dbias.data(), OC, 42);
    measure(
        ctx, {"bias_backward", dtype_name<A>(), shape2(long(N), long(OC)), "NCb + 8C", double(N * OC * b + 8 * OC)},
        [&] { gpt::cuda::bias_backward(dbias.data(), dout.data(), kTokens, int(OC)); },
        [&] { return all_finite(dbias.data(), OC); });
  }
}

template <class A>
void bench_residual(Context& ctx) {
  if (!ctx.wanted("residual_forward") && !ctx.wanted("residual_backward")) return;
  const size_t n = size_t(kTokens) * kChannels, b = sizeof(A);
  DeviceBuffer<A> x(n), y(n), out(n), dout(n), dx(n), dy(n);
  fill_uniform(x.data(), n, 31);
  fill_uniform(y.data(), n, 32);
  fill_uniform(dout.data(), n, 33);
  fill_uniform(dx.data(), n, 34);
  fill_uniform(dy.data(), n, 35);
  const std::string shape = shape2(kTokens, kChannels);
  if (ctx.wanted("residual_forward")) {
    poison(out.data(), out.bytes());
    measure(
        ctx, {"residual_forward", dtype_name<A>(), shape, "3nb", double(3 * n * b)},
        [&] { gpt::cuda::residual_forward(out.data(), x.data(), y.data(), n); },
        [&] { return all_finite(out.data(), n); });
  }
  if (ctx.wanted("residual_backward")) {
    measure(
        ctx, {"residual_backward", dtype_name<A>(), shape, "5nb", double(5 * n * b)},
        [&] { gpt::cuda::residual_backward(dx.data(), dy.data(), dout.data(), n); },
        [&] { return all_finite(dx.data(), n) && all_finite(dy.data(), n); });
  }
}

// x *= s on n elements of A: an activation-sized tensor, or (fp32) the gradients of every
// parameter, where training uses it.
template <class A>
void bench_scale(Context& ctx, size_t n, const std::string& shape) {
  if (!ctx.wanted("scale")) return;
  DeviceBuffer<A> x(n);
  fill_uniform(x.data(), n, 41);
  measure(
      ctx, {"scale", dtype_name<A>(), shape, "2nb", double(2 * n * sizeof(A))},
      [&] { gpt::cuda::scale(x.data(), n, 0.999f); },  // close to 1: repetitions keep values finite
      [&] { return all_finite(x.data(), n); });
}

template <class A>
void bench_crossentropy(Context& ctx) {
  if (!ctx.wanted("crossentropy") && !ctx.wanted("crossentropy_loss_only")) return;
  const size_t N = kTokens, V = kVocab, Vp = kVocabPadded, b = sizeof(A);
  DeviceBuffer<A> logits(N * Vp), dlogits(N * Vp);
  DeviceBuffer<int32_t> targets(N);
  DeviceBuffer<float> losses(N);
  fill_uniform(logits.data(), logits.size(), 51, -8.0f, 8.0f);
  fill_indices(targets.data(), N, 52, kVocab);
  const std::string shape = "N16384 V50257 Vp50304";
  const float dloss = 1.0f / float(N);
  if (ctx.wanted("crossentropy")) {
    poison(dlogits.data(), dlogits.bytes());
    poison(losses.data(), losses.bytes());
    measure(
        ctx, {"crossentropy", dtype_name<A>(), shape, "NVb + NVpb + 8N", double(N * V * b + N * Vp * b + 8 * N)},
        [&] {
          gpt::cuda::softmax_crossentropy(losses.data(), dlogits.data(), logits.data(), targets.data(), dloss,
                                          kTokens, kVocab, kVocabPadded);
        },
        [&] { return all_finite(losses.data(), N) && all_finite(dlogits.data(), dlogits.size()); });
  }
  if (ctx.wanted("crossentropy_loss_only")) {
    poison(losses.data(), losses.bytes());
    measure(
        ctx, {"crossentropy_loss_only", dtype_name<A>(), shape, "NVb + 8N", double(N * V * b + 8 * N)},
        [&] {
          gpt::cuda::softmax_crossentropy(losses.data(), static_cast<A*>(nullptr), logits.data(), targets.data(),
                                          dloss, kTokens, kVocab, kVocabPadded);
        },
        [&] { return all_finite(losses.data(), N); });
  }
}

// The optimizer's ops run on every parameter, in fp32 (the API's only type for them), and
// so does the scaling of the gradients.
void bench_optimizer(Context& ctx) {
  const size_t n = kParams;
  const std::string shape = "n=124475904";
  bench_scale<float>(ctx, n, shape + " (gradients)");
  if (ctx.wanted("sum_of_squares")) {
    DeviceBuffer<float> g(n);
    fill_uniform(g.data(), n, 61);
    // sum_of_squares synchronises and returns to the host: the timed span includes that.
    measure(
        ctx, {"sum_of_squares", "fp32", shape, "4n", 4.0 * double(n)},
        [&] { ctx.sink += gpt::cuda::sum_of_squares(g.data(), n); }, [&] { return std::isfinite(ctx.sink); });
  }
  if (ctx.wanted("adamw")) {
    DeviceBuffer<float> p(n), g(n), m(n), v(n), copy_f(n);
    DeviceBuffer<gpt::bf16> copy_b(n);
    fill_uniform(p.data(), n, 71);
    fill_uniform(g.data(), n, 72);
    fill_uniform(m.data(), n, 73, -1e-2f, 1e-2f);
    fill_uniform(v.data(), n, 74, 1e-6f, 1e-4f);
    const gpt::ops::AdamWArgs args{6e-4, 0.9, 0.95, 1e-8, 0.1, 1.0, 10};
    auto state_finite = [&] {
      return all_finite(p.data(), n) && all_finite(m.data(), n) && all_finite(v.data(), n);
    };
    measure(
        ctx, {"adamw", "fp32", shape + " no copy", "28n", 28.0 * double(n)},
        [&] {
          gpt::cuda::adamw_update(p.data(), g.data(), m.data(), v.data(), n, args, static_cast<float*>(nullptr),
                                  false);
        },
        state_finite);
    poison(copy_b.data(), copy_b.bytes());
    measure(
        ctx, {"adamw", "fp32", shape + " bf16 copy", "30n", 30.0 * double(n)},
        [&] { gpt::cuda::adamw_update(p.data(), g.data(), m.data(), v.data(), n, args, copy_b.data(), true); },
        [&] { return state_finite() && all_finite(copy_b.data(), n); });
    poison(copy_f.data(), copy_f.bytes());
    measure(
        ctx, {"adamw", "fp32", shape + " fp32 copy, rounded", "32n", 32.0 * double(n)},
        [&] { gpt::cuda::adamw_update(p.data(), g.data(), m.data(), v.data(), n, args, copy_f.data(), true); },
        [&] { return state_finite() && all_finite(copy_f.data(), n); });
  }
  if (ctx.wanted("round_to_bf16")) {
    DeviceBuffer<float> x(n);
    fill_uniform(x.data(), n, 81);
    measure(
        ctx, {"round_to_bf16", "fp32", shape, "8n", 8.0 * double(n)},
        [&] { gpt::cuda::round_to_bf16(x.data(), n); }, [&] { return all_finite(x.data(), n); });
  }
  if (ctx.wanted("convert")) {
    DeviceBuffer<float> f(n), back(n);
    DeviceBuffer<gpt::bf16> h(n);
    fill_uniform(f.data(), n, 91);
    poison(h.data(), h.bytes());
    poison(back.data(), back.bytes());
    measure(
        ctx, {"convert", "fp32->bf16", shape, "4n + 2n", 6.0 * double(n)},
        [&] { gpt::cuda::convert(h.data(), f.data(), n); }, [&] { return all_finite(h.data(), n); });
    measure(
        ctx, {"convert", "bf16->fp32", shape, "2n + 4n", 6.0 * double(n)},
        [&] { gpt::cuda::convert(back.data(), h.data(), n); }, [&] { return all_finite(back.data(), n); });
  }
}

// The ops templated on the storage type, in A.
template <class A>
void bench_activations(Context& ctx) {
  bench_embedding<A>(ctx);
  bench_layernorm<A>(ctx);
  bench_gelu<A>(ctx);
  bench_bias_backward<A>(ctx);
  bench_residual<A>(ctx);
  bench_scale<A>(ctx, size_t(kTokens) * kChannels, shape2(kTokens, kChannels));
  bench_crossentropy<A>(ctx);
  ctx.table.separator();
}

// ---- the program -------------------------------------------------------------------------------

void print_usage(FILE* f) {
  std::fprintf(
      f,
      "usage: bench_ops [--reps N] [--warmup N] [--seconds S] [--no-flush] [--ops name,...] [--fp32]\n"
      "                 [--json FILE] [--list] [--help]\n"
      "  --reps N       timed repetitions, at most (default 20); --warmup N untimed calls first (default 2)\n"
      "  --seconds S    time budget per measurement: fewer repetitions (at least 3) for slow ones (default 2)\n"
      "  --no-flush     do not evict the L2 between repetitions\n"
      "  --ops          which ops (default all; --list names them)\n"
      "  --fp32         also the activation ops in fp32 (the optimizer's are fp32 always)\n"
      "  --json FILE    also write every row as a JSON line to FILE\n");
}

Options parse(Args& args) {
  Options opt;
  opt.timing = args.timing(20);
  opt.ops = args.list("--ops");
  for (const std::string& op : opt.ops)
    if (std::find(kOpNames.begin(), kOpNames.end(), op) == kOpNames.end())
      args.fail("--ops", "'" + op + "' is not an op (--list names them)");
  opt.fp32 = args.flag("--fp32");
  opt.json_path = args.value("--json");
  return opt;
}

int run(int argc, char** argv) {
  Args args(argc, argv);
  if (args.flag("--help") || args.flag("-h")) {
    print_usage(stdout);
    return 0;
  }
  if (args.flag("--list")) {
    for (const std::string& op : kOpNames) std::printf("%s\n", op.c_str());
    return 0;
  }
  const Options opt = parse(args);
  args.finish();

  if (!have_device("bench_ops")) return 1;
  std::ofstream json = open_json("bench_ops", opt.json_path);
  const DeviceInfo dev = device_info();
  const int memory_khz = dev.memory_clock_khz, bus_bits = dev.memory_bus_bits;

  std::printf(
      "bench_ops: memory-bound ops at GPT-2 124M training sizes (N = B*T = %d, C = %d, V = %d, Vp = %d, "
      "n = %zu parameters)\n",
      kTokens, kChannels, kVocab, kVocabPadded, kParams);
  print_device(dev);
  if (memory_khz > 0 && bus_bits > 0)
    std::printf(
        "DRAM peak   2 x %.0f MHz x %d bits / 8 = %.0f GB/s (cudaDevAttrMemoryClockRate, "
        "cudaDevAttrGlobalMemoryBusWidth)\n",
        memory_khz * 1e-3, bus_bits, dev.dram_bandwidth_gbs);
  else
    std::printf("DRAM peak   not reported (memory clock %d kHz, bus %d bits): no %% peak column\n", memory_khz,
                bus_bits);
  print_timing(opt.timing);
  std::printf(
      "bytes       compulsory traffic by each op's definition (rule per row; b = bytes per element,\n"
      "            D = distinct tokens); GB/s = bytes / median time; %% copy: of a 1 GiB cudaMemcpy D2D\n\n");

  L2Flush flush(dev.l2_bytes);
  Table table(
      {"op", "dtype", "shape", "bytes", "MB", "ms", "min", "max", "reps", "GB/s", "% peak", "% copy", "written"},
      4);
  Context ctx{opt, dev, flush, table, json.is_open() ? &json : nullptr};
  bench_copy(ctx);  // always: the "% copy" column's denominator
  table.separator();
  bench_activations<gpt::bf16>(ctx);
  if (opt.fp32) bench_activations<float>(ctx);
  bench_optimizer(ctx);
  table.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return gpt::bench::bench_main("bench_ops", argc, argv, run, print_usage); }
