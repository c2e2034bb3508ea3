// Flash attention (Dao et al. 2022; the loop order of Dao 2023), causal, on the CPU.
// The reference (attention.cpp) writes the whole T x T probability matrix of every
// head; this version walks it in Br x Bc tiles and never stores it.
//
// Notation, one head, one query row t: s_u = q_t . k_u / sqrt(hs) for the visible keys
// u <= t, y_t = sum_u softmax(s)_u v_u.
//
// Forward: the online softmax. After the keys of a set U have been seen, a row keeps
//     m = max_{u in U} s_u,   l = sum_{u in U} e^{s_u - m},   o = sum_{u in U} e^{s_u - m} v_u.
// A new tile J of keys updates them with
//     m' = max(m, max_{u in J} s_u),   a = e^{m - m'}
//     l' = a l + sum_{u in J} e^{s_u - m'},   o' = a o + sum_{u in J} e^{s_u - m'} v_u
// which keeps the three definitions true for U + J, because e^{s_u - m} a = e^{s_u - m'}:
// the old terms are rescaled to the new reference point, nothing is approximated. After
// the last tile, o / l = sum_u e^{s_u - m} v_u / sum_u e^{s_u - m} = y_t, whatever m is
// (it cancels), so the result is the softmax exactly; only the order of the roundings
// differs from the reference. Every exponent is <= 0 (no overflow) and the largest term
// is e^0 = 1, so l >= 1 (no underflow of the normaliser). The row saves
//     L_t = m + log l = log sum_{u<=t} e^{s_u}     (the logsumexp), one number per row.
//
// Backward, from L instead of stored probabilities: P_tu = e^{s_tu - L_t} recomputes the
// softmax exactly (one subtraction and one exp per score). With dO the upstream gradient:
//     dV_u  = sum_t P_tu dO_t
//     dP_tu = dO_t . v_u
//     dS_tu = P_tu (dP_tu - D_t),   D_t = sum_u P_tu dP_tu = dO_t . (sum_u P_tu v_u) = dO_t . O_t
//     dQ_t  = sum_u dS_tu k_u / sqrt(hs),   dK_u = sum_t dS_tu q_t / sqrt(hs)
// (dS is the softmax Jacobian applied to dP). D_t needs only the row's output and its
// gradient, so no whole row of P is ever needed at once.
//
// Causal tiles: a tile whose first key comes after its last query is entirely masked and
// is skipped (never loaded, never computed); of nq x nk tiles about half are visited.
// Inside the diagonal tiles each row computes only its keys u <= t. The mask compares
// positions, so a block of keys from elsewhere in the sequence (q_pos0 != k_pos0, see
// FlashView) is masked by the same rule: with delta = q_pos0 - k_pos0, row t sees the
// keys u <= t + delta.
//
// Merging two partial attentions of the same row over disjoint key sets A and B:
// with L_A, O_A and L_B, O_B their logsumexps and outputs,
//     e^{L} = e^{L_A} + e^{L_B}   and   O = (e^{L_A} O_A + e^{L_B} O_B) / e^{L},
// because O_A = sum_{u in A} e^{s_u - L_A} v_u (likewise B). The backward of a block
// needs only the full row's L and O (see flash_attention.h).
//
// Arithmetic: dot products and the softmax's sums in fixed lanes (lanes.h), which the
// compiler vectorises in an order that does not depend on the data's address; the scores'
// exps are exp_t, the vectorisable exp for float (fast_exp.h) and the library's for double.
//
// Threads: OpenMP over (b, head), so one thread owns a head's whole backward. It runs key
// tiles outer: a tile's dK and dV have accumulators of their own, and every row's dQ has
// one for the whole head, which receives the row's key tiles in increasing order, the
// order a query-tiles-outer pass would add them in. (A GPU kernel, whose blocks own
// tiles, not heads, needs a second pass for dQ to stay deterministic; here each score is
// computed once.) Every element of dqkv is summed by one thread in a fixed order, so the
// result does not depend on the thread count.
#include "kernels/cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

namespace {
int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Copies keys and values j0 .. j1-1 of one head (rows `stride` apart) into the tiles
// Kj and Vj, row c = u - j0 at c * hs.
template <class T>
void load_kv_tile(T* Kj, T* Vj, const T* kb, const T* vb, size_t stride, int j0, int j1, int hs) {
  for (int u = j0; u < j1; ++u)
    for (int i = 0; i < hs; ++i) {
      Kj[size_t(u - j0) * hs + i] = kb[size_t(u) * stride + i];
      Vj[size_t(u - j0) * hs + i] = vb[size_t(u) * stride + i];
    }
}
void check_tiles(const char* fn, int Br, int Bc) {
  if (Br < 1 || Bc < 1)
    throw std::invalid_argument(std::string(fn) + ": tile sizes must be positive (Br=" +
                                std::to_string(Br) + " Bc=" + std::to_string(Bc) + ")");
}
}  // namespace

template <class T>
FlashCounts flash_attention_forward(const FlashView<T>& a, T* out, T* lse, int Br, int Bc) {
  check_tiles("flash_attention_forward", Br, Bc);
  const int hs = a.hs, Tq = a.Tq, Tk = a.Tk, NH = a.NH;
  const int delta = a.q_pos0 - a.k_pos0;  // row t sees keys u <= t + delta
  const T scale = T(1) / std::sqrt(T(hs));
  const int nq = ceil_div(Tq, Br), nk = ceil_div(Tk, Bc);
  int64_t visited = 0, skipped = 0, scores = 0;
#pragma omp parallel reduction(+ : visited, skipped, scores) \
    if (parallel : worth_threads_macs(double(a.B) * NH * Tq * Tk * hs))
  {
    // One thread's "shared memory": a key tile and a value tile, the score tile, and
    // the running state of the query tile (accumulator O, max m, sum l).
    std::vector<T> Kj(size_t(Bc) * hs), Vj(size_t(Bc) * hs), S(size_t(Br) * Bc);
    std::vector<T> O(size_t(Br) * hs), m(static_cast<size_t>(Br)), l(static_cast<size_t>(Br));
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < a.B; ++b)
      for (int h = 0; h < NH; ++h) {
        const T* qb = a.q + size_t(b) * Tq * a.q_stride + size_t(h) * hs;
        const T* kb = a.k + size_t(b) * Tk * a.kv_stride + size_t(h) * hs;
        const T* vb = a.v + size_t(b) * Tk * a.kv_stride + size_t(h) * hs;
        T* L = lse + (size_t(b) * NH + h) * Tq;
        for (int qi = 0; qi < nq; ++qi) {
          const int i0 = qi * Br, i1 = std::min(i0 + Br, Tq), rows = i1 - i0;
          std::fill(m.begin(), m.end(), T(-INFINITY));
          std::fill(l.begin(), l.end(), T(0));
          std::fill(O.begin(), O.end(), T(0));
          for (int kj = 0; kj < nk; ++kj) {
            const int j0 = kj * Bc, j1 = std::min(j0 + Bc, Tk);
            if (j0 > i1 - 1 + delta) {  // first key after the last query: this tile and the rest are masked
              skipped += nk - kj;
              break;
            }
            ++visited;
            load_kv_tile(Kj.data(), Vj.data(), kb, vb, a.kv_stride, j0, j1, hs);
            for (int r = 0; r < rows; ++r) {
              const int t = i0 + r;
              const int ju = std::min(j1, t + delta + 1);  // row t sees keys j0 .. ju-1 of this tile
              if (ju <= j0) continue;                      // a diagonal tile's rows above its first key
              const int cols = ju - j0;
              const T* q = qb + size_t(t) * a.q_stride;
              T* s = S.data() + size_t(r) * Bc;
              T mx = m[size_t(r)];
              for (int c = 0; c < cols; ++c) {
                s[c] = dot_lanes(q, Kj.data() + size_t(c) * hs, hs) * scale;
                mx = std::max(mx, s[c]);
              }
              scores += cols;
              const T e = std::exp(m[size_t(r)] - mx);  // e^{m - m'}: 0 on the row's first tile (m = -inf)
              for (int c = 0; c < cols; ++c) s[c] = exp_t(s[c] - mx);
              l[size_t(r)] = e * l[size_t(r)] + lane_sum<T>(cols, [=](int c) { return s[c]; });
              T* o = O.data() + size_t(r) * hs;
              for (int i = 0; i < hs; ++i) o[i] *= e;
              for (int c = 0; c < cols; ++c) {
                const T* v = Vj.data() + size_t(c) * hs;
                for (int i = 0; i < hs; ++i) o[i] += s[c] * v[i];
              }
              m[size_t(r)] = mx;
            }
          }
          for (int r = 0; r < rows; ++r) {
            const int t = i0 + r;
            T* y = out + (size_t(b) * Tq + t) * a.out_stride + size_t(h) * hs;
            const T* o = O.data() + size_t(r) * hs;
            if (l[size_t(r)] == T(0)) {  // no visible key in this block
              for (int i = 0; i < hs; ++i) y[i] = 0;
              L[t] = T(-INFINITY);
              continue;
            }
            for (int i = 0; i < hs; ++i) y[i] = o[i] / l[size_t(r)];
            L[t] = m[size_t(r)] + std::log(l[size_t(r)]);
          }
        }
      }
  }
  return {visited, skipped, scores};
}

template <class T>
FlashCounts flash_attention_backward(const FlashView<T>& a, T* dq, T* dk, T* dv, const T* dout,
                                     const T* out, const T* lse, int Br, int Bc) {
  check_tiles("flash_attention_backward", Br, Bc);
  const int hs = a.hs, Tq = a.Tq, Tk = a.Tk, NH = a.NH;
  const int delta = a.q_pos0 - a.k_pos0;
  const T scale = T(1) / std::sqrt(T(hs));
  const int nq = ceil_div(Tq, Br), nk = ceil_div(Tk, Bc);
  int64_t visited = 0, skipped = 0, scores = 0;
#pragma omp parallel reduction(+ : visited, skipped, scores) \
    if (parallel : worth_threads_macs(double(a.B) * NH * Tq * Tk * hs))
  {
    std::vector<T> Kj(size_t(Bc) * hs), Vj(size_t(Bc) * hs);
    std::vector<T> dK(size_t(Bc) * hs), dV(size_t(Bc) * hs), dQ(size_t(Tq) * hs),
        D(static_cast<size_t>(Tq));
    std::vector<T> P(static_cast<size_t>(Bc)), dS(static_cast<size_t>(Bc));  // one row of the tile
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < a.B; ++b)
      for (int h = 0; h < NH; ++h) {
        const T* qb = a.q + size_t(b) * Tq * a.q_stride + size_t(h) * hs;
        const T* kb = a.k + size_t(b) * Tk * a.kv_stride + size_t(h) * hs;
        const T* vb = a.v + size_t(b) * Tk * a.kv_stride + size_t(h) * hs;
        T* dqb = dq + size_t(b) * Tq * a.q_stride + size_t(h) * hs;
        T* dkb = dk + size_t(b) * Tk * a.kv_stride + size_t(h) * hs;
        T* dvb = dv + size_t(b) * Tk * a.kv_stride + size_t(h) * hs;
        const T* L = lse + (size_t(b) * NH + h) * Tq;
        auto dO = [&](int t) { return dout + (size_t(b) * Tq + t) * a.out_stride + size_t(h) * hs; };
        // Row t's scores on the loaded key tile, columns 0 .. cols-1: recomputes s, then
        // P = e^{s - L_t} (for dV) and dP = dO_t . v_u, and leaves in dS the score's
        // gradient P (dP - D_t) / sqrt(hs) (the last factor: the chain rule through s).
        auto row_scores = [&](const T* q, const T* g, int t, int cols) {
          for (int c = 0; c < cols; ++c) {
            P[size_t(c)] = dot_lanes(q, Kj.data() + size_t(c) * hs, hs) * scale - L[t];
            dS[size_t(c)] = dot_lanes(g, Vj.data() + size_t(c) * hs, hs) - D[size_t(t)];
          }
          for (int c = 0; c < cols; ++c) {
            P[size_t(c)] = exp_t(P[size_t(c)]);
            dS[size_t(c)] = P[size_t(c)] * dS[size_t(c)] * scale;
          }
        };

        // D_t = dO_t . O_t
        for (int t = 0; t < Tq; ++t)
          D[size_t(t)] = dot_lanes(dO(t), out + (size_t(b) * Tq + t) * a.out_stride + size_t(h) * hs, hs);

        // Key tiles outer: dK_u and dV_u summed in the tile's own accumulators over every
        // query row that sees key u, then added to dk, dv once; dQ_t summed over the key
        // tiles row t sees, then added to dq once at the end.
        std::fill(dQ.begin(), dQ.end(), T(0));
        for (int kj = 0; kj < nk; ++kj) {
          const int j0 = kj * Bc, j1 = std::min(j0 + Bc, Tk);
          load_kv_tile(Kj.data(), Vj.data(), kb, vb, a.kv_stride, j0, j1, hs);
          std::fill(dK.begin(), dK.end(), T(0));
          std::fill(dV.begin(), dV.end(), T(0));
          // query tiles that end before the row j0 - delta (the first to see key j0) are masked
          const int first = std::min(nq, std::max(0, j0 - delta) / Br);
          skipped += first;
          for (int qi = first; qi < nq; ++qi) {
            ++visited;
            const int i0 = qi * Br, i1 = std::min(i0 + Br, Tq);
            for (int t = i0; t < i1; ++t) {
              const int ju = std::min(j1, t + delta + 1);
              if (ju <= j0) continue;
              const T* q = qb + size_t(t) * a.q_stride;
              const T* g = dO(t);
              T* dqt = dQ.data() + size_t(t) * hs;
              row_scores(q, g, t, ju - j0);
              for (int c = 0; c < ju - j0; ++c) {
                const T p = P[size_t(c)], ds = dS[size_t(c)];
                const T* k = Kj.data() + size_t(c) * hs;
                T* dkc = dK.data() + size_t(c) * hs;
                T* dvc = dV.data() + size_t(c) * hs;
                for (int i = 0; i < hs; ++i) {
                  dvc[i] += p * g[i];
                  dkc[i] += ds * q[i];
                  dqt[i] += ds * k[i];
                }
              }
              scores += ju - j0;
            }
          }
          for (int u = j0; u < j1; ++u)
            for (int i = 0; i < hs; ++i) {
              dkb[size_t(u) * a.kv_stride + i] += dK[size_t(u - j0) * hs + i];
              dvb[size_t(u) * a.kv_stride + i] += dV[size_t(u - j0) * hs + i];
            }
        }

        for (int t = 0; t < Tq; ++t)
          for (int i = 0; i < hs; ++i) dqb[size_t(t) * a.q_stride + i] += dQ[size_t(t) * hs + i];
      }
  }
  return {visited, skipped, scores};
}

template <class T>
void flash_attention_merge(T* out, T* lse, size_t out_stride, const T* out_b, const T* lse_b,
                           size_t b_stride, size_t n, int hs) {
  for (size_t r = 0; r < n; ++r) {
    const T la = lse[r], lb = lse_b[r];
    if (lb == T(-INFINITY)) continue;  // B saw no keys: nothing to add
    T* o = out + r * out_stride;
    const T* ob = out_b + r * b_stride;
    const T mx = std::max(la, lb);
    const T ea = std::exp(la - mx), eb = std::exp(lb - mx);  // e^{-inf} = 0 when A saw none
    const T sum = ea + eb;
    for (int i = 0; i < hs; ++i) o[i] = (ea * o[i] + eb * ob[i]) / sum;
    lse[r] = mx + std::log(sum);
  }
}

namespace {
template <class T>
FlashView<T> fused_view(const T* qkv, int B, int T_, int C, int NH) {
  const size_t row = size_t(3) * C;
  return {qkv, qkv + C, qkv + 2 * size_t(C), row, row, size_t(C), B, T_, T_, NH, C / NH, 0, 0};
}
}  // namespace

template <class T>
FlashCounts flash_attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int NH,
                                    int Br, int Bc) {
  return flash_attention_forward(fused_view(qkv, B, T_, C, NH), out, lse, Br, Bc);
}

template <class T>
FlashCounts flash_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out,
                                     const T* lse, int B, int T_, int C, int NH, int Br, int Bc) {
  return flash_attention_backward(fused_view(qkv, B, T_, C, NH), dqkv, dqkv + C, dqkv + 2 * size_t(C),
                                  dout, out, lse, Br, Bc);
}

#define GPT_FLASH_INSTANTIATE(T)                                                                    \
  template FlashCounts flash_attention_forward<T>(const FlashView<T>&, T*, T*, int, int);           \
  template FlashCounts flash_attention_backward<T>(const FlashView<T>&, T*, T*, T*, const T*,       \
                                                   const T*, const T*, int, int);                   \
  template void flash_attention_merge<T>(T*, T*, size_t, const T*, const T*, size_t, size_t, int);  \
  template FlashCounts flash_attention_forward<T>(T*, T*, const T*, int, int, int, int, int, int);  \
  template FlashCounts flash_attention_backward<T>(T*, const T*, const T*, const T*, const T*, int, \
                                                   int, int, int, int, int);
GPT_FLASH_INSTANTIATE(float)
GPT_FLASH_INSTANTIATE(double)
#undef GPT_FLASH_INSTANTIATE

}  // namespace gpt::cpu
