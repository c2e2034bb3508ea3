// GPU attention ladder (kernels/cuda/attention/, v1 to v5) against the CPU reference
// (gpt::cpu::attention_forward / attention_backward) run in double: the ground truth.
//
// Every version, fp32 and bf16, on shapes that exercise the edges of the tiles: T = 1
// (a single token), T = 17 (less than one tile), T = 200 (not a multiple of 32), head
// sizes 64 and 128, NH = 3, B = 2. Inputs are uniform in [-1, 1] from a fixed seed;
// for bf16 they are rounded to bf16 on the host first, so the GPU and the reference
// see the same numbers and only the GPU's arithmetic and output rounding differ.
//
// Without a GPU (cudaGetDeviceCount fails or reports 0) the program exits 77, which
// CTest reports as skipped.
//
// ---- Tolerances, derived -----------------------------------------------------------
// eps = 2^-23 (fp32). A sum of n rounded terms is off by about sqrt(n) * eps * (the
// size of its terms): errors of random sign add like a random walk; n * eps is the
// worst case, not reached with random inputs. A safety factor of 8 covers constants.
// Measured from the reference (double) on the actual inputs:
//   A    = max_{u<=t} scale * sum_i |q_ti k_ui|        size of a score's terms
//   W    = max_{u<=t} sum_i |dy_ti v_ui|               size of a dP's terms
//   G    = max_{u<=t} |dP_tu - D_t|                     size of dS / P
//   colP = max_u sum_t P_tu                             the most any key is attended to
// Then, following the error through the computation:
//   score s:             |ds| ~ sqrt(hs) eps A
//   P = exp(s - L):      |dP|/P ~ |ds| + |dL| + exp's own 2 ulps
//   P-weighted sums:     relative error  eP = eps (2 sqrt(hs) A + sqrt(T) + 4)
//   y  = sum_u P v:              tol = 8 eP vmax
//   L  = logsumexp:              tol = 8 (eP + eps |L|max)
//   dv = sum_t P dy:             tol = 8 eP colP dymax
//   dP - D (dot, then a sum):    error eG = eP G + eps (2 sqrt(hs) + sqrt(T)) W
//   dq = scale sum_u P (dP-D) k: tol = 8 scale kmax eG          (sum_u P = 1)
//   dk = scale sum_t P (dP-D) q: tol = 8 scale qmax colP eG
// bf16 adds what rounding to bf16 costs. bf16 keeps 8 significant bits, so rounding
// to nearest moves a value by at most u = 2^-8 of itself (half an ulp; the ulp of 1
// is 2^-7). With a factor 2 of margin:
//   every stored output:         + 2^-7 max|X|
//   dq, dk (v3 only: D = dy . y is computed from the bf16-rounded output y, so
//   |dD| <= 2^-8 Y with Y = max_t sum_i |dy_ti y_ti|):  + 2^-7 Y scale kmax (dq),
//                                                        + 2^-7 Y scale qmax colP (dk)
// v4 and v5 (tensor cores, bf16 only) round the probabilities P, and v4's backward also
// dS = P (dP - D), to bf16 to use them as mma operands: a relative error of at most
// 2^-8 per term (v4_mma_sync.cu), so with the same factor 2 of margin they add
//   y:  2^-7 vmax            (sum_u |dP_tu| |v_u| <= 2^-8 sum_u P_tu vmax, sum_u P = 1)
//   dv: 2^-7 colP dymax      (P^T dO with P rounded)
//   dq: 2^-7 scale kmax G    (sum_u |P_tu (dP_tu - D_t)| |k_u| <= G kmax)
//   dk: 2^-7 scale qmax colP G
// on top of the v3 (bf16, D from the rounded output) tolerances.
#include "tests/gpu/gpu_test.h"  // Catch2 (own main), cuda_ok, bf16 conversions
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/attention/attention.h"

namespace {

using bf16 = __nv_bfloat16;

using gpt::gpu_test::cuda_ok;

// ---- host <-> device ------------------------------------------------------------------

using gpt::gpu_test::to_elem;
using gpt::gpu_test::to_float;

using gpt::gpu_test::DeviceBuffer;

// ---- the problem and its ground truth ---------------------------------------------------

struct Shape {
  int B, T, NH, hs;
  int C() const { return NH * hs; }
  size_t qkv_n() const { return size_t(B) * T * 3 * C(); }
  size_t out_n() const { return size_t(B) * T * C(); }
  size_t rows_n() const { return size_t(B) * NH * T; }
};

const Shape kShapes[] = {{2, 1, 3, 64}, {2, 17, 3, 64}, {2, 200, 3, 64},
                         {2, 1, 3, 128}, {2, 17, 3, 128}, {2, 200, 3, 128}};

struct Problem {
  Shape s;
  std::vector<float> qkv, dout;  // inputs (already rounded to bf16 in bf16 tests)
  // ground truth, in double
  std::vector<double> out, lse, dqkv;
  // magnitudes for the tolerances (see the top of the file)
  double scale, qmax = 0, kmax = 0, vmax = 0, dymax = 0, ymax = 0, lmax = 0, A = 0, W = 0, G = 0,
                colP = 0, Y = 0;
  double dq_max = 0, dk_max = 0, dv_max = 0;
};

Problem make_problem(const Shape& s, bool round_bf16, unsigned seed) {
  Problem pr;
  pr.s = s;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  pr.qkv.resize(s.qkv_n());
  pr.dout.resize(s.out_n());
  for (float& x : pr.qkv) x = round_bf16 ? gpt::cpu::bf16_round(uni(rng)) : uni(rng);
  for (float& x : pr.dout) x = round_bf16 ? gpt::cpu::bf16_round(uni(rng)) : uni(rng);

  const int B = s.B, T = s.T, C = s.C(), NH = s.NH, hs = s.hs;
  const std::vector<double> qkv(pr.qkv.begin(), pr.qkv.end()), dout(pr.dout.begin(), pr.dout.end());
  std::vector<double> att(size_t(B) * NH * T * T);
  pr.out.assign(s.out_n(), 0.0);
  pr.dqkv.assign(s.qkv_n(), 0.0);
  gpt::cpu::attention_forward(pr.out.data(), att.data(), qkv.data(), B, T, C, NH);
  gpt::cpu::attention_backward(pr.dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);

  // Logsumexp and the magnitudes, straight from the definitions.
  pr.scale = 1.0 / std::sqrt(double(hs));
  pr.lse.assign(s.rows_n(), 0.0);
  auto at = [&](int b, int t, int part, int h) { return (size_t(b) * T + t) * 3 * C + size_t(part) * C + size_t(h) * hs; };
  auto oat = [&](int b, int t, int h) { return (size_t(b) * T + t) * C + size_t(h) * hs; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const double* P = att.data() + (size_t(b) * NH + h) * T * T;
      for (int t = 0; t < T; ++t) {
        const double* q = &qkv[at(b, t, 0, h)];
        const double* dy = &dout[oat(b, t, h)];
        double m = -INFINITY, sum_e = 0.0, D = 0.0, Yt = 0.0;
        std::vector<double> sc(size_t(t) + 1), dp(size_t(t) + 1);
        for (int u = 0; u <= t; ++u) {
          const double* k = &qkv[at(b, u, 1, h)];
          const double* v = &qkv[at(b, u, 2, h)];
          double dot = 0, absdot = 0, dpu = 0, absdp = 0;
          for (int i = 0; i < hs; ++i) {
            dot += q[i] * k[i];
            absdot += std::fabs(q[i] * k[i]);
            dpu += dy[i] * v[i];
            absdp += std::fabs(dy[i] * v[i]);
          }
          sc[size_t(u)] = dot * pr.scale;
          dp[size_t(u)] = dpu;
          m = std::max(m, sc[size_t(u)]);
          pr.A = std::max(pr.A, absdot * pr.scale);
          pr.W = std::max(pr.W, absdp);
          D += P[size_t(t) * T + u] * dpu;
        }
        for (int u = 0; u <= t; ++u) sum_e += std::exp(sc[size_t(u)] - m);
        const double L = m + std::log(sum_e);
        pr.lse[(size_t(b) * NH + h) * T + t] = L;
        pr.lmax = std::max(pr.lmax, std::fabs(L));
        for (int u = 0; u <= t; ++u) pr.G = std::max(pr.G, std::fabs(dp[size_t(u)] - D));
        for (int i = 0; i < hs; ++i) Yt += std::fabs(dy[i] * pr.out[oat(b, t, h) + size_t(i)]);
        pr.Y = std::max(pr.Y, Yt);
      }
      for (int u = 0; u < T; ++u) {
        double col = 0;
        for (int t = u; t < T; ++t) col += P[size_t(t) * T + u];
        pr.colP = std::max(pr.colP, col);
      }
    }
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < hs; ++i) {
          pr.qmax = std::max(pr.qmax, std::fabs(qkv[at(b, t, 0, h) + size_t(i)]));
          pr.kmax = std::max(pr.kmax, std::fabs(qkv[at(b, t, 1, h) + size_t(i)]));
          pr.vmax = std::max(pr.vmax, std::fabs(qkv[at(b, t, 2, h) + size_t(i)]));
          pr.dymax = std::max(pr.dymax, std::fabs(dout[oat(b, t, h) + size_t(i)]));
          pr.ymax = std::max(pr.ymax, std::fabs(pr.out[oat(b, t, h) + size_t(i)]));
          pr.dq_max = std::max(pr.dq_max, std::fabs(pr.dqkv[at(b, t, 0, h) + size_t(i)]));
          pr.dk_max = std::max(pr.dk_max, std::fabs(pr.dqkv[at(b, t, 1, h) + size_t(i)]));
          pr.dv_max = std::max(pr.dv_max, std::fabs(pr.dqkv[at(b, t, 2, h) + size_t(i)]));
        }
  return pr;
}

struct Tolerances {
  double y, lse, dq, dk, dv;
};

// The derivation is at the top of the file.
Tolerances tolerances(const Problem& pr, bool bf16_storage, bool d_from_rounded_y,
                      bool rounds_p = false) {
  const double eps = std::ldexp(1.0, -23), bf = std::ldexp(1.0, -7);  // bf: 2 x bf16's u
  const double sq_hs = std::sqrt(double(pr.s.hs)), sq_T = std::sqrt(double(pr.s.T));
  const double eP = eps * (2 * sq_hs * pr.A + sq_T + 4);
  const double eG = eP * pr.G + eps * (2 * sq_hs + sq_T) * pr.W;
  Tolerances tol{8 * eP * pr.vmax, 8 * (eP + eps * pr.lmax), 8 * pr.scale * pr.kmax * eG,
                 8 * pr.scale * pr.qmax * pr.colP * eG, 8 * eP * pr.colP * pr.dymax};
  if (bf16_storage) {
    tol.y += bf * pr.ymax;
    tol.dq += bf * pr.dq_max;
    tol.dk += bf * pr.dk_max;
    tol.dv += bf * pr.dv_max;
  }
  if (bf16_storage && d_from_rounded_y) {
    tol.dq += bf * pr.Y * pr.scale * pr.kmax;
    tol.dk += bf * pr.Y * pr.scale * pr.qmax * pr.colP;
  }
  if (rounds_p) {  // v4/v5: P and dS are rounded to bf16 as mma operands (top of file)
    tol.y += bf * pr.vmax;
    tol.dv += bf * pr.colP * pr.dymax;
    tol.dq += bf * pr.scale * pr.kmax * pr.G;
    tol.dk += bf * pr.scale * pr.qmax * pr.colP * pr.G;
  }
  return tol;
}

// Largest |got - want| over the elements of one part of a (B,T,parts*C) tensor
// (part < 0: the whole tensor). A NaN anywhere is an infinite error.
double max_error(const std::vector<float>& got, const std::vector<double>& want, int parts = 1,
                 int part = -1, int C = 0) {
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (part >= 0 && int((i / size_t(C)) % size_t(parts)) != part) continue;
    const double d = std::fabs(double(got[i]) - want[i]);
    if (std::isnan(d)) return INFINITY;
    err = std::max(err, d);
  }
  return err;
}

void check_forward(const Problem& pr, const std::vector<float>& out, const std::vector<float>* lse,
                   const Tolerances& tol) {
  const double ey = max_error(out, pr.out);
  INFO("out: max error " << ey << ", tolerance " << tol.y);
  CHECK(ey <= tol.y);
  if (lse) {
    const double el = max_error(*lse, pr.lse);
    INFO("logsumexp: max error " << el << ", tolerance " << tol.lse);
    CHECK(el <= tol.lse);
  }
}

void check_backward(const Problem& pr, const std::vector<float>& dqkv, const Tolerances& tol) {
  const int C = pr.s.C();
  const double eq = max_error(dqkv, pr.dqkv, 3, 0, C), ek = max_error(dqkv, pr.dqkv, 3, 1, C),
               ev = max_error(dqkv, pr.dqkv, 3, 2, C);
  INFO("dq: max error " << eq << " (|dq| <= " << pr.dq_max << "), tolerance " << tol.dq);
  CHECK(eq <= tol.dq);
  INFO("dk: max error " << ek << " (|dk| <= " << pr.dk_max << "), tolerance " << tol.dk);
  CHECK(ek <= tol.dk);
  INFO("dv: max error " << ev << " (|dv| <= " << pr.dv_max << "), tolerance " << tol.dv);
  CHECK(ev <= tol.dv);
}

std::string describe(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " hs=" + std::to_string(s.hs);
}

constexpr bool is_bf16(float) { return false; }
constexpr bool is_bf16(bf16) { return true; }

// ---- the versions ---------------------------------------------------------------------

template <class E>
void test_v1() {
  for (const Shape& s : kShapes) {
    INFO(describe(s));
    const bool rounded = is_bf16(E{});
    const Problem pr = make_problem(s, rounded, 1234);
    DeviceBuffer<E> qkv(s.qkv_n()), dout(s.out_n()), out(s.out_n()), dqkv(s.qkv_n());
    DeviceBuffer<float> att(gpt::cuda::attention_scores_floats(s.B, s.T, s.NH)),
        dscores(gpt::cuda::attention_scores_floats(s.B, s.T, s.NH));
    qkv.upload(pr.qkv);
    dout.upload(pr.dout);
    gpt::cuda::attention_forward_v1(out.p, att.p, qkv.p, s.B, s.T, s.C(), s.NH);
    gpt::cuda::attention_backward_v1(dqkv.p, dscores.p, dout.p, qkv.p, att.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "v1");
    const Tolerances tol = tolerances(pr, rounded, false);
    check_forward(pr, out.download(), nullptr, tol);
    const std::vector<float> g1 = dqkv.download();
    check_backward(pr, g1, tol);
    if (!rounded) {  // accumulates, deterministically: a second call doubles dqkv exactly
      gpt::cuda::attention_backward_v1(dqkv.p, dscores.p, dout.p, qkv.p, att.p, s.B, s.T, s.C(), s.NH);
      const std::vector<float> g2 = dqkv.download();
      size_t differ = 0;
      for (size_t i = 0; i < g1.size(); ++i) differ += g2[i] != 2 * g1[i];
      CHECK(differ == 0);
    }
  }
}

template <class E>
void test_v2_v3() {
  for (const Shape& s : kShapes) {
    INFO(describe(s));
    const bool rounded = is_bf16(E{});
    const Problem pr = make_problem(s, rounded, 4321);
    DeviceBuffer<E> qkv(s.qkv_n()), dout(s.out_n()), out(s.out_n()), dqkv(s.qkv_n());
    DeviceBuffer<float> lse(s.rows_n()), dsum(s.rows_n());
    qkv.upload(pr.qkv);
    dout.upload(pr.dout);
    gpt::cuda::attention_forward_v2(out.p, lse.p, qkv.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "v2");
    const Tolerances tol = tolerances(pr, rounded, true);
    const std::vector<float> l = lse.download();
    check_forward(pr, out.download(), &l, tol);  // v2: out and logsumexp

    // v3 from v2's out and logsumexp.
    gpt::cuda::attention_backward_v3(dqkv.p, dsum.p, dout.p, qkv.p, out.p, lse.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "v3");
    const std::vector<float> g1 = dqkv.download();
    check_backward(pr, g1, tol);
    if (!rounded) {  // accumulates, deterministically: a second call doubles dqkv exactly
      gpt::cuda::attention_backward_v3(dqkv.p, dsum.p, dout.p, qkv.p, out.p, lse.p, s.B, s.T, s.C(), s.NH);
      const std::vector<float> g2 = dqkv.download();
      size_t differ = 0;
      for (size_t i = 0; i < g1.size(); ++i) differ += g2[i] != 2 * g1[i];
      CHECK(differ == 0);
    }
  }
}

int compute_capability_major() {
  int device = 0, major = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "capability");
  return major;
}

// v4 forward and backward (or, with v5_forward, v5's forward and v4's backward from
// it: the pairing training runs on Hopper), bf16.
void test_tensor_cores(bool v5_forward) {
  for (const Shape& s : kShapes) {
    INFO(describe(s) << (v5_forward ? " (v5 forward)" : " (v4 forward)"));
    const Problem pr = make_problem(s, true, 2468);
    DeviceBuffer<bf16> qkv(s.qkv_n()), dout(s.out_n()), out(s.out_n()), dqkv(s.qkv_n());
    DeviceBuffer<float> lse(s.rows_n()), dsum(s.rows_n());
    qkv.upload(pr.qkv);
    dout.upload(pr.dout);
    if (v5_forward)
      gpt::cuda::attention_forward_v5(out.p, lse.p, qkv.p, s.B, s.T, s.C(), s.NH);
    else
      gpt::cuda::attention_forward_v4(out.p, lse.p, qkv.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "forward");
    const Tolerances tol = tolerances(pr, true, true, true);
    const std::vector<float> l = lse.download();
    check_forward(pr, out.download(), &l, tol);

    gpt::cuda::attention_backward_v4(dqkv.p, dsum.p, dout.p, qkv.p, out.p, lse.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "v4 backward");
    const std::vector<float> g1 = dqkv.download();
    check_backward(pr, g1, tol);
    // Deterministic: the same inputs give the same bits (bf16 accumulation rounds, so
    // the check is a rerun from zero, not a doubling).
    cuda_ok(cudaMemset(dqkv.p, 0, dqkv.n * sizeof(bf16)), "cudaMemset");
    gpt::cuda::attention_backward_v4(dqkv.p, dsum.p, dout.p, qkv.p, out.p, lse.p, s.B, s.T, s.C(), s.NH);
    const std::vector<float> g2 = dqkv.download();
    size_t differ = 0;
    for (size_t i = 0; i < g1.size(); ++i) differ += g2[i] != g1[i];
    CHECK(differ == 0);
  }
}

}  // namespace

TEST_CASE("gpu attention v4 tensor cores (mma.sync): bf16", "[gpu][attention]") {
  if (compute_capability_major() < 8) {
    WARN("v4 needs compute capability 8.0 or newer: not run on this device");
    return;
  }
  test_tensor_cores(false);
}

TEST_CASE("gpu attention v5 Hopper forward (wgmma + TMA) + v4 backward: bf16", "[gpu][attention]") {
  if (compute_capability_major() != 9) {
    // Off Hopper, v5 must refuse clearly rather than launch.
    DeviceBuffer<bf16> qkv(size_t(2) * 8 * 3 * 192), out(size_t(2) * 8 * 192);
    DeviceBuffer<float> lse(size_t(2) * 3 * 8);
    CHECK_THROWS_AS(gpt::cuda::attention_forward_v5(out.p, lse.p, qkv.p, 2, 8, 192, 3), std::invalid_argument);
    WARN("v5 needs a Hopper GPU (compute capability 9.x): only its refusal was checked");
    return;
  }
  test_tensor_cores(true);
}

TEST_CASE("gpu attention v1 naive: fp32", "[gpu][attention]") { test_v1<float>(); }
TEST_CASE("gpu attention v1 naive: bf16", "[gpu][attention]") { test_v1<bf16>(); }
TEST_CASE("gpu attention v2 flash forward + v3 flash backward: fp32", "[gpu][attention]") {
  test_v2_v3<float>();
}
TEST_CASE("gpu attention v2 flash forward + v3 flash backward: bf16", "[gpu][attention]") {
  test_v2_v3<bf16>();
}

TEST_CASE("gpu attention rejects shapes it was not built for", "[gpu][attention]") {
  // Checked before anything touches the device: null pointers are never dereferenced.
  float* none = nullptr;
  CHECK_THROWS_AS(gpt::cuda::attention_forward_v2(none, none, none, 2, 8, 3 * 96, 3), std::invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::attention_backward_v3(none, none, none, none, none, none, 2, 8, 100, 3),
                  std::invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::attention_forward_v1(none, none, none, 2, 0, 192, 3), std::invalid_argument);
}

int main(int argc, char** argv) { return gpt::gpu_test::run_tests_or_skip(argc, argv); }
