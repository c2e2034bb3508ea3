// GPU GEMM ladder (kernels/cuda/gemm/) and the linear-layer ops built on it
// (kernels/cuda/matmul.cu) against products computed on the host in double.
//
// What is covered.
//  * gemm(): every version this device supports (cuBLASLt, v1..v5), every element-type
//    combination (fp32 -> fp32, bf16 -> bf16, bf16 -> fp32), all four trans_a/trans_b
//    layouts, ragged M, N, K (every combination of 1, 7, 65, 129, 200: tails of every
//    tile size), an aligned 256 x 384 x 192, and a GPT-2-sized forward 512 x 2304 x 768
//    with bias and GELU. Each shape runs four epilogues: C = AB;  C += AB + bias;
//    C = AB + bias with gelu_out;  C = AB with gelu_out (the GPT-2-sized one also
//    C = AB + bias and C += AB: v5 compiles a kernel per epilogue).
//  * v5's split K (kernels/cuda/gemm/work_order.h): shapes with few output tiles and a long K,
//    every layout and epilogue, bf16 and fp32 outputs; besides the truth 1 % off, the
//    bounds must reject C without the last K range (a lost partial tile).
//  * Leading dimensions are padded up to multiples of 8 elements (what v4/v5 need) for
//    every version, and the padding of A and B holds NaN: a kernel that reads past the
//    end of a stored row poisons its output. The padding of C and gelu_out holds a
//    sentinel that must survive (no writes past column N). A compact layout (ld = row
//    length, 65) is tested on its own: v4/v5 must refuse it (gemm_version_supports is
//    false and gemm() throws std::invalid_argument), the other versions must compute it.
//  * matmul_forward / matmul_backward / bias_backward (cuda_ops.h), fp32 and bf16, with
//    set_gemm("hand") and set_gemm("cublas"), against gpt::cpu's reference run in
//    double; the GEMM choice (set_gemm, gemm_in_use and the descent v5 -> v4 -> v3);
//    bias_backward giving the same bits twice.
// Inputs are uniform in [-1, 1] from fixed seeds. For bf16 they are rounded to bf16 on
// the host first, so the reference multiplies exactly the numbers the GPU sees and only
// the GPU's arithmetic and output rounding differ from it.
//
// Without a GPU (cudaGetDeviceCount fails or reports 0) the program exits 77, which
// CTest reports as skipped. The problems and the tolerances, derived, are in
// gemm_reference.h.
#include "tests/gpu/gpu_test.h"  // Catch2, cuda_ok, bf16 conversions
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/bf16.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/work_order.h"
#include "tests/gpu/gemm_reference.h"
#include "tests/gpu/negative_control.h"

namespace {

using namespace gpt::gemm_test;  // the problems and tolerances

using nv_bf16 = __nv_bfloat16;
using gpt::cuda::GemmArgs;
using gpt::cuda::GemmVersion;

using gpt::gpu_test::cuda_ok;

// ---- host <-> device ------------------------------------------------------------------

using gpt::gpu_test::to_elem;
using gpt::gpu_test::to_float;

template <class E>
constexpr bool kIsBf16 = std::is_same_v<E, nv_bf16> || std::is_same_v<E, gpt::bf16>;

using gpt::gpu_test::DeviceBuffer;

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<double> absolute(const std::vector<float>& v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(double(v[i]));
  return a;
}

int device_capability() {  // 10 * major + minor
  int device = 0, major = 0, minor = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "capability");
  cuda_ok(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "capability");
  return 10 * major + minor;
}


// Whether check_matrix also checks its negative control. The ladder's problems leave it
// to test_gemm_tolerance.cpp, which checks on the CPU that their bounds reject C without its
// last k step (and 1 % too large from 7 x 7 on), problem by problem; a single output may
// be a near-cancellation that no constant factor moves beyond its bound.
enum class Control { Ladder, OnePercent };

// Compares the M x N region of a GPU result stored with row stride ld against want(m, n)
// within tol(m, n); the columns [N, ld) must still hold kSentinel. A NaN fails. With
// Control::OnePercent the same bounds must reject the truth 1 % off (negative_control.h)
// in some element.
template <class Want, class Tol>
void check_matrix(const char* what, const std::vector<float>& got, int M, int N, int ld, Want want, Tol tol,
                  Control control = Control::Ladder) {
  double worst = -1, worst_got = 0, worst_want = 0, worst_tol = 0;
  int worst_m = 0, worst_n = 0;
  size_t padding_written = 0;
  gpt::gpu_test::ControlCount one_percent;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < ld; ++n) {
      const float g = got[size_t(m) * ld + n];
      if (n >= N) {
        padding_written += g != kSentinel;
        continue;
      }
      const double w = want(m, n), t = tol(m, n), err = std::fabs(double(g) - w);
      one_percent.add(w, t);
      double ratio = 0.0;
      if (std::isnan(err)) ratio = INFINITY;
      else if (t > 0) ratio = err / t;
      else if (err > 0) ratio = INFINITY;  // tolerance 0: only the exact value passes
      if (ratio > worst) {
        worst = ratio;
        worst_m = m;
        worst_n = n;
        worst_got = g;
        worst_want = w;
        worst_tol = t;
      }
    }
  INFO(what << ": worst element (" << worst_m << ", " << worst_n << "): got " << worst_got << ", want "
            << worst_want << ", tolerance " << worst_tol << " (error / tolerance = " << worst << ")");
  CHECK(worst <= 1.0);
  INFO(what << ": padding elements written: " << padding_written);
  CHECK(padding_written == 0);
  if (control == Control::OnePercent) {
    INFO(what << ": the negative control (the truth 1 % off) must be rejected where it tells: "
              << one_percent.describe());
    CHECK(one_percent.rejected());
  }
}

// ---- the GEMM ladder ---------------------------------------------------------------------

constexpr GemmVersion kVersions[] = {GemmVersion::Cublas, GemmVersion::V1, GemmVersion::V2,
                                     GemmVersion::V3,     GemmVersion::V4, GemmVersion::V5};

// Whether this device should run version v (gemm.h: v4 needs sm_80+, v5 sm_90, both bf16).
bool device_has(GemmVersion v, bool bf16_inputs) {
  if (v == GemmVersion::V4) return bf16_inputs && device_capability() >= 80;
  if (v == GemmVersion::V5) return bf16_inputs && device_capability() / 10 == 9;
  return true;
}

// The epilogues each shape runs (gemm.h: GELU requires !accumulate).
struct Epilogue {
  bool accumulate, bias, gelu;
  const char* name;
};
constexpr Epilogue kEpilogues[] = {{false, false, false, "C = AB"},
                                   {true, true, false, "C += AB + bias"},
                                   {false, true, true, "C = AB + bias, gelu_out"},
                                   {false, false, true, "C = AB, gelu_out"}};
constexpr Epilogue kBiasGelu = kEpilogues[2];
// The two epilogues training uses that the ladder's four leave out (v5 compiles one kernel
// per epilogue kind): the forward's bias without GELU, the backward's C += AB.
constexpr Epilogue kBiasOnly = {false, true, false, "C = AB + bias"};
constexpr Epilogue kAccumulateOnly = {true, false, false, "C += AB"};

std::string describe(const GemmProblem& p) {
  return std::string("trans_a=") + (p.trans_a ? "T" : "F") + " trans_b=" + (p.trans_b ? "T" : "F") +
         " M=" + std::to_string(p.M) + " N=" + std::to_string(p.N) + " K=" + std::to_string(p.K) +
         " lda=" + std::to_string(p.lda) + " ldb=" + std::to_string(p.ldb) + " ldc=" + std::to_string(p.ldc);
}

template <class Tin, class Tout>
GemmArgs<Tin, Tout> gemm_args(const GemmProblem& p, const Epilogue& e, const Tin* A, const Tin* B,
                              const Tin* bias, Tout* C, Tout* gelu_out) {
  GemmArgs<Tin, Tout> a;
  a.trans_a = p.trans_a;
  a.trans_b = p.trans_b;
  a.M = p.M;
  a.N = p.N;
  a.K = p.K;
  a.A = A;
  a.lda = p.lda;
  a.B = B;
  a.ldb = p.ldb;
  a.C = C;
  a.ldc = p.ldc;
  a.accumulate = e.accumulate;
  a.bias = e.bias ? bias : nullptr;
  a.gelu_out = e.gelu ? gelu_out : nullptr;
  return a;
}

// What check_problem runs and checks beyond every version's C against its bound.
template <class Tout>
struct ProblemChecks {
  std::vector<GemmVersion> versions{std::begin(kVersions), std::end(kVersions)};
  Control control = Control::Ladder;  // check_matrix's negative control
  // Called after each call with the epilogue and the bound tol(m, n): more checks (may be empty).
  std::function<void(const Epilogue&, const std::function<double(int, int)>&)> extra;
};

// Runs the versions that can take the calls on each epilogue and checks C (and gelu_out)
// element by element; `ran` collects the versions that ran.
template <class Tin, class Tout>
void check_problem(const GemmProblem& p, const std::vector<Epilogue>& epilogues, std::set<GemmVersion>& ran,
                   const ProblemChecks<Tout>& checks = {}) {
  constexpr bool out_bf16 = kIsBf16<Tout>;
  DeviceBuffer<Tin> A(p.A.size()), B(p.B.size()), bias(p.bias.size());
  DeviceBuffer<Tout> C(p.C_old.size()), G(p.C_old.size());
  A.upload(p.A);
  B.upload(p.B);
  bias.upload(p.bias);
  const std::vector<float> sentinels(p.C_old.size(), kSentinel);
  for (GemmVersion v : checks.versions)
    for (const Epilogue& e : epilogues) {
      const GemmArgs<Tin, Tout> args = gemm_args(p, e, A.p, B.p, bias.p, C.p, G.p);
      if (!gpt::cuda::gemm_version_supports(v, args)) continue;
      ran.insert(v);
      INFO(gpt::cuda::gemm_version_name(v) << " " << describe(p) << ": " << e.name);
      C.upload(p.C_old);  // also what a non-accumulating call must ignore
      if (e.gelu) G.upload(sentinels);
      gpt::cuda::gemm(v, args);
      cuda_ok(cudaDeviceSynchronize(), gpt::cuda::gemm_version_name(v));

      auto want = [&](int m, int n) { return element_ref(p, m, n, e.accumulate, e.bias).want(); };
      const std::function<double(int, int)> tol = [&](int m, int n) {
        return element_ref(p, m, n, e.accumulate, e.bias).tolerance(p.K, out_bf16, v == GemmVersion::Cublas);
      };
      check_matrix("C", C.download(), p.M, p.N, p.ldc, want, tol, checks.control);
      if (e.gelu) {
        const bool approximate_tanh = v == GemmVersion::Cublas && out_bf16;
        check_matrix(
            "gelu_out", G.download(), p.M, p.N, p.ldc, [&](int m, int n) { return gelu(want(m, n)); },
            [&](int m, int n) { return gelu_tolerance(want(m, n), tol(m, n), out_bf16, approximate_tanh); },
            checks.control);
      }
      if (checks.extra) checks.extra(e, tol);
    }
}

std::string names(const std::set<GemmVersion>& versions) {
  std::string s;
  for (GemmVersion v : versions) s += std::string(s.empty() ? "" : " ") + gpt::cuda::gemm_version_name(v);
  return s;
}

// Every version the device has must have run: cuBLASLt and v1..v3 always; v4/v5 where
// the device and the input type allow (padded strides and cudaMalloc'd buffers satisfy
// their alignment rules).
void check_versions_ran(const std::set<GemmVersion>& ran, bool bf16_inputs, const char* combo) {
  std::printf("gemm ladder %s: ran %s\n", combo, names(ran).c_str());
  for (GemmVersion v : kVersions) {
    INFO(combo << ": version " << gpt::cuda::gemm_version_name(v));
    CHECK(ran.count(v) == size_t(device_has(v, bf16_inputs)));
  }
}

template <class Tin, class Tout>
void test_ladder(const char* combo) {
  constexpr bool in_bf16 = kIsBf16<Tin>, out_bf16 = kIsBf16<Tout>;
  const std::vector<Epilogue> all(std::begin(kEpilogues), std::end(kEpilogues));
  std::set<GemmVersion> ran;
  for_each_ladder_shape([&](bool trans_a, bool trans_b, int M, int N, int K, unsigned seed) {
    check_problem<Tin, Tout>(make_gemm_problem(trans_a, trans_b, M, N, K, in_bf16, out_bf16, true, seed), all, ran);
  });
  // GPT-2 small's MLP up-projection on 512 tokens: out = inp . W^T + bias, then GELU; and
  // the same shape with the other two epilogues of training.
  check_problem<Tin, Tout>(make_gemm_problem(false, true, 512, 2304, 768, in_bf16, out_bf16, true, 505),
                           {kBiasGelu, kBiasOnly, kAccumulateOnly}, ran);
  check_versions_ran(ran, in_bf16, combo);
}

// ---- GEMM v5's split K ---------------------------------------------------------------------

// Products with too few output tiles for the SMs and a long K, which v5 cuts into ranges
// (kernels/cuda/gemm/work_order.h): every layout, ragged M and N, K not a multiple of the
// k-block (a partial last k-block) and ranges that do not divide it (a shorter last
// range), and the shape of GPT-2 124M's attproj.dW on 4096 tokens. The test first makes
// sure this device's plan does split each of them.
struct SplitShape {
  bool trans_a, trans_b;
  int M, N, K;
};
constexpr SplitShape kSplitShapes[] = {{true, false, 200, 129, 4000},
                                       {false, true, 65, 300, 2500},
                                       {false, false, 7, 520, 1100},
                                       {true, true, 300, 7, 3333},
                                       {true, false, 768, 768, 4096}};

int device_sms() {
  int device = 0, sms = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  cuda_ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  return sms;
}

// sum over k in [k0, K) of op(A)[m, k] op(B)[k, n], for every (m, n): the last range's share.
std::vector<double> range_sum(const GemmProblem& p, int k0) {
  std::vector<double> out(size_t(p.M) * p.N, 0.0);
  for (int m = 0; m < p.M; ++m)
    for (int n = 0; n < p.N; ++n) {
      double sum = 0;
      for (int k = k0; k < p.K; ++k) {
        const double a = p.trans_a ? p.A[size_t(k) * p.lda + m] : p.A[size_t(m) * p.lda + k];
        const double b = p.trans_b ? p.B[size_t(n) * p.ldb + k] : p.B[size_t(k) * p.ldb + n];
        sum += a * b;
      }
      out[size_t(m) * p.N + n] = sum;
    }
  return out;
}

// v5 on one split shape, every epilogue, against double as the ladder is checked, with two
// negative controls the bounds must reject: the truth 1 % off, and C without the last
// range (a reduction that lost a partial tile).
template <class Tout>
void check_split_shape(const SplitShape& shape, unsigned seed) {
  const gpt::cuda::V5WorkOrder plan = gpt::cuda::v5_work_order(shape.M, shape.N, shape.K, device_sms(), true);
  INFO("M=" << shape.M << " N=" << shape.N << " K=" << shape.K << ": " << plan.splits << " ranges of "
            << plan.k_blocks_per_split << " k-blocks");
  REQUIRE(plan.splits > 1);
  const GemmProblem p =
      make_gemm_problem(shape.trans_a, shape.trans_b, shape.M, shape.N, shape.K, true, kIsBf16<Tout>, true, seed);
  const std::vector<double> last_range =
      range_sum(p, (plan.splits - 1) * plan.k_blocks_per_split * gpt::cuda::kSplitKBlock);
  ProblemChecks<Tout> checks;
  checks.versions = {GemmVersion::V5};
  checks.control = Control::OnePercent;
  checks.extra = [&](const Epilogue&, const std::function<double(int, int)>& tol) {
    size_t rejected = 0;
    for (int m = 0; m < p.M; ++m)
      for (int n = 0; n < p.N; ++n) rejected += std::fabs(last_range[size_t(m) * p.N + n]) > tol(m, n);
    INFO("C without the last range must be rejected by some element");
    CHECK(rejected > 0);
  };
  std::set<GemmVersion> ran;
  check_problem<nv_bf16, Tout>(p, {std::begin(kEpilogues), std::end(kEpilogues)}, ran, checks);
  CHECK(ran.count(GemmVersion::V5) == 1);  // every call was v5's to take
}

// ---- the linear-layer ops ---------------------------------------------------------------

// matmul_forward (with bias and GELU, and without either) and matmul_backward through the
// GEMM chosen by gemm_name, against gpt::cpu's matmul in double.
template <class A>
void test_matmul_ops(const char* gemm_name, int N, int C, int OC, unsigned seed) {
  constexpr bool bf16 = kIsBf16<A>;
  gpt::cuda::set_gemm(gemm_name);
  INFO((bf16 ? "bf16" : "fp32") << " with " << gemm_name << " (" << gpt::cuda::gemm_in_use(bf16)
                                << " on aligned calls): N=" << N << " C=" << C << " OC=" << OC);
  std::mt19937 rng(seed);
  const std::vector<float> inp = uniform(size_t(N) * C, rng, bf16), w = uniform(size_t(OC) * C, rng, bf16),
                           bias = uniform(size_t(OC), rng, bf16), dout = uniform(size_t(N) * OC, rng, bf16),
                           dinp0 = uniform(size_t(N) * C, rng, bf16),  // the reference's start, overwritten
      dw0 = uniform(size_t(OC) * C, rng, false), dbias0 = uniform(size_t(OC), rng, false);  // fp32 gradients

  // The reference in double, and the same ops on absolute values for S.
  const std::vector<double> inp_d = to_double(inp), w_d = to_double(w), bias_d = to_double(bias),
                            dout_d = to_double(dout);
  const std::vector<double> inp_a = absolute(inp), w_a = absolute(w), bias_a = absolute(bias), dout_a = absolute(dout);
  std::vector<double> out(size_t(N) * OC), out_S(out.size()), plain(out.size()), plain_S(out.size());
  gpt::cpu::matmul_forward(out.data(), inp_d.data(), w_d.data(), bias_d.data(), N, C, OC);
  gpt::cpu::matmul_forward(out_S.data(), inp_a.data(), w_a.data(), bias_a.data(), N, C, OC);
  gpt::cpu::matmul_forward(plain.data(), inp_d.data(), w_d.data(), static_cast<const double*>(nullptr), N, C, OC);
  gpt::cpu::matmul_forward(plain_S.data(), inp_a.data(), w_a.data(), static_cast<const double*>(nullptr), N, C, OC);
  std::vector<double> dinp = to_double(dinp0), dw = to_double(dw0), dbias = to_double(dbias0);
  std::vector<double> dinp_S = absolute(dinp0), dw_S = absolute(dw0), dbias_S = absolute(dbias0);
  gpt::cpu::matmul_backward(dinp.data(), dw.data(), dbias.data(), dout_d.data(), inp_d.data(), w_d.data(), N, C, OC);
  gpt::cpu::matmul_backward(dinp_S.data(), dw_S.data(), dbias_S.data(), dout_a.data(), inp_a.data(), w_a.data(), N,
                            C, OC);

  DeviceBuffer<A> d_inp(inp.size()), d_w(w.size()), d_bias(bias.size()), d_out(out.size()), d_gelu(out.size()),
      d_plain(out.size()), d_dout(dout.size()), d_dinp(dinp0.size());
  DeviceBuffer<float> d_dw(dw0.size()), d_dbias(dbias0.size());
  d_inp.upload(inp);
  d_w.upload(w);
  d_bias.upload(bias);
  d_dout.upload(dout);
  // dinp starts as NaN on the GPU: a path that read it (accumulated onto it, or scaled it
  // by a beta of 0) would give NaN where the reference, which writes over dinp0, does not.
  d_dinp.upload(std::vector<float>(dinp0.size(), std::numeric_limits<float>::quiet_NaN()));
  d_dw.upload(dw0);
  d_dbias.upload(dbias0);
  gpt::cuda::matmul_forward<A>(d_out.p, d_inp.p, d_w.p, d_bias.p, N, C, OC, d_gelu.p);
  gpt::cuda::matmul_forward<A>(d_plain.p, d_inp.p, d_w.p, nullptr, N, C, OC);
  gpt::cuda::matmul_backward<A>(d_dinp.p, d_dw.p, d_dbias.p, d_dout.p, d_inp.p, d_w.p, N, C, OC);
  cuda_ok(cudaDeviceSynchronize(), "matmul ops");

  auto at = [](int cols) { return [cols](int r, int c) { return size_t(r) * cols + c; }; };
  const auto nc = at(C), noc = at(OC);
  const bool cublas_bf16 = bf16 && std::string(gemm_name) == "cublas";
  const bool approximate_tanh = cublas_bf16;
  auto out_tol = [&](int r, int c) {
    const double t = output_tolerance(out[noc(r, c)], out_S[noc(r, c)], C, bf16);
    return cublas_bf16 ? t + cublas_epilogue_rounding(plain[noc(r, c)], 0.0, 0.0, false, true, out_S[noc(r, c)], C) : t;
  };
  check_matrix(
      "out", d_out.download(), N, OC, OC, [&](int r, int c) { return out[noc(r, c)]; }, out_tol, Control::OnePercent);
  check_matrix(
      "gelu_out", d_gelu.download(), N, OC, OC, [&](int r, int c) { return gelu(out[noc(r, c)]); },
      [&](int r, int c) { return gelu_tolerance(out[noc(r, c)], out_tol(r, c), bf16, approximate_tanh); },
      Control::OnePercent);
  check_matrix(
      "out without bias", d_plain.download(), N, OC, OC, [&](int r, int c) { return plain[noc(r, c)]; },
      [&](int r, int c) { return output_tolerance(plain[noc(r, c)], plain_S[noc(r, c)], C, bf16); },
      Control::OnePercent);
  check_matrix(
      "dinp", d_dinp.download(), N, C, C, [&](int r, int c) { return dinp[nc(r, c)]; },
      // dinp = dout w, written over dinp0 (kernels/ops.h): one rounding into bf16, as in the
      // forward without bias; a GPU that added dinp0 is off by it.
      [&](int r, int c) { return output_tolerance(dinp[nc(r, c)], dinp_S[nc(r, c)], OC, bf16); },
      Control::OnePercent);
  check_matrix(
      "dw", d_dw.download(), OC, C, C, [&](int r, int c) { return dw[nc(r, c)]; },
      [&](int r, int c) { return output_tolerance(dw[nc(r, c)], dw_S[nc(r, c)], N, false); }, Control::OnePercent);
  check_matrix(
      "dbias", d_dbias.download(), 1, OC, OC, [&](int, int c) { return dbias[size_t(c)]; },
      [&](int, int c) { return output_tolerance(dbias[size_t(c)], dbias_S[size_t(c)], N, false); },
      Control::OnePercent);
}

template <class A>
void test_matmul_ops_all() {
  for (const char* gemm_name : {"hand", "cublas"}) {
    test_matmul_ops<A>(gemm_name, 37, 50, 70, 11);     // ragged: v4/v5 refuse, "hand" descends to v3
    test_matmul_ops<A>(gemm_name, 128, 256, 768, 12);  // aligned: "hand" is the device's top rung
  }
  gpt::cuda::set_gemm("hand");
}

// bias_backward accumulates the right column sums and gives the same bits twice. N is
// not a multiple of the kernel's row chunk; OC = 771 is not a whole number of 16-byte
// packs (the element-by-element path), 768 is (the vector loads), and 8200 ends in a
// part-filled column tile on the vector path.
template <class A>
void test_bias_backward(int N, int OC) {
  constexpr bool bf16 = kIsBf16<A>;
  std::mt19937 rng(21);
  const std::vector<float> dout = uniform(size_t(N) * OC, rng, bf16), dbias0 = uniform(size_t(OC), rng, false);
  std::vector<double> want(dbias0.begin(), dbias0.end()), S = absolute(dbias0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      want[size_t(o)] += dout[size_t(n) * OC + o];
      S[size_t(o)] += std::fabs(dout[size_t(n) * OC + o]);
    }
  DeviceBuffer<A> d_dout(dout.size());
  DeviceBuffer<float> d_dbias(dbias0.size());
  d_dout.upload(dout);
  std::vector<float> runs[2];
  for (std::vector<float>& run : runs) {
    d_dbias.upload(dbias0);
    gpt::cuda::bias_backward<A>(d_dbias.p, d_dout.p, N, OC);
    run = d_dbias.download();
  }
  INFO((bf16 ? "bf16" : "fp32") << " N=" << N << " OC=" << OC);
  check_matrix(
      "dbias", runs[0], 1, OC, OC, [&](int, int o) { return want[size_t(o)]; },
      [&](int, int o) { return output_tolerance(want[size_t(o)], S[size_t(o)], N, false); }, Control::OnePercent);
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
}

}  // namespace

// ---- test cases ---------------------------------------------------------------------------

TEST_CASE("gemm ladder fp32 -> fp32: every version, layout, ragged shape and epilogue",
          "[gpu][gemm][ladder_fp32]") {
  test_ladder<float, float>("fp32 -> fp32");
}
TEST_CASE("gemm ladder bf16 -> bf16: every version, layout, ragged shape and epilogue",
          "[gpu][gemm][ladder_bf16]") {
  test_ladder<nv_bf16, nv_bf16>("bf16 -> bf16");
}
TEST_CASE("gemm ladder bf16 -> fp32: every version, layout, ragged shape and epilogue",
          "[gpu][gemm][ladder_bf16_fp32]") {
  test_ladder<nv_bf16, float>("bf16 -> fp32");
}

TEST_CASE("gemm v5 split K: few tiles, long K, every layout and epilogue, bf16 and fp32 outputs",
          "[gpu][gemm][split_k]") {
  if (!device_has(GemmVersion::V5, true)) {
    WARN("no split K to test: v5 needs a Hopper GPU");
    return;
  }
  unsigned seed = 900;
  for (const SplitShape& shape : kSplitShapes) {
    check_split_shape<nv_bf16>(shape, seed++);
    check_split_shape<float>(shape, seed++);
  }
}

TEST_CASE("gemm ladder: compact strides, v4/v5 refuse them and the others compute them",
          "[gpu][gemm][ladder_compact]") {
  std::set<GemmVersion> ran;
  const std::vector<Epilogue> all(std::begin(kEpilogues), std::end(kEpilogues));
  for (int layout = 0; layout < 4; ++layout) {
    const bool trans_a = layout & 1, trans_b = layout & 2;
    // ld = 65: rows start at odd element offsets, which cp.async and TMA cannot load.
    const GemmProblem p = make_gemm_problem(trans_a, trans_b, 65, 65, 65, true, true, false, 100 + layout);
    INFO(describe(p));
    DeviceBuffer<nv_bf16> A(p.A.size()), B(p.B.size());
    DeviceBuffer<nv_bf16> C(p.C_old.size());
    const GemmArgs<nv_bf16, nv_bf16> args = gemm_args<nv_bf16, nv_bf16>(p, kEpilogues[0], A.p, B.p, nullptr, C.p, nullptr);
    for (GemmVersion v : {GemmVersion::V4, GemmVersion::V5}) {
      INFO(gpt::cuda::gemm_version_name(v));
      CHECK_FALSE(gpt::cuda::gemm_version_supports(v, args));
      CHECK_THROWS_AS(gpt::cuda::gemm(v, args), std::invalid_argument);
    }
    check_problem<nv_bf16, nv_bf16>(p, all, ran);
    check_problem<float, float>(make_gemm_problem(trans_a, trans_b, 65, 65, 65, false, false, false, 200 + layout),
                                all, ran);
  }
  CHECK(names(ran) == "cublas v1 v2 v3");

  // Strides that are multiples of 8 but a base that is not 16-byte aligned: refused too.
  const GemmProblem p = make_gemm_problem(false, false, 64, 64, 64, true, true, true, 300);
  DeviceBuffer<nv_bf16> A(p.A.size() + 8), B(p.B.size()), C(p.C_old.size());
  const GemmArgs<nv_bf16, nv_bf16> args = gemm_args<nv_bf16, nv_bf16>(p, kEpilogues[0], A.p + 1, B.p, nullptr, C.p, nullptr);
  for (GemmVersion v : {GemmVersion::V4, GemmVersion::V5}) {
    INFO(gpt::cuda::gemm_version_name(v) << " with A one element past an aligned address");
    CHECK_FALSE(gpt::cuda::gemm_version_supports(v, args));
    CHECK_THROWS_AS(gpt::cuda::gemm(v, args), std::invalid_argument);
  }
}

TEST_CASE("matmul ops fp32 against the CPU reference, hand and cuBLAS GEMMs", "[gpu][gemm][matmul]") {
  test_matmul_ops_all<float>();
}
TEST_CASE("matmul ops bf16 against the CPU reference, hand and cuBLAS GEMMs", "[gpu][gemm][matmul]") {
  test_matmul_ops_all<gpt::bf16>();
}

TEST_CASE("bias_backward: column sums, the same bits every run", "[gpu][gemm][matmul]") {
  for (const auto& [N, OC] : {std::pair{4099, 771}, std::pair{4099, 768}, std::pair{300, 8200}}) {
    test_bias_backward<float>(N, OC);
    test_bias_backward<gpt::bf16>(N, OC);
  }
}

// An empty dimension, as tests/ops/test_gemm.cpp checks on the CPU: OC = 0 writes dinp
// (the empty sum) as zeros over what it held and leaves dw; N = 0 changes nothing.
TEST_CASE("matmul_backward with an empty dimension", "[gpu][gemm][matmul]") {
  const int N = 3, C = 4;
  DeviceBuffer<float> d_inp(size_t(N) * C), d_dinp(size_t(N) * C), d_dw(size_t(2) * C), d_dbias(2);
  d_inp.upload(std::vector<float>(size_t(N) * C, 0.5f));
  d_dinp.upload(std::vector<float>(size_t(N) * C, 7.0f));
  d_dw.upload(std::vector<float>(size_t(2) * C, 9.0f));
  d_dbias.upload(std::vector<float>(2, 5.0f));
  gpt::cuda::matmul_backward<float>(d_dinp.p, d_dw.p, nullptr, nullptr, d_inp.p, nullptr, N, C, /*OC=*/0);
  cuda_ok(cudaDeviceSynchronize(), "matmul_backward, OC = 0");
  CHECK(d_dinp.download() == std::vector<float>(size_t(N) * C, 0.0f));
  CHECK(d_dw.download() == std::vector<float>(size_t(2) * C, 9.0f));

  d_dinp.upload(std::vector<float>(size_t(N) * C, 7.0f));
  gpt::cuda::matmul_backward<float>(d_dinp.p, d_dw.p, d_dbias.p, nullptr, d_inp.p, nullptr, /*N=*/0, C, 2);
  cuda_ok(cudaDeviceSynchronize(), "matmul_backward, N = 0");
  CHECK(d_dinp.download() == std::vector<float>(size_t(N) * C, 7.0f));
  CHECK(d_dw.download() == std::vector<float>(size_t(2) * C, 9.0f));
  CHECK(d_dbias.download() == std::vector<float>(2, 5.0f));
}

TEST_CASE("set_gemm: the choice, the descent down the ladder, and bad names", "[gpu][gemm]") {
  const int cc = device_capability();
  // The rung a bf16 call well aligned can run when `top` is asked for: v5 needs 9.x,
  // v4 8.0 or newer; fp32 calls always end at v3 (v4/v5 are bf16-only).
  const std::string top_bf16 = cc / 10 == 9 ? "v5" : cc >= 80 ? "v4" : "v3";
  const std::string v4_bf16 = cc >= 80 ? "v4" : "v3";

  gpt::cuda::set_gemm("hand");
  CHECK(std::string(gpt::cuda::gemm_in_use(true)) == top_bf16);
  CHECK(std::string(gpt::cuda::gemm_in_use(false)) == "v3");
  gpt::cuda::set_gemm("v5");
  CHECK(std::string(gpt::cuda::gemm_in_use(true)) == top_bf16);
  CHECK(std::string(gpt::cuda::gemm_in_use(false)) == "v3");
  gpt::cuda::set_gemm("v4");
  CHECK(std::string(gpt::cuda::gemm_in_use(true)) == v4_bf16);
  CHECK(std::string(gpt::cuda::gemm_in_use(false)) == "v3");
  for (const char* name : {"cublas", "v1", "v2", "v3"}) {
    gpt::cuda::set_gemm(name);
    CHECK(std::string(gpt::cuda::gemm_in_use(true)) == name);
    CHECK(std::string(gpt::cuda::gemm_in_use(false)) == name);
  }

  gpt::cuda::set_gemm("v2");
  CHECK_THROWS_AS(gpt::cuda::set_gemm("bogus"), std::invalid_argument);
  CHECK(std::string(gpt::cuda::gemm_in_use(false)) == "v2");  // a refused name changes nothing
  try {
    gpt::cuda::set_gemm("bogus");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("bogus") != std::string::npos);  // names the value
    CHECK(what.find("hand") != std::string::npos);   // and lists the choices
    CHECK(what.find("v5") != std::string::npos);
  }
  CHECK_THROWS_AS(gpt::cuda::set_gemm("V3"), std::invalid_argument);  // names are exact
  CHECK_THROWS_AS(gpt::cuda::set_gemm(nullptr), std::invalid_argument);
  gpt::cuda::set_gemm("hand");
}
