// The GEMM tests' host side, without CUDA: the problems (inputs from fixed seeds, the
// ground truth in double) and the tolerances each output element is held to. Shared by
// test_gemm_gpu.cpp (the GPU against them) and test_gemm_tolerance.cpp (the bounds
// themselves, on the CPU: they hold for every rounding the GPU was seen to do, they
// reject one more, and they reject the negative controls: a product without its last k
// step, and one 1 % too large).
//
// ---- Tolerances, derived -------------------------------------------------------------
// Per output element (m, n). eps = 2^-23, fp32's ulp of 1 (twice its unit roundoff, so
// adders that truncate instead of rounding, as tensor cores may, are covered too). The
// size of what the GPU adds up is
//   S = sum_k |op(A)[m,k] op(B)[k,n]| + |bias[n]| + |C_old[m,n]| (the last when accumulating).
// Products of bf16 values are exact in fp32; fp32 products are off by at most eps/2 of
// themselves. Each of the K + 2 additions (K products, the bias, the old C) is off by at
// most eps |partial sum|. With inputs of random sign these errors add like a random
// walk, so the sum is off by about sqrt(K + 2) eps S; and since partial sums of random-
// sign terms are about sqrt(K) times smaller than S, even errors of one sign stay below
// sqrt(K) eps S. A safety factor of 8 covers the constants:
//   pre-activation:  e_acc = 8 sqrt(K + 2) eps S
//   C, fp32 out:     tol_C = e_acc
//   C, bf16 out:     tol_C = e_acc + 2^-8 (|C_ref| + e_acc)
//                    (bf16 keeps 8 significant bits: rounding to nearest moves a value x
//                    by at most 2^-8 |x|, and the value rounded is within e_acc of C_ref)
//   cuBLAS, bf16 out, accumulating or with a bias: + 2^-8 (P + e_acc)
//                    (cuBLASLt's epilogue into a bf16 D rounds one partial result to bf16
//                    before it adds the rest, and which one depends on the kernel it picks.
//                    Seen on an H200, every failing element reproduced bit for bit on the
//                    CPU: C = AB + bias as round(round(AB) + bias); C += AB + bias as
//                    round(round(AB + bias) + C_old), with other shapes as round(round(AB +
//                    C_old) + bias). So P is the largest partial result it could round:
//                    |AB| when it adds one thing, and with both the largest of |AB|,
//                    |AB + C_old|, |AB + bias| and |C_old + bias|.)
// GELU, gelu_out = gelu(pre-activation). The GELU's input is within tol_C of C_ref (v1..v5
// apply it to the fp32 value, within e_acc; cuBLASLt's bf16 fusion may apply it to the
// bf16-rounded C). With |gelu''| <= 0.8 (its maximum, at x = 0), Taylor gives
//   propagated:       (|gelu'(C_ref)| + 0.4 tol_C) tol_C
//   evaluation:       8 eps |C_ref|   (fp32 tanhf is within 2 ulps and u(x) within a few
//                     roundings, so 0.5 x (1 + tanh u) is off by about 2^-22 |x|: margin 4;
//                     |gelu(x)| <= |x|)
//   cuBLAS, bf16 out: + 2^-11 |C_ref| (cuBLASLt's fused GELU uses an approximate tanh,
//                     about 2^-11 off (gemm_cublas.cu), times 0.5 |x|: margin 2)
//   bf16 out:         + 2^-8 (|gelu(C_ref)| + all of the above)
// The matmul ops use the same bounds with K = C (out), OC (dinp) and N (dW, dbias); their
// S comes from running the double reference on the absolute values of its inputs (the
// product of |.|s is exactly sum |a b|).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm.h"

namespace gpt::gemm_test {

// ---- tolerances (derived above) -------------------------------------------------------


inline constexpr double kEps = 0x1p-23;          // fp32's ulp of 1
inline constexpr double kSafety = 8;
inline constexpr double kBf16Rounding = 0x1p-8;  // relative error of rounding to nearest bf16
inline constexpr double kGeluCurvature = 0.4;    // max |gelu''| / 2
inline constexpr double kCublasGeluTanh = 0x1p-11;

inline double gelu(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}
inline double gelu_grad(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const double th = std::tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

// tol_C: an output that sums K products of total size S, stored in fp32 or bf16.
inline double output_tolerance(double want, double S, int K, bool out_bf16) {
  const double e_acc = kSafety * std::sqrt(K + 2.0) * kEps * S;
  return e_acc + (out_bf16 ? kBf16Rounding * (std::fabs(want) + e_acc) : 0.0);
}

// The cuBLAS term above: one more bf16 rounding of the largest partial result P that
// cuBLASLt's epilogue may round (old_c and bias 0 where the call adds none).
inline double cublas_epilogue_rounding(double product, double old_c, double bias, bool accumulate, bool has_bias,
                                double S, int K) {
  if (!accumulate && !has_bias) return 0.0;
  const double e_acc = kSafety * std::sqrt(K + 2.0) * kEps * S;
  double P = std::fabs(product);
  if (accumulate && has_bias)
    P = std::max({P, std::fabs(product + old_c), std::fabs(product + bias), std::fabs(old_c + bias)});
  return kBf16Rounding * (P + e_acc);
}

// gelu(pre) where pre is known within pre_tol.
inline double gelu_tolerance(double pre, double pre_tol, bool out_bf16, bool approximate_tanh) {
  double tol = (std::fabs(gelu_grad(pre)) + kGeluCurvature * pre_tol) * pre_tol + kSafety * kEps * std::fabs(pre);
  if (approximate_tanh) tol += kCublasGeluTanh * std::fabs(pre);
  if (out_bf16) tol += kBf16Rounding * (std::fabs(gelu(pre)) + tol);
  return tol;
}

// ---- problems ----------------------------------------------------------------------------

inline constexpr float kSentinel = 7168.0f;  // 7 * 2^10: exact in bf16, never a product here

inline std::vector<float> uniform(size_t n, std::mt19937& rng, bool round_bf16) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = round_bf16 ? gpt::cpu::bf16_round(uni(rng)) : uni(rng);
  return v;
}

inline int round_up8(int n) { return (n + 7) / 8 * 8; }

// One product's inputs as stored (padding included) and its ground truth.
struct GemmProblem {
  bool trans_a = false, trans_b = false;
  int M = 0, N = 0, K = 0;
  int lda = 0, ldb = 0, ldc = 0;
  std::vector<float> A, B, bias, C_old;  // C_old: M x ldc, the padding kSentinel
  std::vector<double> dot, abs_dot;      // M x N: sum_k op(A) op(B), and sum_k |op(A) op(B)|
};

// A stored rows x cols with row stride ld: uniform values, NaN in the padding.
inline std::vector<float> stored_matrix(int rows, int cols, int ld, std::mt19937& rng, bool round_bf16) {
  std::vector<float> v = uniform(size_t(rows) * ld, rng, round_bf16);
  for (int r = 0; r < rows; ++r)
    for (int c = cols; c < ld; ++c) v[size_t(r) * ld + c] = NAN;
  return v;
}

inline GemmProblem make_gemm_problem(bool trans_a, bool trans_b, int M, int N, int K, bool in_bf16, bool out_bf16,
                              bool padded, unsigned seed) {
  GemmProblem p;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.M = M;
  p.N = N;
  p.K = K;
  const int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  p.lda = padded ? round_up8(a_cols) : a_cols;
  p.ldb = padded ? round_up8(b_cols) : b_cols;
  p.ldc = padded ? round_up8(N) : N;
  std::mt19937 rng(seed);
  p.A = stored_matrix(a_rows, a_cols, p.lda, rng, in_bf16);
  p.B = stored_matrix(b_rows, b_cols, p.ldb, rng, in_bf16);
  p.bias = uniform(size_t(N), rng, in_bf16);
  p.C_old = uniform(size_t(M) * p.ldc, rng, out_bf16);
  for (int m = 0; m < M; ++m)
    for (int n = N; n < p.ldc; ++n) p.C_old[size_t(m) * p.ldc + n] = kSentinel;

  // The reference: the CPU GEMM in double on the same values (padding zeroed: it is not
  // part of the matrices), and on their absolute values for S.
  std::vector<double> A(p.A.size()), B(p.B.size()), absA(p.A.size()), absB(p.B.size());
  for (size_t i = 0; i < A.size(); ++i) A[i] = std::isnan(p.A[i]) ? 0.0 : p.A[i], absA[i] = std::fabs(A[i]);
  for (size_t i = 0; i < B.size(); ++i) B[i] = std::isnan(p.B[i]) ? 0.0 : p.B[i], absB[i] = std::fabs(B[i]);
  p.dot.assign(size_t(M) * N, 0.0);
  p.abs_dot.assign(size_t(M) * N, 0.0);
  gpt::cpu::gemm(trans_a, trans_b, M, N, K, A.data(), p.lda, B.data(), p.ldb, p.dot.data(), N, false);
  gpt::cpu::gemm(trans_a, trans_b, M, N, K, absA.data(), p.lda, absB.data(), p.ldb, p.abs_dot.data(), N, false);
  return p;
}

// op(A)[m, K-1] op(B)[K-1, n]: the product's last k step, what a kernel that mishandles
// the tail of K (the last, partial tile) would leave out. The tests' negative control.
inline double last_k_term(const GemmProblem& p, int m, int n) {
  const int k = p.K - 1;
  const double a = p.trans_a ? p.A[size_t(k) * p.lda + m] : p.A[size_t(m) * p.lda + k];
  const double b = p.trans_b ? p.B[size_t(n) * p.ldb + k] : p.B[size_t(k) * p.ldb + n];
  return a * b;
}

// One element of C = AB (+ C_old) (+ bias) in double: what it must be and, by the
// bounds above, how far a result may be from it. old_c and bias are 0 where the call
// does not add them.
struct ElementRef {
  double dot = 0, abs_dot = 0;  // sum_k op(A) op(B), and sum_k |op(A) op(B)|
  double old_c = 0, bias = 0;
  double last_term = 0;         // last_k_term: the negative control leaves it out
  bool accumulate = false, has_bias = false;

  double want() const { return old_c + dot + bias; }
  double without_last_k() const { return want() - last_term; }
  double S() const { return std::fabs(old_c) + abs_dot + std::fabs(bias); }
  // tol_C, with the cuBLAS term when `cublas` and the output is bf16.
  double tolerance(int K, bool out_bf16, bool cublas) const {
    double t = output_tolerance(want(), S(), K, out_bf16);
    if (cublas && out_bf16) t += cublas_epilogue_rounding(dot, old_c, bias, accumulate, has_bias, S(), K);
    return t;
  }
};
inline ElementRef element_ref(const GemmProblem& p, int m, int n, bool accumulate, bool has_bias) {
  ElementRef r;
  r.dot = p.dot[size_t(m) * p.N + n];
  r.abs_dot = p.abs_dot[size_t(m) * p.N + n];
  r.old_c = accumulate ? p.C_old[size_t(m) * p.ldc + n] : 0.0;
  r.bias = has_bias ? p.bias[size_t(n)] : 0.0;
  r.last_term = last_k_term(p, m, n);
  r.accumulate = accumulate;
  r.has_bias = has_bias;
  return r;
}

// The ladder's shapes, in the order (and with the seeds) the GPU test runs them: every
// combination of these sizes in each of the four layouts, then 256 x 384 x 192.
inline constexpr int kLadderSizes[] = {1, 7, 65, 129, 200};
template <class F>  // f(trans_a, trans_b, M, N, K, seed)
void for_each_ladder_shape(F f) {
  unsigned seed = 1;
  for (int layout = 0; layout < 4; ++layout) {
    const bool trans_a = layout & 1, trans_b = layout & 2;
    for (int M : kLadderSizes)
      for (int N : kLadderSizes)
        for (int K : kLadderSizes) f(trans_a, trans_b, M, N, K, seed++);
    f(trans_a, trans_b, 256, 384, 192, seed++);
  }
}

}  // namespace gpt::gemm_test
