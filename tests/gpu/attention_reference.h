// The attention tests' host side, without CUDA: the problems (inputs from fixed seeds,
// the ground truth in double from gpt::cpu::attention_*), the magnitudes the bounds are
// made of, what each case's kernels must return and how far from it each element may be,
// and the cases the GPU test runs (which version, which storage, which seed). Shared by
// test_attention_gpu.cpp (the GPU against them) and test_attention_tolerance.cpp (the
// bounds themselves, on the CPU: they hold for an fp32 emulation of the kernels'
// roundings, and they reject the negative controls).
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
// These are sizes of whole tensors: the fp32 part of every element's bound is the same.
// bf16 storage and the tensor cores' roundings are bounded element by element instead,
// from the reference in double. bf16 keeps 8 significant bits, so rounding to nearest
// moves a value by at most u = 2^-8 of itself. With a factor 2 of margin (2^-7):
//   every stored output X:       + 2^-7 (|X| + its other error terms)   (one rounding:
//                                the kernels accumulate in fp32 and store once)
// v4 and v5 (tensor cores, bf16 only) round the probabilities P, and v4's backward also
// dS = P (dP - D), to bf16 to use them as mma operands, a relative error of at most 2^-8
// per term (v4_mma_sync.cu), so they add, per element:
//   y_t:  2^-7 sum_u P_tu |v_u|          dv_u: 2^-7 sum_t P_tu |dy_t|
//   dq_t: 2^-7 scale sum_u P_tu |dP_tu - D_t| |k_u|
//   dk_u: 2^-7 scale sum_t P_tu |dP_tu - D_t| |q_t|
//
// What the backward must return. v1's backward uses the probabilities its forward kept.
// v3's and v4's take the forward's output O and logsumexp L as inputs and compute
// D_t = dy_t . O_t from that O; in bf16 it is the rounded output, so their gradients are
// not those of the exact attention, by up to 2^-8 sum_i |dy_ti O_ti| in each D_t (an error
// no bound of their arithmetic should have to absorb: over a whole dk it reached 20 % to
// 30 % of its largest value). So their reference is the backward of exactly the inputs
// they get, in double: D from the O the kernel was given (expected(), below).
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
  // Index of head h's first element of part (0: q, 1: k, 2: v) at (b, t) in a (B, T, 3C)
  // qkv tensor, and of head h at (b, t) in a (B, T, C) one.
  size_t qkv_at(int b, int t, int part, int h) const {
    return (size_t(b) * T + t) * 3 * C() + size_t(part) * C() + size_t(h) * hs;
  }
  size_t out_at(int b, int t, int h) const { return (size_t(b) * T + t) * C() + size_t(h) * hs; }
};

inline constexpr Shape kShapes[] = {{2, 1, 3, 64},  {2, 17, 3, 64},  {2, 200, 3, 64},
                                    {2, 1, 3, 128}, {2, 17, 3, 128}, {2, 200, 3, 128}};

struct Problem {
  Shape s;
  std::vector<float> qkv, dout;  // inputs (already rounded to bf16 in bf16 tests)
  // ground truth, in double
  std::vector<double> out, lse, dqkv, att;  // att: the probabilities P, (B, NH, T, T)
  // magnitudes for the tolerances (see the top of the file)
  double scale, qmax = 0, kmax = 0, vmax = 0, dymax = 0, lmax = 0, A = 0, W = 0, G = 0, colP = 0;
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
  std::vector<double>& att = pr.att;
  att.assign(size_t(B) * NH * T * T, 0.0);
  pr.out.assign(s.out_n(), 0.0);
  pr.dqkv.assign(s.qkv_n(), 0.0);
  gpt::cpu::attention_forward(pr.out.data(), att.data(), qkv.data(), B, T, C, NH);
  gpt::cpu::attention_backward(pr.dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);

  // Logsumexp and the magnitudes, straight from the definitions.
  pr.scale = 1.0 / std::sqrt(double(hs));
  pr.lse.assign(s.rows_n(), 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const double* P = att.data() + (size_t(b) * NH + h) * T * T;
      for (int t = 0; t < T; ++t) {
        const double* q = &qkv[s.qkv_at(b, t, 0, h)];
        const double* dy = &dout[s.out_at(b, t, h)];
        double m = -INFINITY, sum_e = 0.0, D = 0.0;
        std::vector<double> sc(size_t(t) + 1), dp(size_t(t) + 1);
        for (int u = 0; u <= t; ++u) {
          const double* k = &qkv[s.qkv_at(b, u, 1, h)];
          const double* v = &qkv[s.qkv_at(b, u, 2, h)];
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
          pr.qmax = std::max(pr.qmax, std::fabs(qkv[s.qkv_at(b, t, 0, h) + size_t(i)]));
          pr.kmax = std::max(pr.kmax, std::fabs(qkv[s.qkv_at(b, t, 1, h) + size_t(i)]));
          pr.vmax = std::max(pr.vmax, std::fabs(qkv[s.qkv_at(b, t, 2, h) + size_t(i)]));
          pr.dymax = std::max(pr.dymax, std::fabs(dout[s.out_at(b, t, h) + size_t(i)]));
          pr.dq_max = std::max(pr.dq_max, std::fabs(pr.dqkv[s.qkv_at(b, t, 0, h) + size_t(i)]));
          pr.dk_max = std::max(pr.dk_max, std::fabs(pr.dqkv[s.qkv_at(b, t, 1, h) + size_t(i)]));
          pr.dv_max = std::max(pr.dv_max, std::fabs(pr.dqkv[s.qkv_at(b, t, 2, h) + size_t(i)]));
        }
  return pr;
}

// ---- the GPU test's cases -------------------------------------------------------------------

// Which kernels a case runs: v1 forward and backward; v2's forward and v3's backward from
// it; a tensor-core forward (v4, or v5 on Hopper) and v4's backward (bf16 only).
enum class Versions { V1, V2V3, TensorCores };
struct Case {
  Versions versions;
  bool bf16;  // inputs rounded to bf16, outputs stored in bf16
};
inline constexpr Case kCases[] = {{Versions::V1, false},
                                  {Versions::V1, true},
                                  {Versions::V2V3, false},
                                  {Versions::V2V3, true},
                                  {Versions::TensorCores, true}};

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

// ---- what a case's kernels must return ------------------------------------------------------

// The attention of one problem computed as the kernels round it, in R: P = exp(s - L) for
// each row; with round_p, P and dS rounded to bf16 before they multiply (v4/v5); and, when
// `out_given` (the output a kernel's backward is given) is not null, the backward, with
// D_t = dy_t . O_t from it (without it dqkv stays empty). In double, without round_p, it
// is the exact attention of those inputs (expected() below); in float it stands in for a
// kernel's fp32 arithmetic (test_attention_tolerance.cpp).
template <class R>
struct Attention {
  std::vector<R> out, lse, dqkv;
};
template <class R>
Attention<R> attention_as_kernels_round(const Problem& pr, const std::vector<float>* out_given, bool round_p) {
  const Shape& s = pr.s;
  const int T = s.T, hs = s.hs;
  auto operand = [&](R x) { return round_p ? R(gpt::cpu::bf16_round(float(x))) : x; };
  const R scale = R(1) / std::sqrt(R(hs));
  Attention<R> a;
  a.out.assign(s.out_n(), R(0));
  a.lse.assign(s.rows_n(), R(0));
  if (out_given) a.dqkv.assign(s.qkv_n(), R(0));
  std::vector<R> sc(static_cast<size_t>(T)), p(static_cast<size_t>(T));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < T; ++t) {
        const float* q = &pr.qkv[s.qkv_at(b, t, 0, h)];
        const float* dy = &pr.dout[s.out_at(b, t, h)];
        R m = -INFINITY, sum = 0, D = 0;
        for (int u = 0; u <= t; ++u) {
          const float* k = &pr.qkv[s.qkv_at(b, u, 1, h)];
          R dot = 0;
          for (int i = 0; i < hs; ++i) dot += R(q[i]) * R(k[i]);
          sc[size_t(u)] = dot * scale;
          m = std::max(m, sc[size_t(u)]);
        }
        for (int u = 0; u <= t; ++u) sum += std::exp(sc[size_t(u)] - m);
        const R L = m + std::log(sum);
        a.lse[(size_t(b) * s.NH + h) * T + t] = L;
        for (int u = 0; u <= t; ++u) p[size_t(u)] = std::exp(sc[size_t(u)] - L);
        R* y = &a.out[s.out_at(b, t, h)];
        for (int u = 0; u <= t; ++u) {
          const float* v = &pr.qkv[s.qkv_at(b, u, 2, h)];
          const R pu = operand(p[size_t(u)]);
          for (int i = 0; i < hs; ++i) y[i] += pu * R(v[i]);
        }
        if (!out_given) continue;
        for (int i = 0; i < hs; ++i) D += R(dy[i]) * R((*out_given)[s.out_at(b, t, h) + size_t(i)]);
        R* dq = &a.dqkv[s.qkv_at(b, t, 0, h)];
        for (int u = 0; u <= t; ++u) {
          const float* k = &pr.qkv[s.qkv_at(b, u, 1, h)];
          const float* v = &pr.qkv[s.qkv_at(b, u, 2, h)];
          R* dk = &a.dqkv[s.qkv_at(b, u, 1, h)];
          R* dv = &a.dqkv[s.qkv_at(b, u, 2, h)];
          R dp = 0;
          for (int i = 0; i < hs; ++i) dp += R(dy[i]) * R(v[i]);
          const R pu = operand(p[size_t(u)]), ds = operand(p[size_t(u)] * (dp - D));
          for (int i = 0; i < hs; ++i) {
            dq[i] += scale * ds * R(k[i]);
            dk[i] += scale * ds * R(q[i]);
            dv[i] += pu * R(dy[i]);
          }
        }
      }
  return a;
}

// What a case's kernels must return and, element by element, how far from it they may be
// (the derivation is at the top of the file). out and lse are the truth; dqkv is the
// backward of the inputs the kernels get: the truth for v1, and from `out_given` (the
// output its forward stored) for the others.
struct Expected {
  std::vector<double> out, lse, dqkv;
  std::vector<double> out_bound, lse_bound, dqkv_bound;
};

inline Expected expected(const Problem& pr, const Case& c, const std::vector<float>& out_given) {
  const Shape& s = pr.s;
  const int T = s.T, C = s.C(), hs = s.hs;
  Expected e;
  e.out = pr.out;
  e.lse = pr.lse;
  e.dqkv = c.versions == Versions::V1 ? pr.dqkv : attention_as_kernels_round<double>(pr, &out_given, false).dqkv;

  // The fp32 part of each output's bound: one number per output tensor.
  const double eps = std::ldexp(1.0, -23);
  const double sq_hs = std::sqrt(double(hs)), sq_T = std::sqrt(double(T));
  const double eP = eps * (2 * sq_hs * pr.A + sq_T + 4);
  const double eG = eP * pr.G + eps * (2 * sq_hs + sq_T) * pr.W;
  const double f_y = 8 * eP * pr.vmax, f_lse = 8 * (eP + eps * pr.lmax), f_dq = 8 * pr.scale * pr.kmax * eG,
               f_dk = 8 * pr.scale * pr.qmax * pr.colP * eG, f_dv = 8 * eP * pr.colP * pr.dymax;

  // The tensor cores' rounding of P and dS, element by element (zero elsewhere).
  std::vector<double> p_out(s.out_n(), 0.0), p_dqkv(s.qkv_n(), 0.0);
  const bool rounds_p = c.versions == Versions::TensorCores;
  const double bf = std::ldexp(1.0, -7);  // 2 x bf16's u
  if (rounds_p)
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.NH; ++h)
        for (int t = 0; t < T; ++t) {
          const float* q = &pr.qkv[s.qkv_at(b, t, 0, h)];
          const float* dy = &pr.dout[s.out_at(b, t, h)];
          double D = 0;
          for (int i = 0; i < hs; ++i) D += double(dy[i]) * out_given[s.out_at(b, t, h) + size_t(i)];
          for (int u = 0; u <= t; ++u) {
            const float* k = &pr.qkv[s.qkv_at(b, u, 1, h)];
            const float* v = &pr.qkv[s.qkv_at(b, u, 2, h)];
            const double P = pr.att[((size_t(b) * s.NH + h) * T + t) * T + u];
            double dp = 0;
            for (int i = 0; i < hs; ++i) dp += double(dy[i]) * v[i];
            const double dS = P * std::fabs(dp - D);
            for (int i = 0; i < hs; ++i) {
              p_out[s.out_at(b, t, h) + size_t(i)] += bf * P * std::fabs(v[i]);
              p_dqkv[s.qkv_at(b, t, 0, h) + size_t(i)] += bf * pr.scale * dS * std::fabs(k[i]);
              p_dqkv[s.qkv_at(b, u, 1, h) + size_t(i)] += bf * pr.scale * dS * std::fabs(q[i]);
              p_dqkv[s.qkv_at(b, u, 2, h) + size_t(i)] += bf * P * std::fabs(dy[i]);
            }
          }
        }

  // fp32 part + the tensor cores' part, then bf16's rounding of the stored value.
  auto bound = [&](double want, double fp32, double p_part) {
    const double err = fp32 + p_part;
    return c.bf16 ? err + bf * (std::fabs(want) + err) : err;
  };
  e.out_bound.resize(e.out.size());
  for (size_t i = 0; i < e.out.size(); ++i) e.out_bound[i] = bound(e.out[i], f_y, p_out[i]);
  e.lse_bound.assign(e.lse.size(), f_lse);  // the logsumexp is stored in fp32
  e.dqkv_bound.resize(e.dqkv.size());
  for (size_t i = 0; i < e.dqkv.size(); ++i) {
    const int part = int((i / size_t(C)) % 3);
    e.dqkv_bound[i] = bound(e.dqkv[i], part == 0 ? f_dq : part == 1 ? f_dk : f_dv, p_dqkv[i]);
  }
  return e;
}

// The largest |got - want| / bound over one part of a (B, T, parts * C) tensor (part < 0:
// the whole tensor); a NaN is an infinite ratio, -inf matches -inf. At most 1 passes.
inline double worst_ratio(const std::vector<float>& got, const std::vector<double>& want,
                          const std::vector<double>& bound, int parts = 1, int part = -1, int C = 0) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (part >= 0 && int((i / size_t(C)) % size_t(parts)) != part) continue;
    if (std::isinf(want[i]) && double(got[i]) == want[i]) continue;
    const double err = std::fabs(double(got[i]) - want[i]);
    if (std::isnan(err)) return INFINITY;
    worst = std::max(worst, bound[i] > 0 ? err / bound[i] : err > 0 ? INFINITY : 0.0);
  }
  return worst;
}

}  // namespace gpt::attention_test
