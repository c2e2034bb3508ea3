// The blocked CPU GEMM (kernels/cpu/gemm.h) against the plain triple loop and against
// the exact product, and the fp32 linear layer against the fp64 one.
//
// Tolerances come from the standard error bound of a dot product (Higham, Accuracy
// and Stability of Numerical Algorithms, 3.1): summing n products in any order, each
// product rounded once, gives |fl(s) - s| <= gamma_n * sum |a_k b_k| with
// gamma_n = n u / (1 - n u), u = eps / 2. We use n * eps * sum|a_k b_k| for one
// computed result against the exact one (a factor 2 over gamma_n, which also absorbs
// the 1/(1 - n u)), and 2 * n * eps * sum|a_k b_k| for two computed results against
// each other. n = K, plus one when the product is added to an existing C (C0 is one
// more term, |C0| joins the sum). The bound is computed per element, in long double.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"
#include "tests/ops/gradcheck.h"

using gpt::test::Rng;

namespace {

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

struct GemmCase {
  bool ta, tb;
  int M, N, K;
  bool accumulate;
  int pad;  // extra columns in every leading dimension
};

// Runs one case for element type T and checks every element against the bounds.
template <class T>
void check_gemm(const GemmCase& g, Rng& rng) {
  const int M = g.M, N = g.N, K = g.K;
  const int a_rows = g.ta ? K : M, a_cols = g.ta ? M : K;
  const int b_rows = g.tb ? N : K, b_cols = g.tb ? K : N;
  const int lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = N + g.pad;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T sentinel = T(12345.25);

  // Padding of A and B holds NaN: a kernel that reads it poisons its result. The
  // padding of C holds a sentinel that must survive. Without accumulate C starts as
  // NaN (it must be overwritten, not scaled by zero).
  std::vector<T> A(size_t(a_rows) * lda, nan), B(size_t(b_rows) * ldb, nan);
  for (int r = 0; r < a_rows; ++r)
    for (int c = 0; c < a_cols; ++c) A[size_t(r) * lda + c] = T(rng.uniform(-1, 1));
  for (int r = 0; r < b_rows; ++r)
    for (int c = 0; c < b_cols; ++c) B[size_t(r) * ldb + c] = T(rng.uniform(-1, 1));
  std::vector<T> C0(size_t(M) * ldc, sentinel);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) C0[size_t(i) * ldc + j] = g.accumulate ? T(rng.uniform(-1, 1)) : nan;

  auto a = [&](int i, int k) { return g.ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k]; };
  auto b = [&](int k, int j) { return g.tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j]; };

  std::vector<T> C = C0, Cref = C0;
  gpt::cpu::gemm<T>(g.ta, g.tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc, g.accumulate);
  gpt::cpu::gemm_reference<T>(g.ta, g.tb, M, N, K, A.data(), lda, B.data(), ldb, Cref.data(), ldc,
                              g.accumulate);

  const long double eps = std::numeric_limits<T>::epsilon();
  const int n = K + (g.accumulate ? 1 : 0);
  size_t bad_ref = 0, bad_truth = 0, bad_ref_truth = 0, bad_pad = 0, control_rejected = 0;
  double worst = 0;
  std::ostringstream why;
  why.precision(10);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      long double exact = 0, S = 0, last = 0;
      for (int k = 0; k < K; ++k) {
        const long double p = (long double)a(i, k) * (long double)b(k, j);
        exact += p;
        S += std::fabs(p);
        last = p;
      }
      if (g.accumulate) {
        exact += C0[size_t(i) * ldc + j];
        S += std::fabs((long double)C0[size_t(i) * ldc + j]);
      }
      const long double c = C[size_t(i) * ldc + j], cr = Cref[size_t(i) * ldc + j];
      // gemm vs gemm_reference: |C - C_ref| <= 2 n eps sum|a_ik b_kj| (two results).
      const long double tol_ref = 2 * n * eps * S;
      // each vs the exact product: n eps sum|a_ik b_kj| (one result).
      const long double tol_truth = n * eps * S;
      const bool ok_ref = std::fabs(c - cr) <= tol_ref;
      const bool ok_truth = std::fabs(c - exact) <= tol_truth;
      const bool ok_ref_truth = std::fabs(cr - exact) <= tol_truth;
      // Negative control: the exact product without its last term (a loop one short)
      // must be outside the one-result bound somewhere in the matrix.
      control_rejected += !(std::fabs(last) <= tol_truth);
      bad_ref += !ok_ref;
      bad_truth += !ok_truth;
      bad_ref_truth += !ok_ref_truth;
      const double r = double(std::fabs(c - exact) / (tol_truth > 0 ? tol_truth : 1));
      if (!(r <= worst)) worst = r;
      if ((!ok_ref || !ok_truth || !ok_ref_truth) && why.str().empty())  // the first failure
        why << "C[" << i << "," << j << "] gemm " << double(c) << " reference " << double(cr)
            << " exact " << double(exact) << " bound(one result) " << double(tol_truth);
    }
    for (int j = N; j < ldc; ++j) {
      bad_pad += !same_bits(C[size_t(i) * ldc + j], sentinel);
      bad_pad += !same_bits(Cref[size_t(i) * ldc + j], sentinel);
    }
  }
  INFO((sizeof(T) == 4 ? "float" : "double")
       << " trans_a " << g.ta << " trans_b " << g.tb << " M " << M << " N " << N << " K " << K
       << " accumulate " << g.accumulate << " pad " << g.pad << " | worst |C-exact|/bound "
       << worst << " | " << why.str());
  CHECK(bad_ref == 0);
  CHECK(bad_truth == 0);
  CHECK(bad_ref_truth == 0);
  CHECK(bad_pad == 0);
  CHECK(control_rejected > 0);
}

template <class T>
void run_all_variants(int M, int N, int K, Rng& rng) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true})
        for (int pad : {0, 3}) check_gemm<T>({ta, tb, M, N, K, acc, pad}, rng);
}

}  // namespace

TEST_CASE("ops: gemm matches the reference on ragged shapes", "[ops][gemm]") {
  Rng rng(1001);
  const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {127, 129, 255}};
  for (const auto& s : shapes) {
    run_all_variants<float>(s[0], s[1], s[2], rng);
    run_all_variants<double>(s[0], s[1], s[2], rng);
  }
}

TEST_CASE("ops: gemm matches the reference around the micro-kernel tile", "[ops][gemm]") {
  // Every transpose combination with and without accumulate; leading dimensions are
  // padded in the accumulating runs only (the ragged-shape test crosses both).
  Rng rng(1002);
  for (int M : {1, 7, 8, 9, 15, 16, 17})
    for (int N : {1, 15, 16, 17, 31, 32, 33, 48})
      for (int K : {1, 64, 257})
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            for (bool acc : {false, true}) {
              check_gemm<float>({ta, tb, M, N, K, acc, acc ? 2 : 0}, rng);
              check_gemm<double>({ta, tb, M, N, K, acc, acc ? 2 : 0}, rng);
            }
}

TEST_CASE("ops: gemm on a product larger than the cache blocks", "[ops][gemm]") {
  // Several blocks in every dimension (whatever the blocking constants), once per
  // transpose combination.
  // The last shapes are wider than any column block (N > 2048) with a ragged tail.
  Rng rng(1003);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm<float>({ta, tb, 301, 289, 611, true, 1}, rng);
      check_gemm<double>({ta, tb, 157, 263, 517, false, 0}, rng);
      check_gemm<float>({ta, tb, 9, 2085, 300, false, 3}, rng);
      check_gemm<double>({ta, tb, 10, 2070, 270, true, 0}, rng);
    }
}

// bf16 operands (bf16 storage) are widened as the GEMM packs them: C must equal, bit for
// bit, the fp32 GEMM's on widened copies of A and B, for every transpose combination,
// with and without accumulation, on shapes that cut the 8 x 8 transposed blocks of B and
// the tiles raggedly, and on one larger than the cache blocks. Negative control: the fp32
// GEMM with one element of A's copy one bf16 step larger must differ somewhere.
TEST_CASE("ops: gemm of bf16 operands equals the fp32 gemm on their widened values", "[ops][gemm]") {
  using gpt::bf16;
  Rng rng(1004);
  const int shapes[][3] = {{1, 1, 1}, {9, 17, 13}, {17, 33, 65}, {64, 40, 257}, {301, 289, 611}};
  for (const auto& sh : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          const int M = sh[0], N = sh[1], K = sh[2];
          const int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N;
          const size_t na = size_t(ta ? K : M) * lda, nb = size_t(tb ? N : K) * ldb;
          std::vector<bf16> A(na), B(nb);
          std::vector<float> Aw(na), Bw(nb);
          for (size_t i = 0; i < na; ++i)
            A[i].bits = gpt::cpu::bf16_bits(float(rng.normal())), Aw[i] = gpt::cpu::widen(A[i]);
          for (size_t i = 0; i < nb; ++i)
            B[i].bits = gpt::cpu::bf16_bits(float(rng.normal())), Bw[i] = gpt::cpu::widen(B[i]);
          std::vector<float> C0(size_t(M) * ldc);
          for (float& c : C0) c = float(rng.normal());
          std::vector<float> C = C0, Cw = C0, Cc = C0;
          gpt::cpu::gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc, acc);
          gpt::cpu::gemm(ta, tb, M, N, K, Aw.data(), lda, Bw.data(), ldb, Cw.data(), ldc, acc);
          INFO("trans_a " << ta << " trans_b " << tb << " M " << M << " N " << N << " K " << K << " acc " << acc);
          CHECK(std::memcmp(C.data(), Cw.data(), C.size() * sizeof(float)) == 0);
          Aw[0] = gpt::cpu::bf16_to_float(uint16_t(A[0].bits + 1));  // the control: one step off
          gpt::cpu::gemm(ta, tb, M, N, K, Aw.data(), lda, Bw.data(), ldb, Cc.data(), ldc, acc);
          CHECK(std::memcmp(C.data(), Cc.data(), C.size() * sizeof(float)) != 0);
        }
}

// The threads share a product by rows or by columns (gemm.h's GemmSplit), and each must
// give, to the bit, what one thread gives: on 3 threads (1 and 3 do not divide the panels
// alike), either split forced and as gemm_split chooses, on one shape it splits by
// columns and one by rows. The column shape's 3 slices are each wider than a column block
// (2048) and start inside one, its last panel is ragged, and both shapes have two depth
// blocks; fp32 and bf16 operands, every transpose, with and without accumulating. The
// reference is one thread's result; that it is right is the tests above. Control: the
// column split with its depth blocks summed in the other order must differ (planted here
// as the product of the two halves of K added in reverse).
TEST_CASE("ops: gemm gives one thread's bits on 3 threads, split by rows or by columns", "[ops][gemm][threads]") {
  using gpt::bf16;
  using gpt::cpu::GemmSplit;
  const int saved_threads = omp_get_max_threads();
  Rng rng(1005);
  struct Shape {
    int M, N, K;
    GemmSplit chosen;
  };
  const Shape shapes[] = {{20, 6500, 300, GemmSplit::columns}, {700, 100, 300, GemmSplit::rows}};
  for (const Shape& sh : shapes) {
    const int M = sh.M, N = sh.N, K = sh.K;
    REQUIRE(gpt::cpu::gemm_split<float>(M, N, 3) == sh.chosen);
    REQUIRE(double(M) * N * K >= gpt::cpu::kParallelMinMacs);  // the team does share it
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          const int lda = ta ? M : K, ldb = tb ? K : N;
          std::vector<float> A(size_t(M) * K), B(size_t(K) * N), C0(size_t(M) * N);
          std::vector<bf16> Ah(A.size()), Bh(B.size());
          for (size_t i = 0; i < A.size(); ++i) A[i] = float(rng.normal()), Ah[i].bits = gpt::cpu::bf16_bits(A[i]);
          for (size_t i = 0; i < B.size(); ++i) B[i] = float(rng.normal()), Bh[i].bits = gpt::cpu::bf16_bits(B[i]);
          for (float& c : C0) c = float(rng.normal());
          // C (+)= op(A) op(B) on `threads` threads, split as `split`, fp32 or bf16 operands.
          auto product = [&](int threads, GemmSplit split, bool bf16_operands) {
            std::vector<float> C = C0;
            omp_set_num_threads(threads);
            gpt::cpu::force_gemm_split(split);
            if (bf16_operands)
              gpt::cpu::gemm(ta, tb, M, N, K, Ah.data(), lda, Bh.data(), ldb, C.data(), N, acc);
            else
              gpt::cpu::gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), N, acc);
            gpt::cpu::force_gemm_split(GemmSplit::automatic);
            omp_set_num_threads(saved_threads);
            return C;
          };
          auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
            return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
          };
          INFO("M " << M << " N " << N << " K " << K << " trans_a " << ta << " trans_b " << tb << " acc " << acc);
          for (bool bf16_operands : {false, true}) {
            INFO((bf16_operands ? "bf16" : "fp32") << " operands");
            const std::vector<float> one = product(1, GemmSplit::automatic, bf16_operands);
            CHECK(same(product(3, GemmSplit::automatic, bf16_operands), one));
            CHECK(same(product(3, GemmSplit::rows, bf16_operands), one));
            CHECK(same(product(3, GemmSplit::columns, bf16_operands), one));
          }
          // The control: the two halves of K in the other order (C0 + second) + first, on
          // 3 threads split by columns.
          const int half = K / 2;
          std::vector<float> reversed = C0;
          omp_set_num_threads(3);
          gpt::cpu::force_gemm_split(GemmSplit::columns);
          const float* A_second = ta ? A.data() + size_t(half) * lda : A.data() + half;
          const float* B_second = tb ? B.data() + half : B.data() + size_t(half) * ldb;
          gpt::cpu::gemm(ta, tb, M, N, K - half, A_second, lda, B_second, ldb, reversed.data(), N, acc);
          gpt::cpu::gemm(ta, tb, M, N, half, A.data(), lda, B.data(), ldb, reversed.data(), N, true);
          gpt::cpu::force_gemm_split(GemmSplit::automatic);
          omp_set_num_threads(saved_threads);
          CHECK(!same(reversed, product(1, GemmSplit::automatic, false)));
        }
  }
}

// The fp32 linear layer against the fp64 one on the same (fp32-representable)
// inputs: the fp64 result is the ground truth to ~1e-13, so the fp32 error must be
// within the one-result bound n * eps_float * sum|terms| of each output element,
// with n the number of terms summed: C (+1 for the bias) forward, OC for dinp, N for
// dw and dbias.
TEST_CASE("ops: matmul float vs double within the dot-product bound", "[ops][gemm]") {
  using gpt::Device;
  const int shape = GENERATE(0, 1);
  const int N = shape == 0 ? 64 : 37, C = shape == 0 ? 96 : 53, OC = shape == 0 ? 288 : 71;
  const bool with_bias = GENERATE(true, false);
  Rng rng(uint64_t(1100 + 2 * shape + with_bias));
  auto rnd = [&](size_t n, double s) {
    std::vector<float> f(n);
    for (auto& x : f) x = float(s * rng.normal());
    return f;
  };
  const std::vector<float> inp_f = rnd(size_t(N) * C, 1.0), w_f = rnd(size_t(OC) * C, 0.1),
                           bias_f = rnd(size_t(OC), 0.5), dout_f = rnd(size_t(N) * OC, 1.0);
  const std::vector<double> inp_d(inp_f.begin(), inp_f.end()), w_d(w_f.begin(), w_f.end()),
      bias_d(bias_f.begin(), bias_f.end()), dout_d(dout_f.begin(), dout_f.end());

  std::vector<float> out_f(size_t(N) * OC), dinp_f(inp_f.size(), 0.f), dw_f(w_f.size(), 0.f),
      dbias_f(bias_f.size(), 0.f);
  std::vector<double> out_d(out_f.size()), dinp_d(inp_d.size(), 0.0), dw_d(w_d.size(), 0.0),
      dbias_d(bias_d.size(), 0.0);
  gpt::ops::matmul_forward(Device::CPU, out_f.data(), inp_f.data(), w_f.data(),
                           with_bias ? bias_f.data() : nullptr, N, C, OC);
  gpt::ops::matmul_forward(Device::CPU, out_d.data(), inp_d.data(), w_d.data(),
                           with_bias ? bias_d.data() : nullptr, N, C, OC);
  gpt::ops::matmul_backward(Device::CPU, dinp_f.data(), dw_f.data(),
                            with_bias ? dbias_f.data() : nullptr, dout_f.data(), inp_f.data(),
                            w_f.data(), N, C, OC);
  gpt::ops::matmul_backward(Device::CPU, dinp_d.data(), dw_d.data(),
                            with_bias ? dbias_d.data() : nullptr, dout_d.data(), inp_d.data(),
                            w_d.data(), N, C, OC);

  const double eps = std::numeric_limits<float>::epsilon();
  // Generic check: got[idx] vs truth[idx] within n * eps * S(idx). Negative control: got
  // 1e-3 off (a scale error far below any result's size) must be outside it somewhere.
  auto check = [&](const char* what, const auto& got, const std::vector<double>& truth, int n,
                   auto&& S) {
    size_t bad = 0, worst_i = 0, control_rejected = 0;
    double worst = 0;
    for (size_t i = 0; i < truth.size(); ++i) {
      const double tol = n * eps * S(i);
      const double r = std::fabs(double(got[i]) - truth[i]) / tol;
      bad += !(r <= 1);
      control_rejected += !(std::fabs(double(got[i]) * (1 + 1e-3) - truth[i]) <= tol);
      if (!(r <= worst)) worst = r, worst_i = i;
    }
    CHECK(control_rejected > 0);
    INFO(what << " N " << N << " C " << C << " OC " << OC << " bias " << with_bias
              << ": worst element " << worst_i << " float " << double(got[worst_i]) << " double "
              << truth[worst_i] << " |diff|/bound " << worst);
    CHECK(bad == 0);
  };
  check("forward out", out_f, out_d, C + (with_bias ? 1 : 0), [&](size_t idx) {
    const size_t i = idx / OC, o = idx % OC;
    double s = with_bias ? std::fabs(bias_d[o]) : 0.0;
    for (int c = 0; c < C; ++c) s += std::fabs(inp_d[i * C + c] * w_d[o * C + c]);
    return s;
  });
  check("backward dinp", dinp_f, dinp_d, OC, [&](size_t idx) {
    const size_t i = idx / C, c = idx % C;
    double s = 0;
    for (int o = 0; o < OC; ++o) s += std::fabs(dout_d[i * OC + o] * w_d[o * C + c]);
    return s;
  });
  check("backward dw", dw_f, dw_d, N, [&](size_t idx) {
    const size_t o = idx / C, c = idx % C;
    double s = 0;
    for (int i = 0; i < N; ++i) s += std::fabs(dout_d[i * OC + o] * inp_d[i * C + c]);
    return s;
  });
  if (with_bias)
    check("backward dbias", dbias_f, dbias_d, N, [&](size_t o) {
      double s = 0;
      for (int i = 0; i < N; ++i) s += std::fabs(dout_d[i * OC + o]);
      return s;
    });
}

// An empty dimension. OC = 0: dinp, the empty sum dout . w, is written as zeros over
// whatever it held (kernels/ops.h: written, not added), dw is left as it was, and dbias
// (no columns) is nothing. N = 0 or C = 0: nothing to write or add; every buffer keeps its
// values. The GPU's twin is in tests/gpu/test_gemm_gpu.cpp.
TEST_CASE("ops: matmul backward with an empty dimension", "[ops][gemm]") {
  const int N = 3, C = 4;
  const std::vector<float> inp(size_t(N) * C, 0.5f);
  std::vector<float> dinp(size_t(N) * C, 7.0f), dw(1, 9.0f);
  gpt::ops::matmul_backward(gpt::Device::CPU, dinp.data(), dw.data(), static_cast<float*>(nullptr),
                            static_cast<const float*>(nullptr), inp.data(), static_cast<const float*>(nullptr),
                            N, C, /*OC=*/0);
  CHECK(dinp == std::vector<float>(dinp.size(), 0.0f));
  CHECK(dw[0] == 9.0f);

  std::vector<float> dinp_kept(size_t(N) * C, 7.0f), dw_kept(size_t(2) * C, 9.0f), dbias_kept(2, 5.0f);
  gpt::ops::matmul_backward(gpt::Device::CPU, dinp_kept.data(), dw_kept.data(), dbias_kept.data(),
                            static_cast<const float*>(nullptr), inp.data(), static_cast<const float*>(nullptr),
                            /*N=*/0, C, 2);
  CHECK(dinp_kept == std::vector<float>(dinp_kept.size(), 7.0f));
  CHECK(dw_kept == std::vector<float>(dw_kept.size(), 9.0f));
  CHECK(dbias_kept == std::vector<float>(2, 5.0f));
}
