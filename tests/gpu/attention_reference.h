// The attention tests' host side, without CUDA: the problems (inputs from fixed seeds,
// the ground truth in double from gpt::cpu::attention_*), the magnitudes the tolerances
// are made of, the tolerances, and the cases the GPU test runs (which version, which
// storage, which seed). Shared by test_attention_gpu.cpp (the GPU against them) and
// test_attention_tolerance.cpp (the bounds themselves, on the CPU: they reject the
// negative controls).
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
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"

namespace gpt::attention_test {

// ---- the problem and its ground truth ---------------------------------------------------

struct Shape {
  int B, T, NH, hs;
  int C() const { return NH * hs; }
  size_t qkv_n() const { return size_t(B) * T * 3 * C(); }
  size_t out_n() const { return size_t(B) * T * C(); }
  size_t rows_n() const { return size_t(B) * NH * T; }
};

inline constexpr Shape kShapes[] = {{2, 1, 3, 64}, {2, 17, 3, 64}, {2, 200, 3, 64},
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

inline Problem make_problem(const Shape& s, bool round_bf16, unsigned seed) {
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
inline Tolerances tolerances(const Problem& pr, bool bf16_storage, bool d_from_rounded_y,
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
inline double max_error(const std::vector<float>& got, const std::vector<double>& want, int parts = 1,
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

// ---- the GPU test's cases -------------------------------------------------------------------

// Which kernels a case runs: v1 forward and backward; v2's forward and v3's backward from
// it; a tensor-core forward (v4, or v5 on Hopper) and v4's backward (bf16 only).
enum class Versions { V1, V2V3, TensorCores };
struct Case {
  Versions versions;
  bool bf16;  // inputs rounded to bf16, outputs stored in bf16
};
inline constexpr Case kCases[] = {{Versions::V1, false},   {Versions::V1, true}, {Versions::V2V3, false},
                                  {Versions::V2V3, true},  {Versions::TensorCores, true}};

inline const char* name(const Case& c) {
  switch (c.versions) {
    case Versions::V1: return c.bf16 ? "v1, bf16" : "v1, fp32";
    case Versions::V2V3: return c.bf16 ? "v2 + v3, bf16" : "v2 + v3, fp32";
    case Versions::TensorCores: return "v4/v5 + v4, bf16";
  }
  return "?";
}
inline unsigned seed(Versions v) {
  switch (v) {
    case Versions::V1: return 1234;
    case Versions::V2V3: return 4321;
    case Versions::TensorCores: return 2468;
  }
  return 0;
}
inline Problem make_problem(const Shape& s, const Case& c) { return make_problem(s, c.bf16, seed(c.versions)); }
// v1 keeps the probabilities, so its backward needs no D from the output; v3 and v4 compute
// D from the stored (rounded) output; v4 and v5 round P (and v4 dS) for the mma.
inline Tolerances tolerances(const Problem& pr, const Case& c) {
  return tolerances(pr, c.bf16, c.versions != Versions::V1, c.versions == Versions::TensorCores);
}

}  // namespace gpt::attention_test
