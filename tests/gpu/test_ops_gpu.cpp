// GPU memory-bound ops (kernels/cuda/cuda_ops.h: embedding (whole and of a vocabulary
// range), layernorm, GELU, residual, scale, softmax cross-entropy (whole and split over
// vocabulary ranges), sum of squares, AdamW, bf16 rounding and conversions)
// against the CPU reference (kernels/cpu/) run in double: the ground truth (kernels/cpu
// instantiates every one of these ops for double, so no reference here is a float one).
//
// Every op runs with both storage types, A = float and A = gpt::bf16, on sizes that reach
// the edges of vectorised code: n not a multiple of 8 (the scalar tail), C = 7, 65 and 768,
// N = 1, 3 and 33 rows, vocabularies with padding (V < Vp) and without, and, for the
// flat element-wise ops, views that start one element into their allocation (misaligned
// for 16-byte accesses), all arrays at once or only one of them. Inputs are random from
// fixed seeds; in bf16 tests every input is rounded to bf16 on the host first, so the GPU
// and the reference see the same numbers and only the GPU's fp32 arithmetic and its
// rounding of what it stores differ.
//
// Every comparison within bounds also has its negative control: the same bounds must reject
// the truth 1 % off (tests/gpu/negative_control.h).
//
// Checks besides the values:
//  - backward ops accumulate (+=): gradients start from random nonzero values, and the
//    reference adds to the same values, so an op that overwrites is off by the start value
//    (gelu_backward writes its dinp: there the reference ignores the start value, so an op
//    that adds to it is off by it);
//  - forward outputs are poisoned (all bits set: NaN in fp32 and bf16) before the call,
//    so an element nobody wrote is NaN, and NaN fails every comparison;
//  - every device array has guard elements after its end (and before it, for shifted
//    views) that must come back untouched: a tail that runs one pack too far shows;
//  - embedding_backward and layernorm_backward (the reductions) give the same bits when run
//    twice, also when most positions share one token (one long run in the sorted scatter);
//  - null pointers and impossible shapes throw std::invalid_argument.
//
// Without a GPU (cudaGetDeviceCount fails or reports 0) the program exits 77, which CTest
// reports as skipped.
//
// ---- Tolerances, derived -----------------------------------------------------------------
// eps = 2^-23 (fp32 machine epsilon; one rounding moves a value by at most eps/2 of itself).
// A sum of n rounded terms is off by about sqrt(n) eps times the sum of the terms' sizes:
// errors of random sign add like a random walk (n eps is the worst case, which random data
// does not reach). A safety factor S = 8 covers the constants. |.| below are sizes taken
// from the reference in double on the actual inputs, element by element, and "fp32(x, k)"
// means S eps k x: the error of k roundings (or of a sum of k^2 terms) of size x.
//
//   embedding out = wte + wpe              fp32(|wte| + |wpe|, 1)
//   embedding dwte, dwpe (k terms each     fp32(|start| + sum |dout|, sqrt(k + 1))
//     added to the start value)
//   layernorm, per row, A1 = mean|x|, Q = mean x^2, var + 1e-5 = 1/rstd^2:
//     mean  = sum x / C:                   dm = fp32(A1, sqrt(C) + 1)
//     var   (two-pass or E[x^2] - mean^2): dv = fp32(Q, sqrt(C) + 4) + 2 |mean| dm
//     rstd  = (var + 1e-5)^-1/2:           relative er = dv / (2 (var + 1e-5)) + S eps
//     xhat  = (x - mean) rstd:             dxhat = dm rstd + |xhat| (er + S eps)
//     out   = xhat w + b:                  |w| dxhat + fp32(|xhat w| + |b|, 1)
//   layernorm backward, per row, g = dout w, mg = mean g, mgx = mean g xhat (mean and rstd
//   are given: the same fp32 values on both sides):
//     dmg  = fp32(mean|g|, sqrt(C) + 2),   dmgx = fp32(mean|g xhat|, sqrt(C) + 4)
//     delta = rstd (g - mg - xhat mgx):    rstd (dmg + |xhat| dmgx + fp32(|g| + |mg| + 2|xhat mgx|, 1))
//     dinp += delta:                       that + fp32(|dinp| + |delta|, 1)
//     dw += sum_n dout xhat:               fp32(|dw| + sum_n |dout xhat|, sqrt(N + 1) + 2)
//     db += sum_n dout:                    fp32(|db| + sum_n |dout|, sqrt(N + 1))
//   gelu, tanh form 0.5 x (1 + tanh(u)): tanh is off by ~eps absolute, the argument's
//     error |du| ~ eps |u| costs sech^2(u) |du| <= 0.45 eps, and the factor 0.5 x scales
//     both:                                fp32(|x| + |y|, 1)
//   gelu' = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3c x^2): the same absolute errors in
//     th and 1 - th^2, scaled by D(x) = 1 + |x| k (1 + 3c x^2):
//     dinp = gelu'(x) dout (written):      fp32(D(x) |dout|, 1)
//   residual out = a + b:                  fp32(|a| + |b|, 1);  da, db += dout: fp32(|da| + |dout|, 1)
//   scale x *= s:                          fp32(|x s|, 1)
//   cross-entropy, per row, R = max z - min z (the logit range), L = log sum exp(z - max):
//     each exp(z_j - max) is off by 2 ulps plus its argument's rounding (eps R), also
//     through an online max's rescalings; the V positive terms sum with relative error
//                                          eS = S eps (sqrt(V) + R + 4)
//     loss = L + max - z_t:                eS + fp32(|L| + |max| + |z_t| + |loss|, 1)
//     p_j = exp(z_j - max) / sum (or exp(z_j - max - L)): relative ep = 2 eS + S eps |L|
//     dlogits_j = dloss (p_j - [j = t]):   |dloss| (ep p_j + fp32(p_j + [j = t], 1));
//                                          padding columns exactly 0
//   sum of squares: a float's square is exact in double (24 + 24 bits < 53), so only the
//     order of the double additions differs, on both sides: S 2^-52 sqrt(n) sum
//   AdamW (equations in kernels/ops.h), with the hyper-parameters rounded to fp32 as the
//     API says: 1 - fp32(b) is off by up to (eps/2) b of itself, which relative to 1 - b is
//     eb = eps b / (1 - b) (x2 margin; 19 eps for b = 0.95). With gs = g * grad_scale:
//     m' = b1 m + (1-b1) gs:               dm = fp32(|b1 m| + |(1-b1) gs|, 1) + eb1 |(1-b1) gs|
//     v' = b2 v + (1-b2) gs^2:             dv = fp32(b2 v + (1-b2) gs^2, 1) + eb2 (1-b2) gs^2
//     r = m^ / (sqrt(v^) + eps_adam):      dr = dm / bc1 / den + |r| (dv / (2 v') sqrt(v^) / den + S eps)
//     p' = p - lr (r + wd p):              lr dr + fp32(|p| + lr (|r| + wd |p|), 1)
//
// bf16 storage adds the rounding of every stored bf16 value: bf16 keeps 8 significant
// bits, so rounding to nearest moves a value by at most u = 2^-8 of itself. The GPU
// rounds its fp32 result y' (off by the fp32 bound e above), so an output is within
//   e + 2^-8 (|want| + e).
// Exact (bit for bit, NaN only as NaN): round_to_bf16 and convert (one correctly rounded
// or exact conversion, the same as the CPU's kernels/cpu/bf16.h), AdamW's compute copy
// against the GPU's own updated fp32 weights, and the repeated backward runs.
#include "tests/gpu/gpu_test.h"  // Catch2, cuda_ok, bf16 conversions
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/bf16.h"
#include "kernels/adamw_args.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "tests/gpu/negative_control.h"

namespace {

using gpt::bf16;

// ---- tolerances (derivation at the top of the file) -----------------------------------------

constexpr double kEps = 0x1p-23;          // fp32 machine epsilon
constexpr double kSafety = 8;             // S
constexpr double kBf16Rounding = 0x1p-8;  // u: relative error of one rounding to bf16

// S eps k x: the error of k roundings of size x, or of a sum of k^2 terms of total size x.
double fp32_bound(double size, double k = 1) { return kSafety * kEps * k * size; }

template <class A>
constexpr bool is_bf16 = std::is_same_v<A, bf16>;

// The bound of an output stored as A: the fp32 bound e, plus bf16's rounding of the result.
template <class A>
double stored_bound(double e, double want) {
  if constexpr (is_bf16<A>) return e + kBf16Rounding * (std::fabs(want) + e);
  return e;
}

// ---- host <-> device ---------------------------------------------------------------------

using gpt::gpu_test::cuda_ok;
void sync(const char* what) { cuda_ok(cudaDeviceSynchronize(), what); }

// x as the storage type E holds it (tests/gpu/gpu_test.h).
template <class E>
E to_storage(float x) {
  return gpt::gpu_test::to_elem<E>(x);
}
using gpt::gpu_test::to_float;

// x as storage type E holds it.
template <class E>
float stored(float x) {
  return to_float(to_storage<E>(x));
}

// Guard elements after every array (and the `offset` elements before a shifted view),
// filled with kGuardByte when the array is made; they must never change.
constexpr size_t kGuard = 16;
constexpr unsigned char kGuardByte = 0x5A;

// A device array of n elements of E, seen through a view that starts `offset` elements
// into its allocation (offset 1: misaligned for 16-byte accesses). Freed on scope exit.
template <class E>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n, size_t offset = 0) : n_(n), offset_(offset) {
    cuda_ok(cudaMalloc(&base_, total() * sizeof(E)), "cudaMalloc");
    cuda_ok(cudaMemset(base_, kGuardByte, total() * sizeof(E)), "cudaMemset");
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(base_); }

  E* get() const { return base_ + offset_; }
  size_t size() const { return n_; }

  void upload(const std::vector<E>& host) {
    if (host.size() != n_) throw std::logic_error("upload: size mismatch");
    cuda_ok(cudaMemcpy(get(), host.data(), n_ * sizeof(E), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<E> download() const {
    std::vector<E> host(n_);
    cuda_ok(cudaMemcpy(host.data(), get(), n_ * sizeof(E), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  // Values that E holds exactly (from random_values<E>), as E.
  void set(const std::vector<float>& values) {
    std::vector<E> host(values.size());
    for (size_t i = 0; i < values.size(); ++i) host[i] = to_storage<E>(values[i]);
    upload(host);
  }
  std::vector<float> values() const {
    const std::vector<E> host = download();
    std::vector<float> out(host.size());
    for (size_t i = 0; i < host.size(); ++i) out[i] = to_float(host[i]);
    return out;
  }
  // Every bit set: NaN in fp32 and in bf16.
  void poison() { cuda_ok(cudaMemset(get(), 0xFF, n_ * sizeof(E)), "poison"); }

  bool guards_intact() const {
    std::vector<unsigned char> bytes(total() * sizeof(E));
    cuda_ok(cudaMemcpy(bytes.data(), base_, bytes.size(), cudaMemcpyDeviceToHost), "guards");
    const size_t view_begin = offset_ * sizeof(E), view_end = (offset_ + n_) * sizeof(E);
    for (size_t i = 0; i < bytes.size(); ++i)
      if ((i < view_begin || i >= view_end) && bytes[i] != kGuardByte) return false;
    return true;
  }

 private:
  size_t total() const { return offset_ + n_ + kGuard; }
  E* base_ = nullptr;
  size_t n_, offset_;
};

template <class... Arrays>
void check_guards(const Arrays&... arrays) {
  const int broken = (int(!arrays.guards_intact()) + ...);
  INFO("arrays whose guard elements (outside the view) were written: " << broken);
  CHECK(broken == 0);
}

// ---- inputs and references ------------------------------------------------------------------

// n values uniform in [lo, hi), rounded to what storage type E holds.
template <class E>
std::vector<float> random_values(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = stored<E>(uni(rng));
  return x;
}

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }
std::vector<double> absolute(const std::vector<float>& x) {
  std::vector<double> a(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[i] = std::fabs(double(x[i]));
  return a;
}

// ---- comparisons --------------------------------------------------------------------------

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

// Element i passes when |got[i] - want[i]| <= bound(i); a NaN never passes. Reports how
// many failed and the worst element (largest error / bound): what one needs to see when a
// check fails. The same bounds must reject the negative control, the truth 1 % off
// (negative_control.h): some element of it outside its bound, where the truth is finite
// and non-zero (ControlCount).
template <class Bound>
void check_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                 Bound&& bound) {
  REQUIRE(!got.empty());
  REQUIRE(got.size() == want.size());
  size_t failures = 0, worst = 0;
  gpt::gpu_test::ControlCount control;
  double worst_ratio = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]), b = bound(i);
    const bool ok = err <= b;  // false for NaN
    const double ratio = b > 0 && !std::isnan(err) ? err / b : ok ? 0.0 : INFINITY;
    if (!ok) ++failures;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
    control.add(want[i], b);
  }
  INFO(what << ": " << failures << " of " << got.size() << " elements outside their bound; worst: element "
            << worst << ", got " << num(got[worst]) << ", want " << num(want[worst]) << ", bound "
            << num(bound(worst)));
  CHECK(failures == 0);
  INFO(what << ": the negative control (the truth 1 % off) must be rejected where it tells: " << control.describe());
  CHECK(control.rejected());
}

// Bit for bit (any NaN matches any NaN).
void check_same(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(!got.empty());
  REQUIRE(got.size() == want.size());
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same =
        (std::isnan(got[i]) && std::isnan(want[i])) || std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
    if (!same && differ++ == 0) first = i;
  }
  INFO(what << ": " << differ << " of " << got.size() << " elements differ; first: element " << first << ", got "
            << num(got[first]) << ", want " << num(want[first]));
  CHECK(differ == 0);
}

// ---- embedding ------------------------------------------------------------------------------

constexpr int kVocab = 97;  // rows of wte in these tests

// Tokens uniform in [0, kVocab), the first two forced to the table's edges; with
// `repeated`, 7 positions in 8 hold the same token (3), so its sorted run is long.
std::vector<int32_t> make_tokens(size_t n, bool repeated, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> pick(0, kVocab - 1);
  std::vector<int32_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = repeated && i % 8 != 5 ? 3 : pick(rng);
  if (n > 0) tokens[0] = kVocab - 1;
  if (n > 1) tokens[1] = 0;
  return tokens;
}

template <class A>
void check_embedding(int B, int T, int C, bool repeated, unsigned seed) {
  INFO("embedding B=" << B << " T=" << T << " C=" << C << (repeated ? " (repeated tokens)" : ""));
  std::mt19937 rng(seed);
  const size_t N = size_t(B) * T, V = kVocab;
  const std::vector<int32_t> tokens = make_tokens(N, repeated, rng);
  const auto wte = random_values<A>(V * C, -1, 1, rng), wpe = random_values<A>(size_t(T) * C, -1, 1, rng);
  const auto dout = random_values<A>(N * C, -1, 1, rng);
  const auto dwte0 = random_values<float>(V * C, -1, 1, rng),
             dwpe0 = random_values<float>(size_t(T) * C, -1, 1, rng);

  DeviceArray<int32_t> d_tokens(N);
  DeviceArray<A> d_wte(V * C), d_wpe(size_t(T) * C), d_out(N * C), d_dout(N * C);
  DeviceArray<float> d_dwte(V * C), d_dwpe(size_t(T) * C);
  d_tokens.upload(tokens);
  d_wte.set(wte);
  d_wpe.set(wpe);
  d_dout.set(dout);

  // Forward: one addition per element.
  d_out.poison();
  gpt::cuda::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, T, C);
  sync("embedding_forward");
  std::vector<double> out(N * C), out_size(N * C);
  gpt::cpu::embedding_forward(out.data(), tokens.data(), widen(wte).data(), widen(wpe).data(), B, T, C);
  gpt::cpu::embedding_forward(out_size.data(), tokens.data(), absolute(wte).data(), absolute(wpe).data(), B, T, C);
  check_close("out", d_out.values(), out,
              [&](size_t i) { return stored_bound<A>(fp32_bound(out_size[i]), out[i]); });

  // Backward: sums of k rows onto the start values; k is at most the most frequent
  // token's count (dwte) or B (dwpe). The sizes are the same op on absolute values.
  d_dwte.set(dwte0);
  d_dwpe.set(dwpe0);
  gpt::cuda::embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), B, T, C);
  sync("embedding_backward");
  const std::vector<float> dwte1 = d_dwte.values(), dwpe1 = d_dwpe.values();
  std::vector<double> dwte = widen(dwte0), dwpe = widen(dwpe0), dwte_size = absolute(dwte0),
                      dwpe_size = absolute(dwpe0);
  gpt::cpu::embedding_backward(dwte.data(), dwpe.data(), widen(dout).data(), tokens.data(), B, T, C);
  gpt::cpu::embedding_backward(dwte_size.data(), dwpe_size.data(), absolute(dout).data(), tokens.data(), B, T, C);
  std::vector<int> count(V, 0);
  for (int32_t t : tokens) ++count[size_t(t)];
  const double k_wte = *std::max_element(count.begin(), count.end()), k_wpe = B;
  check_close("dwte", dwte1, dwte, [&](size_t i) { return fp32_bound(dwte_size[i], std::sqrt(k_wte + 1)); });
  check_close("dwpe", dwpe1, dwpe, [&](size_t i) { return fp32_bound(dwpe_size[i], std::sqrt(k_wpe + 1)); });

  // Deterministic: the same start values give the same bits.
  d_dwte.set(dwte0);
  d_dwpe.set(dwpe0);
  gpt::cuda::embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), B, T, C);
  sync("embedding_backward, second run");
  check_same("dwte, second run", d_dwte.values(), dwte1);
  check_same("dwpe, second run", d_dwpe.values(), dwpe1);
  check_guards(d_tokens, d_wte, d_wpe, d_out, d_dout, d_dwte, d_dwpe);
}

// A vocabulary range [v0, v1) of wte and positions from pos0 (tensor parallelism): the same
// bounds as the whole table, since each output element is still one addition (of zero for
// another range's token) and each gradient a sum of at most as many terms.
template <class A>
void check_embedding_range(int B, int T, int C, int v0, int v1, bool with_wpe, int pos0, unsigned seed) {
  INFO("embedding range [" << v0 << ", " << v1 << ") B=" << B << " T=" << T << " C=" << C
                           << (with_wpe ? " with positions from " : " without positions ") << pos0);
  std::mt19937 rng(seed);
  const size_t N = size_t(B) * T, rows = size_t(v1 - v0), P = size_t(pos0 + T);
  const std::vector<int32_t> tokens = make_tokens(N, false, rng);
  const auto wte = random_values<A>(std::max<size_t>(rows, 1) * C, -1, 1, rng);
  const auto wpe = random_values<A>(P * C, -1, 1, rng), dout = random_values<A>(N * C, -1, 1, rng);
  const auto dwte0 = random_values<float>(std::max<size_t>(rows, 1) * C, -1, 1, rng),
             dwpe0 = random_values<float>(P * C, -1, 1, rng);
  DeviceArray<int32_t> d_tokens(N);
  DeviceArray<A> d_wte(std::max<size_t>(rows, 1) * C), d_wpe(P * C), d_out(N * C), d_dout(N * C);
  DeviceArray<float> d_dwte(std::max<size_t>(rows, 1) * C), d_dwpe(P * C);
  d_tokens.upload(tokens);
  d_wte.set(wte);
  d_wpe.set(wpe);
  d_dout.set(dout);
  const A* wpe_or_null = with_wpe ? d_wpe.get() : nullptr;

  d_out.poison();
  gpt::cuda::embedding_range_forward(d_out.get(), d_tokens.get(), d_wte.get(), v0, v1, wpe_or_null, pos0, B, T, C);
  sync("embedding_range_forward");
  std::vector<double> out(N * C), out_size(N * C);
  const std::vector<double> wpe_d = widen(wpe), wpe_abs = absolute(wpe);
  gpt::cpu::embedding_range_forward(out.data(), tokens.data(), widen(wte).data(), v0, v1,
                                    with_wpe ? wpe_d.data() : nullptr, pos0, B, T, C);
  gpt::cpu::embedding_range_forward(out_size.data(), tokens.data(), absolute(wte).data(), v0, v1,
                                    with_wpe ? wpe_abs.data() : nullptr, pos0, B, T, C);
  check_close("out", d_out.values(), out,
              [&](size_t i) { return stored_bound<A>(fp32_bound(out_size[i]), out[i]); });

  d_dwte.set(dwte0);
  d_dwpe.set(dwpe0);
  gpt::cuda::embedding_range_backward(d_dwte.get(), with_wpe ? d_dwpe.get() : nullptr, d_dout.get(), d_tokens.get(),
                                      v0, v1, pos0, B, T, C);
  sync("embedding_range_backward");
  std::vector<double> dwte = widen(dwte0), dwpe = widen(dwpe0), dwte_size = absolute(dwte0),
                      dwpe_size = absolute(dwpe0);
  gpt::cpu::embedding_range_backward(dwte.data(), with_wpe ? dwpe.data() : nullptr, widen(dout).data(), tokens.data(),
                                     v0, v1, pos0, B, T, C);
  gpt::cpu::embedding_range_backward(dwte_size.data(), with_wpe ? dwpe_size.data() : nullptr,
                                     absolute(dout).data(), tokens.data(), v0, v1, pos0, B, T, C);
  std::vector<int> count(kVocab, 0);
  for (int32_t t : tokens) ++count[size_t(t)];
  const double k_wte = *std::max_element(count.begin(), count.end()), k_wpe = B;
  // Rows outside the range and positions before pos0 (or all of dwpe without positions)
  // keep their start values: the reference leaves them, so the bound of 0 extra holds.
  check_close("dwte rows", d_dwte.values(), dwte, [&](size_t i) { return fp32_bound(dwte_size[i], std::sqrt(k_wte + 1)); });
  check_close("dwpe", d_dwpe.values(), dwpe, [&](size_t i) { return fp32_bound(dwpe_size[i], std::sqrt(k_wpe + 1)); });
  check_guards(d_tokens, d_wte, d_wpe, d_out, d_dout, d_dwte, d_dwpe);
}

// ---- layernorm ------------------------------------------------------------------------------

template <class A>
void check_layernorm(int N, int C, unsigned seed) {
  INFO("layernorm N=" << N << " C=" << C);
  std::mt19937 rng(seed);
  const size_t rows = size_t(N), cols = size_t(C), n = rows * cols;
  // Rows with a mean of their own (real activations have one): offsets in [-1, 1].
  std::vector<float> x = random_values<float>(n, -1, 1, rng);
  const std::vector<float> row_offset = random_values<float>(rows, -1, 1, rng);
  for (size_t i = 0; i < n; ++i) x[i] = stored<A>(x[i] + row_offset[i / cols]);
  const auto w = random_values<A>(cols, -1.5f, 1.5f, rng), b = random_values<A>(cols, -0.5f, 0.5f, rng);

  DeviceArray<A> d_x(n), d_w(cols), d_b(cols), d_out(n);
  DeviceArray<float> d_mean(rows), d_rstd(rows);
  d_x.set(x);
  d_w.set(w);
  d_b.set(b);
  d_out.poison();
  d_mean.poison();
  d_rstd.poison();
  gpt::cuda::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
  sync("layernorm_forward");

  const std::vector<double> xd = widen(x), wd = widen(w), bd = widen(b);
  std::vector<double> out(n), mean(rows), rstd(rows);
  gpt::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), xd.data(), wd.data(), bd.data(), N, C);

  const double sqC = std::sqrt(double(C));
  std::vector<double> mean_bound(rows), rstd_bound(rows), out_bound(n);
  for (int r = 0; r < N; ++r) {
    const double* xr = &xd[size_t(r) * C];
    double A1 = 0, Q = 0;
    for (int c = 0; c < C; ++c) {
      A1 += std::fabs(xr[c]);
      Q += xr[c] * xr[c];
    }
    A1 /= C;
    Q /= C;
    const double m = mean[size_t(r)], s = rstd[size_t(r)];
    const double dm = fp32_bound(A1, sqC + 1);
    const double dv = fp32_bound(Q, sqC + 4) + 2 * std::fabs(m) * dm;
    const double er = dv / (2.0 / (s * s)) + kSafety * kEps;  // 1/s^2 = var + 1e-5
    mean_bound[size_t(r)] = dm;
    rstd_bound[size_t(r)] = er * s;
    for (int c = 0; c < C; ++c) {
      const size_t i = size_t(r) * C + c;
      const double xhat = (xr[c] - m) * s;
      const double dxhat = dm * s + std::fabs(xhat) * (er + kSafety * kEps);
      out_bound[i] = stored_bound<A>(std::fabs(wd[size_t(c)]) * dxhat +
                                         fp32_bound(std::fabs(xhat * wd[size_t(c)]) + std::fabs(bd[size_t(c)])),
                                     out[i]);
    }
  }
  check_close("out", d_out.values(), out, [&](size_t i) { return out_bound[i]; });
  check_close("mean", d_mean.values(), mean, [&](size_t i) { return mean_bound[i]; });
  check_close("rstd", d_rstd.values(), rstd, [&](size_t i) { return rstd_bound[i]; });

  // Backward from the forward's statistics rounded to fp32: the same numbers on both sides.
  std::vector<float> mean_f(rows), rstd_f(rows);
  for (int r = 0; r < N; ++r) {
    mean_f[size_t(r)] = float(mean[size_t(r)]);
    rstd_f[size_t(r)] = float(rstd[size_t(r)]);
  }
  const auto dout = random_values<A>(n, -1, 1, rng), dinp0 = random_values<A>(n, -1, 1, rng);
  const auto dw0 = random_values<float>(cols, -1, 1, rng), db0 = random_values<float>(cols, -1, 1, rng);
  DeviceArray<A> d_dout(n), d_dinp(n);
  DeviceArray<float> d_dw(cols), d_db(cols);
  d_dout.set(dout);
  d_mean.set(mean_f);
  d_rstd.set(rstd_f);
  auto run_backward = [&] {
    d_dinp.set(dinp0);
    d_dw.set(dw0);
    d_db.set(db0);
    gpt::cuda::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_x.get(), d_w.get(),
                                  d_mean.get(), d_rstd.get(), N, C);
    sync("layernorm_backward");
  };
  run_backward();
  const std::vector<float> dinp1 = d_dinp.values(), dw1 = d_dw.values(), db1 = d_db.values();

  const std::vector<double> doutd = widen(dout), meand = widen(mean_f), rstdd = widen(rstd_f);
  std::vector<double> dinp = widen(dinp0), dw = widen(dw0), db = widen(db0);
  gpt::cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), doutd.data(), xd.data(), wd.data(), meand.data(),
                               rstdd.data(), N, C);
  std::vector<double> dinp_bound(n), dw_size = absolute(dw0), db_size = absolute(db0);
  for (int r = 0; r < N; ++r) {
    const double m = meand[size_t(r)], s = rstdd[size_t(r)];
    double mg = 0, mgx = 0, G1 = 0, GX1 = 0;
    for (int c = 0; c < C; ++c) {
      const size_t i = size_t(r) * C + c;
      const double g = doutd[i] * wd[size_t(c)], xhat = (xd[i] - m) * s;
      mg += g;
      mgx += g * xhat;
      G1 += std::fabs(g);
      GX1 += std::fabs(g * xhat);
      dw_size[size_t(c)] += std::fabs(doutd[i] * xhat);
      db_size[size_t(c)] += std::fabs(doutd[i]);
    }
    mg /= C;
    mgx /= C;
    const double dmg = fp32_bound(G1 / C, sqC + 2), dmgx = fp32_bound(GX1 / C, sqC + 4);
    for (int c = 0; c < C; ++c) {
      const size_t i = size_t(r) * C + c;
      const double g = doutd[i] * wd[size_t(c)], xhat = (xd[i] - m) * s;
      const double delta = s * (g - mg - xhat * mgx);
      const double d_delta = s * (dmg + std::fabs(xhat) * dmgx +
                                  fp32_bound(std::fabs(g) + std::fabs(mg) + 2 * std::fabs(xhat * mgx)));
      dinp_bound[i] =
          stored_bound<A>(d_delta + fp32_bound(std::fabs(double(dinp0[i])) + std::fabs(delta)), dinp[i]);
    }
  }
  const double sqN = std::sqrt(double(N) + 1);
  check_close("dinp", dinp1, dinp, [&](size_t i) { return dinp_bound[i]; });
  check_close("dw", dw1, dw, [&](size_t i) { return fp32_bound(dw_size[i], sqN + 2); });
  check_close("db", db1, db, [&](size_t i) { return fp32_bound(db_size[i], sqN); });

  // Deterministic: a second run from the same start gives the same bits.
  run_backward();
  check_same("dinp, second run", d_dinp.values(), dinp1);
  check_same("dw, second run", d_dw.values(), dw1);
  check_same("db, second run", d_db.values(), db1);

  // The two halves apart (a zero-bubble schedule's input and weight halves): each leaves
  // the other's outputs alone and gives the fused call's bits.
  d_dinp.set(dinp0);
  d_dw.set(dw0);
  d_db.set(db0);
  gpt::cuda::layernorm_backward(d_dinp.get(), static_cast<float*>(nullptr), static_cast<float*>(nullptr), d_dout.get(),
                                d_x.get(), d_w.get(), d_mean.get(), d_rstd.get(), N, C);
  sync("layernorm_backward, input half");
  check_same("dinp, input half", d_dinp.values(), dinp1);
  check_same("dw untouched by the input half", d_dw.values(), dw0);
  gpt::cuda::layernorm_backward(static_cast<A*>(nullptr), d_dw.get(), d_db.get(), d_dout.get(), d_x.get(), d_w.get(),
                                d_mean.get(), d_rstd.get(), N, C);
  sync("layernorm_backward, weight half");
  check_same("dw, weight half", d_dw.values(), dw1);
  check_same("db, weight half", d_db.values(), db1);
  check_same("dinp untouched by the weight half", d_dinp.values(), dinp1);
  check_guards(d_x, d_w, d_b, d_out, d_mean, d_rstd, d_dout, d_dinp, d_dw, d_db);
}

// ---- flat element-wise ops --------------------------------------------------------------------

// Lengths: 1, under one pack, ragged (65, 2145 = 33 x 65, one past 6 blocks of 2048, a
// prime), and 768 (whole packs only).
const size_t kFlatSizes[] = {1, 7, 65, 768, 2145, 12289, 100003};

// View offsets of an op's arrays in argument order: all aligned, all shifted by one
// element (the scalar path), and only the second shifted (alignment must be checked for
// every pointer, not just the first).
using Offsets = std::array<size_t, 3>;
const Offsets kOffsets[] = {{0, 0, 0}, {1, 1, 1}, {0, 1, 0}};

std::string describe(size_t n, const Offsets& off) {
  return "n=" + std::to_string(n) + " offsets " + std::to_string(off[0]) + "," + std::to_string(off[1]) + "," +
         std::to_string(off[2]);
}

// gelu(x) in double: the definition, tanh form.
constexpr double kSqrt2OverPi = 0.7978845608028654, kGeluCubic = 0.044715;

template <class A>
void check_gelu(size_t n, const Offsets& off, unsigned seed) {
  std::mt19937 rng(seed);
  const auto x = random_values<A>(n, -5, 5, rng), dout = random_values<A>(n, -1, 1, rng),
             dinp0 = random_values<A>(n, -1, 1, rng);
  const std::vector<double> xd = widen(x);

  DeviceArray<A> d_out(n, off[0]), d_x(n, off[1]);
  d_x.set(x);
  d_out.poison();
  gpt::cuda::gelu_forward(d_out.get(), d_x.get(), n);
  sync("gelu_forward");
  std::vector<double> y(n);
  gpt::cpu::gelu_forward(y.data(), xd.data(), n);
  check_close("gelu out", d_out.values(), y,
              [&](size_t i) { return stored_bound<A>(fp32_bound(std::fabs(xd[i]) + std::fabs(y[i])), y[i]); });

  // gelu_backward(dinp, inp, dout): dinp, inp, dout at offsets 0, 1, 2. The op writes over
  // dinp (kernels/ops.h), so it starts as NaN: a kernel that read it would give NaN.
  DeviceArray<A> d_dinp(n, off[0]), d_inp(n, off[1]), d_dout(n, off[2]);
  d_inp.set(x);
  d_dout.set(dout);
  d_dinp.poison();
  gpt::cuda::gelu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n);
  sync("gelu_backward");
  std::vector<double> dinp = widen(dinp0);
  gpt::cpu::gelu_backward(dinp.data(), xd.data(), widen(dout).data(), n);
  check_close("gelu dinp", d_dinp.values(), dinp, [&](size_t i) {
    const double ax = std::fabs(xd[i]);
    const double D = 1 + ax * kSqrt2OverPi * (1 + 3 * kGeluCubic * ax * ax);
    return stored_bound<A>(fp32_bound(D * std::fabs(double(dout[i]))), dinp[i]);
  });
  check_guards(d_out, d_x, d_dinp, d_inp, d_dout);
}

template <class A>
void check_residual(size_t n, const Offsets& off, unsigned seed) {
  std::mt19937 rng(seed);
  const auto a = random_values<A>(n, -1, 1, rng), b = random_values<A>(n, -1, 1, rng),
             dout = random_values<A>(n, -1, 1, rng), da0 = random_values<A>(n, -1, 1, rng),
             db0 = random_values<A>(n, -1, 1, rng);

  DeviceArray<A> d_out(n, off[0]), d_a(n, off[1]), d_b(n, off[2]);
  d_a.set(a);
  d_b.set(b);
  d_out.poison();
  gpt::cuda::residual_forward(d_out.get(), d_a.get(), d_b.get(), n);
  sync("residual_forward");
  std::vector<double> out(n);
  gpt::cpu::residual_forward(out.data(), widen(a).data(), widen(b).data(), n);
  check_close("residual out", d_out.values(), out, [&](size_t i) {
    return stored_bound<A>(fp32_bound(std::fabs(double(a[i])) + std::fabs(double(b[i]))), out[i]);
  });

  // residual_backward(da, db, dout): da, db, dout at offsets 0, 1, 2.
  DeviceArray<A> d_da(n, off[0]), d_db(n, off[1]), d_dout(n, off[2]);
  d_da.set(da0);
  d_db.set(db0);
  d_dout.set(dout);
  gpt::cuda::residual_backward(d_da.get(), d_db.get(), d_dout.get(), n);
  sync("residual_backward");
  std::vector<double> da = widen(da0), db = widen(db0);
  gpt::cpu::residual_backward(da.data(), db.data(), widen(dout).data(), n);
  check_close("residual da", d_da.values(), da, [&](size_t i) {
    return stored_bound<A>(fp32_bound(std::fabs(double(da0[i])) + std::fabs(double(dout[i]))), da[i]);
  });
  check_close("residual db", d_db.values(), db, [&](size_t i) {
    return stored_bound<A>(fp32_bound(std::fabs(double(db0[i])) + std::fabs(double(dout[i]))), db[i]);
  });
  check_guards(d_out, d_a, d_b, d_da, d_db, d_dout);
}

template <class A>
void check_scale(size_t n, const Offsets& off, unsigned seed) {
  std::mt19937 rng(seed);
  const auto x0 = random_values<A>(n, -4, 4, rng);
  const float s = -0.7310585f;  // not a power of two: the product is rounded
  DeviceArray<A> d_x(n, off[0]);
  d_x.set(x0);
  gpt::cuda::scale(d_x.get(), n, s);
  sync("scale");
  std::vector<double> x = widen(x0);
  gpt::cpu::scale(x.data(), n, double(s));
  check_close("scale", d_x.values(), x,
              [&](size_t i) { return stored_bound<A>(fp32_bound(std::fabs(x[i])), x[i]); });
  check_guards(d_x);
}

// ---- softmax cross-entropy --------------------------------------------------------------------

struct LossShape {
  int N, V, Vp;
};
// Padding (V < Vp) from less than one warp's worth of columns to GPT-2's own vocabulary,
// and a vocabulary without padding.
const LossShape kLossShapes[] = {{1, 7, 8}, {3, 65, 72}, {3, 64, 64}, {33, 1000, 1024}, {4, 50257, 50304}};

template <class A>
void check_crossentropy(const LossShape& s, unsigned seed) {
  INFO("cross-entropy N=" << s.N << " V=" << s.V << " Vp=" << s.Vp);
  std::mt19937 rng(seed);
  const size_t n = size_t(s.N) * s.Vp;
  // Logits in [-8, 8]; row 0 shifted by +100, where exp without subtracting the max
  // overflows fp32. Padding columns hold values too: they must be ignored, not read as 0.
  std::vector<float> logits = random_values<float>(n, -8, 8, rng);
  for (int j = 0; j < s.Vp; ++j) logits[size_t(j)] += 100;
  for (float& z : logits) z = stored<A>(z);
  std::uniform_int_distribution<int32_t> pick(0, s.V - 1);
  std::vector<int32_t> targets(size_t(s.N));
  for (int32_t& t : targets) t = pick(rng);
  targets[0] = s.V - 1;  // the last real column
  if (s.N > 1) targets[1] = 0;
  const float dloss = 1.0f / float(s.N);  // the mean over rows, as training uses it

  DeviceArray<A> d_logits(n), d_dlogits(n);
  DeviceArray<int32_t> d_targets(size_t(s.N));
  DeviceArray<float> d_losses(size_t(s.N)), d_losses_only(size_t(s.N));
  d_logits.set(logits);
  d_targets.upload(targets);
  d_dlogits.set(random_values<A>(n, -1, 1, rng));  // overwritten, padding included
  d_losses.poison();
  d_losses_only.poison();
  gpt::cuda::softmax_crossentropy(d_losses.get(), d_dlogits.get(), d_logits.get(), d_targets.get(), dloss, s.N,
                                  s.V, s.Vp);
  gpt::cuda::softmax_crossentropy(d_losses_only.get(), static_cast<A*>(nullptr), d_logits.get(), d_targets.get(),
                                  dloss, s.N, s.V, s.Vp);
  sync("softmax_crossentropy");

  const std::vector<double> z = widen(logits);
  std::vector<double> losses(size_t(s.N)), dlogits(n);
  gpt::cpu::softmax_crossentropy(losses.data(), dlogits.data(), z.data(), targets.data(), double(dloss), s.N, s.V,
                                 s.Vp);
  std::vector<double> loss_bound(size_t(s.N)), d_bound(n, 0.0);  // padding: exactly 0
  for (int i = 0; i < s.N; ++i) {
    const double* zi = &z[size_t(i) * s.Vp];
    const double zmax = *std::max_element(zi, zi + s.V), zmin = *std::min_element(zi, zi + s.V);
    double sum = 0;
    for (int j = 0; j < s.V; ++j) sum += std::exp(zi[j] - zmax);
    const double L = std::log(sum), eS = kSafety * kEps * (std::sqrt(double(s.V)) + (zmax - zmin) + 4);
    const int t = targets[size_t(i)];
    loss_bound[size_t(i)] =
        eS + fp32_bound(std::fabs(L) + std::fabs(zmax) + std::fabs(zi[t]) + std::fabs(losses[size_t(i)]));
    const double ep = 2 * eS + kSafety * kEps * std::fabs(L);
    for (int j = 0; j < s.V; ++j) {
      const size_t k = size_t(i) * s.Vp + j;
      const double p = std::exp(zi[j] - zmax) / sum;
      d_bound[k] =
          stored_bound<A>(std::fabs(double(dloss)) * (ep * p + fp32_bound(p + (j == t ? 1 : 0))), dlogits[k]);
    }
  }
  check_close("losses", d_losses.values(), losses, [&](size_t i) { return loss_bound[i]; });
  check_close("losses (no dlogits)", d_losses_only.values(), losses, [&](size_t i) { return loss_bound[i]; });
  check_close("dlogits", d_dlogits.values(), dlogits, [&](size_t i) { return d_bound[i]; });
  check_guards(d_logits, d_dlogits, d_targets, d_losses, d_losses_only);
}

// The vocabulary-parallel cross-entropy: the padded vocabulary cut into `parts` ranges
// (the last ones all padding when parts is large), each range's statistics on the GPU,
// combined on the host in double as the ranks' reduction combines them
// (stages/06_tensor_parallel/vocab_parallel.cpp), then each range's losses and gradient on
// the GPU. Against the whole-vocabulary reference in double with check_crossentropy's
// bounds: the statistics are the same numbers (a max is exact, each exponential is off by
// the same few ulps wherever it is summed), and the combination in double adds one fp32
// rounding of S and of M, inside eS. The statistics themselves: the max and the target
// logit are exact (copies of stored values), the sum of exponentials within eS of itself.
template <class A>
void check_crossentropy_range(const LossShape& s, int parts, unsigned seed) {
  INFO("vocabulary-parallel cross-entropy N=" << s.N << " V=" << s.V << " Vp=" << s.Vp << " in " << parts
                                              << " ranges");
  std::mt19937 rng(seed);
  const size_t N = size_t(s.N);
  std::vector<float> logits = random_values<float>(N * s.Vp, -8, 8, rng);
  for (int j = 0; j < s.Vp; ++j) logits[size_t(j)] += 100;  // row 0: exp would overflow without the max
  for (float& z : logits) z = stored<A>(z);
  std::uniform_int_distribution<int32_t> pick(0, s.V - 1);
  std::vector<int32_t> targets(N);
  for (int32_t& t : targets) t = pick(rng);
  targets[0] = s.V - 1;
  const float dloss = 1.0f / float(s.N);
  std::vector<double> losses(N), dlogits(N * s.Vp);
  const std::vector<double> z = widen(logits);
  gpt::cpu::softmax_crossentropy(losses.data(), dlogits.data(), z.data(), targets.data(), double(dloss), s.N, s.V,
                                 s.Vp);
  DeviceArray<int32_t> d_targets(N);
  d_targets.upload(targets);

  // Range r: columns [v0, v0 + Vl) with Vl = Vp / parts (the last takes the remainder).
  const int Vl0 = s.Vp / parts;
  std::vector<double> M(N, -INFINITY), S(N, 0.0), Zt(N, 0.0);
  for (int r = 0; r < parts; ++r) {
    const int v0 = r * Vl0, Vl = r == parts - 1 ? s.Vp - v0 : Vl0;
    std::vector<float> part(N * Vl);
    for (size_t i = 0; i < N; ++i)
      std::copy_n(&logits[i * s.Vp + v0], Vl, &part[i * Vl]);
    DeviceArray<A> d_part(N * Vl);
    DeviceArray<float> d_max(N), d_sum(N), d_t(N);
    d_part.set(part);
    d_max.poison(), d_sum.poison(), d_t.poison();
    gpt::cuda::crossentropy_stats(d_max.get(), d_sum.get(), d_t.get(), d_part.get(), d_targets.get(), v0, s.V, s.N,
                                  Vl);
    sync("crossentropy_stats");
    std::vector<double> m(N), su(N), t(N);
    gpt::cpu::crossentropy_stats(m.data(), su.data(), t.data(), widen(part).data(), targets.data(), v0, s.V, s.N, Vl);
    const std::vector<float> gm = d_max.values(), gs = d_sum.values(), gt = d_t.values();
    std::vector<float> m_f(N), t_f(N);  // exact: -inf (all padding) compared as bits
    for (size_t i = 0; i < N; ++i) m_f[i] = float(m[i]), t_f[i] = float(t[i]);
    check_same("row max", gm, m_f);
    check_same("target logit", gt, t_f);
    const double R = 16;  // every row's logits lie within 16 of each other (row 0 is shifted whole)
    check_close("row sum of exponentials", gs, su, [&](size_t i) {
      return su[i] * kSafety * kEps * (std::sqrt(double(Vl)) + R + 4);
    });
    check_guards(d_part, d_max, d_sum, d_t);
    // The reduction over ranks, in double (vocab_parallel.cpp's equations).
    for (size_t i = 0; i < N; ++i) {
      const double mi = gm[i], Mi = std::max(M[i], mi);
      S[i] = (S[i] == 0 ? 0 : S[i] * std::exp(M[i] - Mi)) + (gs[i] == 0 ? 0 : double(gs[i]) * std::exp(mi - Mi));
      M[i] = Mi;
      Zt[i] += gt[i];
    }
  }
  std::vector<float> Mf(N), Sf(N), Zf(N);
  for (size_t i = 0; i < N; ++i) Mf[i] = float(M[i]), Sf[i] = float(S[i]), Zf[i] = float(Zt[i]);
  for (int r = 0; r < parts; ++r) {
    const int v0 = r * Vl0, Vl = r == parts - 1 ? s.Vp - v0 : Vl0;
    INFO("range " << r << ": columns [" << v0 << ", " << v0 + Vl << ")");
    std::vector<float> part(N * Vl);
    std::vector<double> want(N * Vl), bound(N * Vl);
    for (size_t i = 0; i < N; ++i) {
      std::copy_n(&logits[i * s.Vp + v0], Vl, &part[i * Vl]);
      std::copy_n(&dlogits[i * s.Vp + v0], Vl, &want[i * Vl]);
    }
    DeviceArray<A> d_part(N * Vl), d_grad(N * Vl);
    DeviceArray<float> d_max(N), d_sum(N), d_t(N), d_losses(N);
    d_part.set(part);
    d_grad.set(random_values<A>(N * Vl, -1, 1, rng));  // overwritten, padding included
    d_max.set(Mf), d_sum.set(Sf), d_t.set(Zf);
    d_losses.poison();
    gpt::cuda::crossentropy_from_stats(d_losses.get(), d_grad.get(), d_part.get(), d_max.get(), d_sum.get(), d_t.get(),
                                       d_targets.get(), dloss, v0, s.V, s.N, Vl);
    sync("crossentropy_from_stats");
    std::vector<double> loss_bound(N);
    for (size_t i = 0; i < N; ++i) {
      const double* zi = &z[i * s.Vp];
      const double zmax = *std::max_element(zi, zi + s.V), zmin = *std::min_element(zi, zi + s.V);
      double sum = 0;
      for (int j = 0; j < s.V; ++j) sum += std::exp(zi[j] - zmax);
      const double L = std::log(sum), eS = kSafety * kEps * (std::sqrt(double(s.V)) + (zmax - zmin) + 4);
      const int t = targets[i];
      loss_bound[i] = eS + fp32_bound(std::fabs(L) + std::fabs(zmax) + std::fabs(zi[t]) + std::fabs(losses[i]));
      const double ep = 2 * eS + kSafety * kEps * std::fabs(L);
      for (int j = 0; j < Vl; ++j) {
        const int col = v0 + j;
        const size_t k = i * Vl + j;
        if (col >= s.V) continue;  // padding: exactly 0
        const double p = std::exp(zi[col] - zmax) / sum;
        bound[k] = stored_bound<A>(std::fabs(double(dloss)) * (ep * p + fp32_bound(p + (col == t ? 1 : 0))), want[k]);
      }
    }
    check_close("losses", d_losses.values(), losses, [&](size_t i) { return loss_bound[i]; });
    check_close("dlogits", d_grad.values(), want, [&](size_t i) { return bound[i]; });
    check_guards(d_part, d_grad, d_max, d_sum, d_t, d_losses);
  }
}

// ---- optimizer ------------------------------------------------------------------------------

void check_sum_of_squares(size_t n, size_t offset, unsigned seed) {
  INFO("sum_of_squares n=" << n << " offset " << offset);
  std::mt19937 rng(seed);
  const auto g = random_values<float>(n, -1, 1, rng);
  DeviceArray<float> d_g(n, offset);
  d_g.set(g);
  const double got = gpt::cuda::sum_of_squares(d_g.get(), n);
  const double again = gpt::cuda::sum_of_squares(d_g.get(), n);
  const double want = gpt::cpu::sum_of_squares(widen(g).data(), n);
  const double bound = kSafety * 0x1p-52 * std::sqrt(double(n)) * want;
  INFO("got " << num(got) << ", want " << num(want) << ", bound " << num(bound));
  CHECK(std::fabs(got - want) <= bound);
  CHECK(std::fabs(gpt::gpu_test::one_percent_off(want) - want) > bound);  // the negative control
  CHECK(std::memcmp(&got, &again, sizeof got) == 0);  // deterministic
  check_guards(d_g);
}

// AdamW's compute copy: none, float (plain or rounded to bf16 values), or bf16.
enum class CopyKind { None, Float, FloatRounded, Bf16 };
const char* copy_name(CopyKind k) {
  switch (k) {
    case CopyKind::None:
      return "no copy";
    case CopyKind::Float:
      return "float copy";
    case CopyKind::FloatRounded:
      return "float copy rounded to bf16";
    case CopyKind::Bf16:
      return "bf16 copy";
  }
  return "?";
}

// Offsets of params, grads, m, v, copy.
using AdamWOffsets = std::array<size_t, 5>;
const AdamWOffsets kAdamWOffsets[] = {{0, 0, 0, 0, 0}, {1, 1, 1, 1, 1}, {0, 0, 0, 0, 1}};

void check_adamw(size_t n, const AdamWOffsets& off, CopyKind kind, unsigned seed) {
  INFO("adamw n=" << n << ", " << copy_name(kind) << ", offsets " << off[0] << "," << off[1] << "," << off[2]
                  << "," << off[3] << "," << off[4]);
  std::mt19937 rng(seed);
  const auto p0 = random_values<float>(n, -1, 1, rng), g = random_values<float>(n, -1, 1, rng),
             m0 = random_values<float>(n, -1e-2f, 1e-2f, rng), v0 = random_values<float>(n, 1e-6f, 1e-4f, rng);
  // lr, beta1, beta2, eps, weight_decay, grad_scale (a clipping factor), step (bias
  // corrections still far from 1).
  const gpt::ops::AdamWArgs args{1e-2, 0.9, 0.95, 1e-8, 0.1, 0.5, 3};

  DeviceArray<float> d_p(n, off[0]), d_g(n, off[1]), d_m(n, off[2]), d_v(n, off[3]), d_copy_f(n, off[4]);
  DeviceArray<bf16> d_copy_b(n, off[4]);
  d_p.set(p0);
  d_g.set(g);
  d_m.set(m0);
  d_v.set(v0);
  d_copy_f.poison();
  d_copy_b.poison();
  switch (kind) {
    case CopyKind::None:
      gpt::cuda::adamw_update(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, args, static_cast<float*>(nullptr),
                              false);
      break;
    case CopyKind::Float:
    case CopyKind::FloatRounded:
      gpt::cuda::adamw_update(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, args, d_copy_f.get(),
                              kind == CopyKind::FloatRounded);
      break;
    case CopyKind::Bf16:
      gpt::cuda::adamw_update(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, args, d_copy_b.get(), true);
      break;
  }
  sync("adamw_update");
  const std::vector<float> p1 = d_p.values();

  std::vector<double> p = widen(p0), m = widen(m0), v = widen(v0);
  gpt::cpu::adamw_update(p.data(), widen(g).data(), m.data(), v.data(), n, args, static_cast<double*>(nullptr),
                         false);
  const double b1 = args.beta1, b2 = args.beta2;
  const double eb1 = kEps * b1 / (1 - b1), eb2 = kEps * b2 / (1 - b2);
  const double bc1 = 1 - std::pow(b1, args.step), bc2 = 1 - std::pow(b2, args.step);
  std::vector<double> p_bound(n), m_bound(n), v_bound(n);
  for (size_t i = 0; i < n; ++i) {
    const double gs = double(g[i]) * args.grad_scale;
    const double mw = (1 - b1) * gs, vw = (1 - b2) * gs * gs;
    const double dm = fp32_bound(std::fabs(b1 * m0[i]) + std::fabs(mw)) + eb1 * std::fabs(mw);
    const double dv = fp32_bound(b2 * v0[i] + vw) + eb2 * vw;
    const double vh = v[i] / bc2, den = std::sqrt(vh) + args.eps, r = m[i] / bc1 / den;
    const double dr = dm / bc1 / den + std::fabs(r) * (dv / (2 * v[i]) * std::sqrt(vh) / den + kSafety * kEps);
    m_bound[i] = dm;
    v_bound[i] = dv;
    p_bound[i] =
        args.lr * dr + fp32_bound(std::fabs(double(p0[i])) +
                                  args.lr * (std::fabs(r) + args.weight_decay * std::fabs(double(p0[i]))));
  }
  check_close("params", p1, p, [&](size_t i) { return p_bound[i]; });
  check_close("m", d_m.values(), m, [&](size_t i) { return m_bound[i]; });
  check_close("v", d_v.values(), v, [&](size_t i) { return v_bound[i]; });

  // The copy is the GPU's own updated weight, rounded where asked: exact.
  std::vector<float> expected(n);
  for (size_t i = 0; i < n; ++i) expected[i] = kind == CopyKind::Float ? p1[i] : gpt::cpu::bf16_round(p1[i]);
  if (kind == CopyKind::Float || kind == CopyKind::FloatRounded) check_same("copy", d_copy_f.values(), expected);
  if (kind == CopyKind::Bf16) check_same("copy", d_copy_b.values(), expected);
  check_guards(d_p, d_g, d_m, d_v, d_copy_f, d_copy_b);
}

// ---- bf16 rounding and conversions ------------------------------------------------------------

// Values that exercise every branch of rounding to bf16 first, then random signs and
// magnitudes over the whole fp32 range (subnormals included).
std::vector<float> awkward_values(size_t n, std::mt19937& rng) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {
      0.0f, -0.0f, 1.0f,
      0x1.01p0f,    // 1 + 2^-8: halfway between 1 and the next bf16, ties to even: 1
      0x1.03p0f,    // 1 + 3 2^-8: halfway, ties to even: up to 1 + 2^-6
      0x1.0101p0f,  // just above halfway: up
      0x1.00ffp0f,  // just below halfway: down
      std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),  // round to +-infinity
      inf, -inf, std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
      -0x1.fffffcp-127f,  // the largest subnormal
      0x1.2345p-130f,     // a subnormal that is no bf16 value
      65504.0f, -3.14159265f};
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-140, 127), sign(0, 1);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] =
        i < specials.size() ? specials[i] : (sign(rng) ? -1.0f : 1.0f) * std::ldexp(mantissa(rng), exponent(rng));
  return x;
}

void check_round_and_convert(size_t n, const Offsets& off, unsigned seed) {
  INFO(describe(n, off));
  std::mt19937 rng(seed);
  const std::vector<float> x = awkward_values(n, rng);
  std::vector<float> rounded(n);
  for (size_t i = 0; i < n; ++i) rounded[i] = gpt::cpu::bf16_round(x[i]);

  DeviceArray<float> d_x(n, off[0]);
  d_x.upload(x);
  gpt::cuda::round_to_bf16(d_x.get(), n);
  sync("round_to_bf16");
  check_same("round_to_bf16", d_x.download(), rounded);

  // float -> bf16 (dst, src at offsets 0, 1), then back (dst, src at offsets 2, 0).
  DeviceArray<float> d_src(n, off[1]), d_back(n, off[2]);
  DeviceArray<bf16> d_half(n, off[0]);
  d_src.upload(x);
  d_half.poison();
  d_back.poison();
  gpt::cuda::convert(d_half.get(), d_src.get(), n);
  gpt::cuda::convert(d_back.get(), d_half.get(), n);
  sync("convert");
  check_same("convert to bf16", d_half.values(), rounded);  // bf16 -> float on the host is exact
  check_same("convert to float", d_back.download(), rounded);

  // bf16 -> float from every kind of bit pattern (NaNs, infinities, subnormals).
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  std::vector<bf16> patterns(n);
  std::vector<float> widened(n);
  for (size_t i = 0; i < n; ++i) {
    patterns[i] = bf16{uint16_t(bits(rng))};
    widened[i] = to_float(patterns[i]);
  }
  d_half.upload(patterns);
  gpt::cuda::convert(d_back.get(), d_half.get(), n);
  sync("convert bit patterns");
  check_same("convert bit patterns to float", d_back.download(), widened);
  check_guards(d_x, d_src, d_back, d_half);
}

template <class A>
const char* type_name() {
  return is_bf16<A> ? "bf16" : "fp32";
}

}  // namespace

// ---- test cases -------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("gpu embedding forward and backward", "[gpu][embedding]", float, bf16) {
  INFO(type_name<TestType>());
  unsigned seed = 100;
  for (const auto& [B, T] : {std::pair{1, 1}, std::pair{1, 3}, std::pair{3, 11}})
    for (int C : {7, 65, 768}) check_embedding<TestType>(B, T, C, false, ++seed);
  // Most positions share one token: one sorted run of ~900 positions, longer than a warp
  // walks in one step and summed in position order.
  check_embedding<TestType>(4, 256, 768, true, ++seed);
  check_embedding<TestType>(4, 256, 65, true, ++seed);
}

TEMPLATE_TEST_CASE("gpu embedding of a vocabulary range", "[gpu][embedding]", float, bf16) {
  INFO(type_name<TestType>());
  unsigned seed = 150;
  // The first half with positions, the second without, a range of one row, an empty range
  // (a rank holding only padding), and positions from an offset (a context-parallel part).
  for (int C : {7, 65, 768}) {
    check_embedding_range<TestType>(3, 11, C, 0, kVocab / 2, true, 0, ++seed);
    check_embedding_range<TestType>(3, 11, C, kVocab / 2, kVocab, false, 0, ++seed);
    check_embedding_range<TestType>(2, 5, C, 40, 41, true, 0, ++seed);
    check_embedding_range<TestType>(2, 5, C, kVocab, kVocab, true, 0, ++seed);
    check_embedding_range<TestType>(2, 5, C, 0, kVocab, true, 6, ++seed);
  }
}

TEMPLATE_TEST_CASE("gpu layernorm forward and backward", "[gpu][layernorm]", float, bf16) {
  INFO(type_name<TestType>());
  unsigned seed = 200;
  for (int N : {1, 3, 33})
    for (int C : {7, 65, 768}) check_layernorm<TestType>(N, C, ++seed);
  // GPT-2 XL's width (more channels than one pass of a block), and enough rows for dw and
  // db to be reduced across many blocks (determinism of that reduction).
  check_layernorm<TestType>(3, 1600, ++seed);
  check_layernorm<TestType>(2048, 768, ++seed);
}

TEMPLATE_TEST_CASE("gpu gelu, residual and scale", "[gpu][elementwise]", float, bf16) {
  INFO(type_name<TestType>());
  unsigned seed = 300;
  for (size_t n : kFlatSizes)
    for (const Offsets& off : kOffsets) {
      INFO(describe(n, off));
      check_gelu<TestType>(n, off, ++seed);
      check_residual<TestType>(n, off, ++seed);
      check_scale<TestType>(n, off, ++seed);
    }
}

TEMPLATE_TEST_CASE("gpu softmax cross-entropy", "[gpu][crossentropy]", float, bf16) {
  INFO(type_name<TestType>());
  unsigned seed = 400;
  for (const LossShape& s : kLossShapes) check_crossentropy<TestType>(s, ++seed);
}

TEMPLATE_TEST_CASE("gpu vocabulary-parallel cross-entropy", "[gpu][crossentropy]", float, bf16) {
  INFO(type_name<TestType>());
  unsigned seed = 450;
  // One range (the whole vocabulary), two, and GPT-2's padded vocabulary in 4 and 7 ranges
  // (uneven ranges; padding shared by the last). {3, 65, 72} in 12 ranges of 6: the last
  // range, [66, 72), is all padding.
  for (const LossShape& s : kLossShapes)
    for (int parts : {1, 2, 4}) check_crossentropy_range<TestType>(s, parts, ++seed);
  check_crossentropy_range<TestType>({4, 50257, 50304}, 7, ++seed);
  check_crossentropy_range<TestType>({3, 65, 72}, 12, ++seed);

  // A target outside [0, V) (a padding column, a negative id) is flagged with a NaN
  // target logit, in whichever range; a valid one in another range gives 0.
  const int N = 3, V = 10, Vl = 8;
  DeviceArray<TestType> d_logits{size_t(N) * Vl};
  DeviceArray<int32_t> d_targets{size_t(N)};
  DeviceArray<float> d_max{size_t(N)}, d_sum{size_t(N)}, d_t{size_t(N)};
  std::mt19937 rng(++seed);
  d_logits.set(random_values<TestType>(size_t(N) * Vl, -1, 1, rng));
  d_targets.upload({12, -1, 3});  // padding (V <= 12 < Vp), negative, another range's (v0 = 8)
  gpt::cuda::crossentropy_stats(d_max.get(), d_sum.get(), d_t.get(), d_logits.get(), d_targets.get(), 8, V, N, Vl);
  sync("crossentropy_stats, bad targets");
  const std::vector<float> t = d_t.values();
  CHECK(std::isnan(t[0]));
  CHECK(std::isnan(t[1]));
  CHECK(t[2] == 0.0f);
}

TEST_CASE("gpu sum of squares", "[gpu][optimizer]") {
  unsigned seed = 500;
  for (size_t n : kFlatSizes)
    for (size_t offset : {size_t(0), size_t(1)}) check_sum_of_squares(n, offset, ++seed);
  check_sum_of_squares(size_t(1) << 22, 0, ++seed);  // more elements than the grid has threads
}

TEST_CASE("gpu adamw update", "[gpu][optimizer]") {
  unsigned seed = 600;
  for (size_t n : {size_t(1), size_t(7), size_t(65), size_t(12289)})
    for (const AdamWOffsets& off : kAdamWOffsets)
      for (CopyKind kind : {CopyKind::None, CopyKind::Float, CopyKind::FloatRounded, CopyKind::Bf16})
        check_adamw(n, off, kind, ++seed);
}

TEST_CASE("gpu round_to_bf16 and fp32 <-> bf16 conversion", "[gpu][bf16]") {
  unsigned seed = 700;
  for (size_t n : kFlatSizes)
    for (const Offsets& off : kOffsets) check_round_and_convert(n, off, ++seed);
}

// An empty tensor is a valid tensor for the ops that take a flat count (a shard can be
// empty) and for the embedding: the call returns and touches nothing.
TEST_CASE("gpu ops on empty tensors do nothing", "[gpu][edge]") {
  DeviceArray<float> f(8), g(8), h(8), k(8);
  DeviceArray<bf16> b(8);
  DeviceArray<int32_t> tokens(8);
  const std::vector<float> start = {1, 2, 3, 4, 5, 6, 7, 8};
  for (auto* a : {&f, &g, &h, &k}) a->set(start);
  b.set(start);
  tokens.upload(std::vector<int32_t>(8, 0));
  const gpt::ops::AdamWArgs args{1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, 1};
  CHECK_NOTHROW(gpt::cuda::gelu_forward(f.get(), g.get(), 0));
  CHECK_NOTHROW(gpt::cuda::gelu_backward(f.get(), g.get(), h.get(), 0));
  CHECK_NOTHROW(gpt::cuda::residual_forward(f.get(), g.get(), h.get(), 0));
  CHECK_NOTHROW(gpt::cuda::residual_backward(f.get(), g.get(), h.get(), 0));
  CHECK_NOTHROW(gpt::cuda::scale(f.get(), 0, 2.0f));
  CHECK_NOTHROW(gpt::cuda::round_to_bf16(f.get(), 0));
  CHECK_NOTHROW(gpt::cuda::convert(b.get(), f.get(), 0));
  CHECK_NOTHROW(gpt::cuda::convert(f.get(), b.get(), 0));
  CHECK_NOTHROW(gpt::cuda::adamw_update(f.get(), g.get(), h.get(), k.get(), 0, args, b.get(), true));
  CHECK(gpt::cuda::sum_of_squares(f.get(), 0) == 0.0);
  CHECK_NOTHROW(gpt::cuda::embedding_forward(f.get(), tokens.get(), g.get(), h.get(), 0, 4, 2));
  CHECK_NOTHROW(gpt::cuda::embedding_backward(f.get(), g.get(), h.get(), tokens.get(), 0, 4, 2));
  sync("empty calls");
  for (auto* a : {&f, &g, &h, &k}) check_same("untouched", a->values(), start);
  check_same("untouched", b.values(), start);
  check_guards(f, g, h, k, b, tokens);
}

// Last: an op that dereferences a null pointer instead of rejecting it leaves the device
// in an error state that fails every later test.
TEMPLATE_TEST_CASE("gpu ops reject null pointers and impossible shapes", "[gpu][edge]", float, bf16) {
  using A = TestType;
  INFO(type_name<A>());
  // Valid buffers everywhere but the argument under test; token and target 0 is valid.
  DeviceArray<A> a(1024), b(1024), c(1024), d(1024), e(1024);
  DeviceArray<float> f(1024), g(1024), h(1024), k(1024);
  DeviceArray<bf16> bf16_side(1024);  // convert's bf16 side, whatever A is
  DeviceArray<int32_t> idx(1024);
  idx.upload(std::vector<int32_t>(1024, 0));
  const gpt::ops::AdamWArgs args{1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, 1};
  auto null_if = [](auto* p, bool make_null) { return make_null ? nullptr : p; };
  using std::invalid_argument;
  const int B = 2, T = 4, C = 8, N = 8, V = 7, Vp = 8;

  for (int which = 0; which < 4; ++which) {
    INFO("null argument " << which);
    CHECK_THROWS_AS(
        gpt::cuda::embedding_forward(null_if(a.get(), which == 0), null_if(idx.get(), which == 1),
                                     null_if(b.get(), which == 2), null_if(c.get(), which == 3), B, T, C),
        invalid_argument);
    CHECK_THROWS_AS(
        gpt::cuda::embedding_backward(null_if(f.get(), which == 0), null_if(g.get(), which == 1),
                                      null_if(a.get(), which == 2), null_if(idx.get(), which == 3), B, T, C),
        invalid_argument);
  }
  for (int which = 0; which < 6; ++which) {
    INFO("null argument " << which);
    CHECK_THROWS_AS(gpt::cuda::layernorm_forward(null_if(a.get(), which == 0), null_if(f.get(), which == 1),
                                                 null_if(g.get(), which == 2), null_if(b.get(), which == 3),
                                                 null_if(c.get(), which == 4), null_if(d.get(), which == 5), N, C),
                    invalid_argument);
  }
  // A null dinp alone is a request (the weight gradients only: the zero-bubble schedule's
  // split), and so are null dw and db together; all three null, or dw without db, is not.
  CHECK_NOTHROW(gpt::cuda::layernorm_backward(static_cast<A*>(nullptr), f.get(), g.get(), b.get(), c.get(),
                                              d.get(), h.get(), k.get(), N, C));
  CHECK_NOTHROW(gpt::cuda::layernorm_backward(a.get(), static_cast<float*>(nullptr), static_cast<float*>(nullptr),
                                              b.get(), c.get(), d.get(), h.get(), k.get(), N, C));
  CHECK_THROWS_AS(gpt::cuda::layernorm_backward(static_cast<A*>(nullptr), static_cast<float*>(nullptr),
                                                static_cast<float*>(nullptr), b.get(), c.get(), d.get(), h.get(),
                                                k.get(), N, C),
                  invalid_argument);
  for (int which = 1; which < 8; ++which) {
    INFO("null argument " << which);
    CHECK_THROWS_AS(gpt::cuda::layernorm_backward(
                        null_if(a.get(), which == 0), null_if(f.get(), which == 1), null_if(g.get(), which == 2),
                        null_if(b.get(), which == 3), null_if(c.get(), which == 4), null_if(d.get(), which == 5),
                        null_if(h.get(), which == 6), null_if(k.get(), which == 7), N, C),
                    invalid_argument);
  }
  for (int which = 0; which < 3; ++which) {
    INFO("null argument " << which);
    CHECK_THROWS_AS(gpt::cuda::gelu_backward(null_if(a.get(), which == 0), null_if(b.get(), which == 1),
                                             null_if(c.get(), which == 2), 100),
                    invalid_argument);
    CHECK_THROWS_AS(gpt::cuda::residual_forward(null_if(a.get(), which == 0), null_if(b.get(), which == 1),
                                                null_if(c.get(), which == 2), 100),
                    invalid_argument);
    CHECK_THROWS_AS(gpt::cuda::residual_backward(null_if(a.get(), which == 0), null_if(b.get(), which == 1),
                                                 null_if(c.get(), which == 2), 100),
                    invalid_argument);
    // dlogits (argument 1) may be null: losses, logits and targets may not.
    const int arg = which == 0 ? 0 : which + 1;
    CHECK_THROWS_AS(
        gpt::cuda::softmax_crossentropy(null_if(f.get(), arg == 0), e.get(), null_if(a.get(), arg == 2),
                                        null_if(idx.get(), arg == 3), 1.0f, N, V, Vp),
        invalid_argument);
  }
  for (int which = 0; which < 2; ++which) {
    INFO("null argument " << which);
    CHECK_THROWS_AS(gpt::cuda::gelu_forward(null_if(a.get(), which == 0), null_if(b.get(), which == 1), 100),
                    invalid_argument);
    CHECK_THROWS_AS(gpt::cuda::convert(null_if(bf16_side.get(), which == 0), null_if(f.get(), which == 1), 100),
                    invalid_argument);
    CHECK_THROWS_AS(gpt::cuda::convert(null_if(f.get(), which == 0), null_if(bf16_side.get(), which == 1), 100),
                    invalid_argument);
  }
  for (int which = 0; which < 4; ++which) {
    INFO("null argument " << which);
    CHECK_THROWS_AS(gpt::cuda::adamw_update(null_if(f.get(), which == 0), null_if(g.get(), which == 1),
                                            null_if(h.get(), which == 2), null_if(k.get(), which == 3), 100, args,
                                            a.get(), true),
                    invalid_argument);
  }
  CHECK_THROWS_AS(gpt::cuda::scale(static_cast<A*>(nullptr), 100, 2.0f), invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::sum_of_squares(nullptr, 100), invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::round_to_bf16(nullptr, 100), invalid_argument);

  // Shapes: no rows to normalise or to take a loss over, negative counts, a real
  // vocabulary wider than its padded storage or empty, AdamW steps counted from 1.
  for (int rows : {0, -1}) {
    INFO("rows " << rows);
    CHECK_THROWS_AS(gpt::cuda::layernorm_forward(a.get(), f.get(), g.get(), b.get(), c.get(), d.get(), rows, C),
                    invalid_argument);
    CHECK_THROWS_AS(gpt::cuda::layernorm_backward(a.get(), f.get(), g.get(), b.get(), c.get(), d.get(), h.get(),
                                                  k.get(), rows, C),
                    invalid_argument);
    CHECK_THROWS_AS(gpt::cuda::softmax_crossentropy(f.get(), e.get(), a.get(), idx.get(), 1.0f, rows, V, Vp),
                    invalid_argument);
  }
  CHECK_THROWS_AS(gpt::cuda::softmax_crossentropy(f.get(), e.get(), a.get(), idx.get(), 1.0f, N, Vp + 1, Vp),
                  invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::softmax_crossentropy(f.get(), e.get(), a.get(), idx.get(), 1.0f, N, 0, Vp),
                  invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::embedding_forward(a.get(), idx.get(), b.get(), c.get(), -1, T, C), invalid_argument);
  gpt::ops::AdamWArgs step0 = args;
  step0.step = 0;
  CHECK_THROWS_AS(gpt::cuda::adamw_update(f.get(), g.get(), h.get(), k.get(), 100, step0, a.get(), true),
                  invalid_argument);
  sync("rejected calls");  // nothing was launched, so nothing failed
  check_guards(a, b, c, d, e, f, g, h, k, bf16_side, idx);
}
