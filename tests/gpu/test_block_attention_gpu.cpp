// One block of a larger attention on the GPU (kernels/cuda/attention/block_attention.cu:
// context parallelism's key blocks) against the CPU's flash attention of the same view
// (kernels/cpu/flash_attention.h) run in double: the ground truth.
//
// Views of B = 2 sequences, NH = 2 heads of hs = 64 (and hs = 40: lanes past the head's
// end), with their positions placed so that a block is on the diagonal (causal inside),
// wholly visible (keys before every query), invisible (keys after every query: out 0,
// lse -inf, no gradient), or partly visible; queries read from a fused (T, 3C) qkv buffer
// (stride 3C) and keys from a packed (T, 2C) one, as stage 10 lays them out. Then a whole
// causal attention computed as two key blocks merged on the GPU, against the reference
// of the whole attention, and its backward from the merged output.
//
// Backward ops accumulate: the gradients start from random values, added to the
// reference's too. Without a GPU the program exits 77 (CTest: skipped).
//
// ---- Tolerances, derived (as in attention_reference.h) ----------------------------------
// eps = 2^-23, a safety factor S = 8, and from the reference in double on the actual inputs:
//   A = max scale sum_i |q_ti k_ui|, W = max sum_i |dO_ti v_ui|, G = max |dP_tu - D_t|,
//   colP = max_u sum_t P_tu, over the visible pairs; vmax, qmax, kmax, dOmax the inputs'.
//   P-weighted sums: relative error eP = eps (2 sqrt(hs) A + sqrt(Tk) + 4)
//   O:  S eP vmax          L: S (eP + eps |L|max)          dv: S eP colP dOmax
//   dP - D: eG = eP G + eps (2 sqrt(hs) + sqrt(Tk)) W
//   dq: S scale kmax eG    dk: S scale qmax colP eG
// plus the start value's rounding, S eps |start| (one addition onto it). A merge adds a few
// roundings of values of size vmax and |L|: S eps (vmax + |L|max) more.
#include "tests/gpu/gpu_test.h"  // Catch2, cuda_ok
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cuda/cuda_ops.h"
#include "tests/gpu/negative_control.h"

namespace {

using gpt::gpu_test::cuda_ok;
constexpr double kEps = 0x1p-23, kSafety = 8;

template <class T>
struct Buffer {  // a device copy of host values, freed on scope exit
  explicit Buffer(const std::vector<T>& host) : n(host.size()) {
    cuda_ok(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
    cuda_ok(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::vector<T> download() const {
    std::vector<T> h(n);
    cuda_ok(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
  T* p = nullptr;
  size_t n;
};

std::vector<float> uniform(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}
std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }
double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) m = std::max(m, double(std::fabs(v)));
  return m;
}

// Every element within `tol` (+ the start value's rounding where `start` is given); a NaN
// never passes; -inf matches -inf. The same bounds must reject the negative control, the
// truth 1 % off (negative_control.h), where it tells (ControlCount).
void check_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want, double tol,
                 const std::vector<float>* start = nullptr) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, worst = 0;
  gpt::gpu_test::ControlCount control;
  double worst_err = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double b = tol + (start ? kSafety * kEps * std::fabs((*start)[i]) : 0.0);
    control.add(want[i], b);  // a masked row's -inf: the constant's test
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    const double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= b)) ++bad;
    if (!(err <= worst_err)) worst_err = err, worst = i;
  }
  INFO(what << ": " << bad << " of " << got.size() << " outside the bound " << tol << "; worst element " << worst
            << ": got " << got[worst] << ", want " << want[worst]);
  CHECK(bad == 0);
  INFO(what << ": the negative control (the truth 1 % off) must be rejected where it tells: " << control.describe());
  CHECK(control.rejected());
}

// The quantities the tolerances are made of, from the reference of one view.
struct Sizes {
  double A = 0, W = 0, G = 0, colP = 0, Lmax = 0;
};

// One view: queries at rows of a (B, Tq, 3C) buffer, keys and values of a (B, Tk, 2C) one.
struct Problem {
  int B = 2, NH = 2, hs = 64, Tq = 24, Tk = 24, q_pos0 = 0, k_pos0 = 0;
  int C() const { return NH * hs; }
};

template <class T>
gpt::cpu::FlashView<T> view(const Problem& p, const T* qkv, const T* kv) {
  const size_t C = size_t(p.C());
  return {qkv, kv, kv + C, 3 * C, 2 * C, C, p.B, p.Tq, p.Tk, p.NH, p.hs, p.q_pos0, p.k_pos0};
}

Sizes sizes(const Problem& p, const std::vector<double>& qkv, const std::vector<double>& kv,
            const std::vector<double>& dout, const std::vector<double>& out, const std::vector<double>& lse) {
  Sizes s;
  const size_t C = size_t(p.C());
  const double scale = 1.0 / std::sqrt(double(p.hs));
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.NH; ++h) {
      std::vector<double> col(size_t(p.Tk), 0.0);
      for (int t = 0; t < p.Tq; ++t) {
        const size_t qo = (size_t(b) * p.Tq + t), hs0 = size_t(h) * p.hs;
        const double L = lse[(size_t(b) * p.NH + h) * p.Tq + t];
        if (std::isfinite(L)) s.Lmax = std::max(s.Lmax, std::fabs(L));
        double D = 0;
        for (int i = 0; i < p.hs; ++i) D += dout[qo * C + hs0 + i] * out[qo * C + hs0 + i];
        for (int u = 0; u < p.Tk; ++u) {
          if (p.k_pos0 + u > p.q_pos0 + t) continue;
          const size_t ko = size_t(b) * p.Tk + u;
          double a = 0, w = 0, sc = 0, dp = 0;
          for (int i = 0; i < p.hs; ++i) {
            const double q = qkv[qo * 3 * C + hs0 + i], k = kv[ko * 2 * C + hs0 + i], v = kv[ko * 2 * C + C + hs0 + i];
            a += std::fabs(q * k), w += std::fabs(dout[qo * C + hs0 + i] * v), sc += q * k;
            dp += dout[qo * C + hs0 + i] * v;
          }
          s.A = std::max(s.A, scale * a), s.W = std::max(s.W, w);
          const double P = std::exp(sc * scale - L);
          s.G = std::max(s.G, std::fabs(dp - D));
          col[size_t(u)] += P;
        }
      }
      for (double c : col) s.colP = std::max(s.colP, c);
    }
  return s;
}

// Forward and backward of one view on the GPU against the reference in double. With
// `merged_out`/`merged_lse` the backward takes those (a whole attention's) instead of
// the view's own.
void check_view(const Problem& p, unsigned seed) {
  INFO("view B=" << p.B << " NH=" << p.NH << " hs=" << p.hs << " Tq=" << p.Tq << " Tk=" << p.Tk << " q_pos0="
                 << p.q_pos0 << " k_pos0=" << p.k_pos0);
  std::mt19937 rng(seed);
  const size_t C = size_t(p.C()), nq = size_t(p.B) * p.Tq, nk = size_t(p.B) * p.Tk;
  const auto qkv = uniform(nq * 3 * C, rng), kv = uniform(nk * 2 * C, rng), dout = uniform(nq * C, rng);
  const auto dq0 = uniform(nq * 3 * C, rng), dkv0 = uniform(nk * 2 * C, rng);
  const size_t nl = size_t(p.B) * p.NH * p.Tq;

  // Reference, double.
  const std::vector<double> qkv_d = widen(qkv), kv_d = widen(kv), dout_d = widen(dout);
  std::vector<double> out(nq * C), lse(nl), dq = widen(dq0), dkv = widen(dkv0);
  gpt::cpu::flash_attention_forward(view(p, qkv_d.data(), kv_d.data()), out.data(), lse.data(), 16, 16);
  gpt::cpu::flash_attention_backward(view(p, qkv_d.data(), kv_d.data()), dq.data(), dkv.data(), dkv.data() + C,
                                     dout_d.data(), out.data(), lse.data(), 16, 16);

  // GPU, fp32.
  Buffer<float> g_qkv(qkv), g_kv(kv), g_dout(dout), g_dq(dq0), g_dkv(dkv0);
  Buffer<float> g_out(std::vector<float>(nq * C, NAN)), g_lse(std::vector<float>(nl, NAN));
  const gpt::cuda::BlockView v = view(p, g_qkv.p, g_kv.p);
  gpt::cuda::attention_block_forward(v, g_out.p, g_lse.p);
  // The backward from the GPU's own out and lse: what stage 10 does.
  gpt::cuda::attention_block_backward(v, g_dq.p, g_dkv.p, g_dkv.p + C, g_dout.p, g_out.p, g_lse.p);
  cuda_ok(cudaDeviceSynchronize(), "block attention");

  const Sizes s = sizes(p, qkv_d, kv_d, dout_d, out, lse);
  const double scale = 1.0 / std::sqrt(double(p.hs));
  const double eP = kEps * (2 * std::sqrt(double(p.hs)) * s.A + std::sqrt(double(p.Tk)) + 4);
  const double eG = eP * s.G + kEps * (2 * std::sqrt(double(p.hs)) + std::sqrt(double(p.Tk))) * s.W;
  const double vmax = max_abs(kv), qmax = max_abs(qkv), dymax = max_abs(dout);
  INFO("A " << s.A << " W " << s.W << " G " << s.G << " colP " << s.colP);
  check_close("out", g_out.download(), out, kSafety * eP * vmax);
  check_close("lse", g_lse.download(), lse, kSafety * (eP + kEps * s.Lmax));
  // dq of the q columns, the k and v columns of qkv untouched (their start values).
  const std::vector<float> got_dq = g_dq.download(), got_dkv = g_dkv.download();
  check_close("dq (q columns; the rest untouched)", got_dq, dq, kSafety * scale * vmax * eG, &dq0);
  std::vector<float> dk_got, dv_got, dk_start, dv_start;
  std::vector<double> dk_want, dv_want;
  for (size_t r = 0; r < nk; ++r)
    for (size_t i = 0; i < C; ++i) {
      dk_got.push_back(got_dkv[r * 2 * C + i]), dv_got.push_back(got_dkv[r * 2 * C + C + i]);
      dk_want.push_back(dkv[r * 2 * C + i]), dv_want.push_back(dkv[r * 2 * C + C + i]);
      dk_start.push_back(dkv0[r * 2 * C + i]), dv_start.push_back(dkv0[r * 2 * C + C + i]);
    }
  check_close("dk", dk_got, dk_want, kSafety * scale * qmax * s.colP * eG, &dk_start);
  check_close("dv", dv_got, dv_want, kSafety * eP * s.colP * dymax, &dv_start);
}

// A whole causal attention of T positions as two key blocks (the first and second half of
// the keys) merged on the GPU, then each block's backward from the merged out and lse;
// against the reference's whole attention.
void check_merged(int hs, unsigned seed) {
  INFO("two merged key blocks, hs=" << hs);
  Problem whole;
  whole.hs = hs, whole.Tq = whole.Tk = 32;
  std::mt19937 rng(seed);
  const size_t C = size_t(whole.C()), n = size_t(whole.B) * whole.Tq, nl = size_t(whole.B) * whole.NH * whole.Tq;
  const auto qkv = uniform(n * 3 * C, rng), dout = uniform(n * C, rng);
  std::vector<float> kv(n * 2 * C);
  for (size_t r = 0; r < n; ++r) std::copy_n(&qkv[r * 3 * C + C], 2 * C, &kv[r * 2 * C]);
  const std::vector<double> qkv_d = widen(qkv), kv_d = widen(kv), dout_d = widen(dout);
  std::vector<double> out(n * C), lse(nl), dq(n * 3 * C, 0.0), dkv(n * 2 * C, 0.0);
  gpt::cpu::flash_attention_forward(view(whole, qkv_d.data(), kv_d.data()), out.data(), lse.data(), 16, 16);
  gpt::cpu::flash_attention_backward(view(whole, qkv_d.data(), kv_d.data()), dq.data(), dkv.data(), dkv.data() + C,
                                     dout_d.data(), out.data(), lse.data(), 16, 16);

  // Per sequence b (blocks are per sequence in stage 10): keys [0, 16) and [16, 32).
  Buffer<float> g_qkv(qkv), g_kv(kv), g_dout(dout);
  Buffer<float> g_out(std::vector<float>(n * C, 0.0f)), g_lse(std::vector<float>(nl, -INFINITY));
  Buffer<float> g_dq(std::vector<float>(n * 3 * C, 0.0f)), g_dkv(std::vector<float>(n * 2 * C, 0.0f));
  Buffer<float> g_bout(std::vector<float>(size_t(whole.Tq) * C)), g_blse(std::vector<float>(size_t(whole.NH) * whole.Tq));
  const int half = whole.Tk / 2;
  for (int b = 0; b < whole.B; ++b)
    for (int k0 : {0, half}) {
      const size_t q_row = size_t(b) * whole.Tq, k_row = size_t(b) * whole.Tk + size_t(k0);
      const gpt::cuda::BlockView v{g_qkv.p + q_row * 3 * C, g_kv.p + k_row * 2 * C, g_kv.p + k_row * 2 * C + C,
                                   3 * C, 2 * C, C, 1, whole.Tq, half, whole.NH, hs, 0, k0};
      gpt::cuda::attention_block_forward(v, g_bout.p, g_blse.p);
      for (int h = 0; h < whole.NH; ++h)
        gpt::cuda::attention_merge(g_out.p + q_row * C + size_t(h) * hs,
                                   g_lse.p + (size_t(b) * whole.NH + h) * whole.Tq, C, g_bout.p + size_t(h) * hs,
                                   g_blse.p + size_t(h) * whole.Tq, C, size_t(whole.Tq), hs);
    }
  for (int b = 0; b < whole.B; ++b)
    for (int k0 : {0, half}) {
      const size_t q_row = size_t(b) * whole.Tq, k_row = size_t(b) * whole.Tk + size_t(k0);
      const gpt::cuda::BlockView v{g_qkv.p + q_row * 3 * C, g_kv.p + k_row * 2 * C, g_kv.p + k_row * 2 * C + C,
                                   3 * C, 2 * C, C, 1, whole.Tq, half, whole.NH, hs, 0, k0};
      gpt::cuda::attention_block_backward(v, g_dq.p + q_row * 3 * C, g_dkv.p + k_row * 2 * C,
                                          g_dkv.p + k_row * 2 * C + C, g_dout.p + q_row * C, g_out.p + q_row * C,
                                          g_lse.p + size_t(b) * whole.NH * whole.Tq);
    }
  cuda_ok(cudaDeviceSynchronize(), "merged blocks");

  const Sizes s = sizes(whole, qkv_d, kv_d, dout_d, out, lse);
  const double scale = 1.0 / std::sqrt(double(hs));
  const double eP = kEps * (2 * std::sqrt(double(hs)) * s.A + std::sqrt(double(whole.Tk)) + 4);
  const double eG = eP * s.G + kEps * (2 * std::sqrt(double(hs)) + std::sqrt(double(whole.Tk))) * s.W;
  const double vmax = max_abs(kv), qmax = max_abs(qkv), merge = kSafety * kEps * (vmax + s.Lmax);
  check_close("merged out", g_out.download(), out, kSafety * eP * vmax + merge);
  check_close("merged lse", g_lse.download(), lse, kSafety * (eP + kEps * s.Lmax) + merge);
  check_close("dqkv (q columns)", g_dq.download(), dq, kSafety * scale * vmax * eG + merge);
  check_close("dkv", g_dkv.download(), dkv,
              kSafety * scale * qmax * s.colP * eG + kSafety * eP * s.colP * max_abs(dout) + merge);
}

}  // namespace

TEST_CASE("gpu attention of one key block (context parallelism)", "[gpu][attention]") {
  unsigned seed = 700;
  for (int hs : {64, 40}) {
    Problem p;
    p.hs = hs;
    p.q_pos0 = 0, p.k_pos0 = 0;  // the diagonal: causal inside
    check_view(p, ++seed);
    p.q_pos0 = 48, p.k_pos0 = 0;  // keys before every query: all visible
    check_view(p, ++seed);
    p.q_pos0 = 24, p.k_pos0 = 12;  // partly visible
    check_view(p, ++seed);
    p.q_pos0 = 0, p.k_pos0 = 48;  // keys after every query: out 0, lse -inf, no gradient
    check_view(p, ++seed);
    p.Tq = 5, p.Tk = 37, p.q_pos0 = 30, p.k_pos0 = 0;  // fewer queries than a warp group
    check_view(p, ++seed);
  }
}

TEST_CASE("gpu attention as two merged key blocks equals the whole attention", "[gpu][attention]") {
  check_merged(64, 800);
  check_merged(40, 801);
}
