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
// Arithmetic: every sum in an order fixed by the sizes alone, never by the data's address
// or the thread count. A score q . k is summed over i = 0 .. hs-1 in order, with the
// keys side by side: each head's keys (and, for the backward, values) are transposed
// once, so that one vector holds the running sums of 16 keys (row_dots) and no vector
// has to be folded into one number per score. Both passes score a whole tile first (the
// forward its P, the backward its P and dS, Br x Bc), then form the tile's products (the
// forward O += P V, the backward dV, dK and dQ) as small matrix products whose
// accumulators stay in registers over the tile's keys or rows (add_products). D_t and the softmax's sum l
// go in the fixed lanes of lanes.h. The scores' exps are exp_t, the vectorisable exp for
// float (fast_exp.h) and the library's for double. Every scratch buffer starts on a
// cache line (aligned.h).
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

#include "kernels/cpu/aligned.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

namespace {
int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The row length of a head's transposed keys: n keys, then room for the four vectors that
// row_dots may read past the last key (zeros), and never a multiple of 4 KB, where every
// row would fall in the same sets of the L1 cache and evict the rows read just before it
// (T = 1024 keys of float are exactly 4 KB).
template <class T>
size_t transposed_row(int n) {
  constexpr int W = kLanes<T>;
  const size_t ld = size_t((n + W - 1) / W * W + 4 * W);
  return ld * sizeof(T) % 4096 == 0 ? ld + W : ld;
}

// The head's keys (or values) transposed: n rows of hs values, `stride` apart, become hs
// rows of ld = transposed_row(n), dimension i of key u at i * ld + u, zeros after key n - 1.
// Sixteen keys at a time, so that each row of the result is written a cache line at a time.
template <class T>
void transpose_head(const T* src, size_t stride, int n, int hs, T* dst) {
  constexpr int U = 16;
  const size_t ld = transposed_row<T>(n);
  for (int u0 = 0; u0 < n; u0 += U) {
    const int u1 = std::min(u0 + U, n);
    for (int i = 0; i < hs; ++i)
      for (int u = u0; u < u1; ++u) dst[size_t(i) * ld + u] = src[size_t(u) * stride + i];
  }
  for (int i = 0; i < hs; ++i) std::fill(dst + size_t(i) * ld + n, dst + size_t(i + 1) * ld, T(0));
}

// The head's values gathered into n rows of hs, one after another, for the forward. In the
// fused qkv layout a head's rows lie 3 C values apart, each on a page of its own, and the
// forward reads every earlier key's value for each query tile: at T = 2048 that is more
// pages than the processor keeps translations for, and reading them in place took 1.5x
// as long per score as at T = 1024. (The backward reads a key tile's rows for all the
// query tiles after it, a few pages at a time, and a copy would only crowd its cache.)
template <class T>
void copy_head(const T* src, size_t stride, int n, int hs, T* dst) {
  for (int u = 0; u < n; ++u) std::copy(src + size_t(u) * stride, src + size_t(u) * stride + hs, dst + size_t(u) * hs);
}

// Scores of R rows against two sets of keys at once: for r < R,
//     sx[r][c] = x[r] . kx_c,   sy[r][c] = y[r] . ky_c,   c < cols,
// kx_c and ky_c read from Kx and Ky (transposed keys: dimension i of key c at i * ld + c),
// each sum over i = 0 .. hs-1 in order. A key-at-a-time dot product must fold its vector's
// lanes into one number for every score; here a vector holds the sums of W neighbouring
// keys, each lane one key's own sum, and nothing is folded. Each vector of keys loaded
// serves the R rows, and 2 R x 4 chains of multiply-adds are in flight. The last vectors
// are read whole (the rows of Kx and Ky hold 4 W - 1 values past the last key) and only
// their first lanes kept: every score is the same sum, in the same order, wherever it
// falls. (The forward scores 2 R query rows against one set of keys; the backward R rows'
// q against the keys and their dO against the values.)
template <int R, class T>
void row_dots(const T* const* x, const T* const* y, const T* Kx, const T* Ky, size_t ld, int hs, int cols,
              T* const* sx, T* const* sy) {
  using V = LaneVector<T>;
  constexpr int W = kLanes<T>;
  auto at = [&](const T* K, int i, int c) { return load_lanes(K + size_t(i) * ld + c); };
  auto keep = [&](T* s, int c, V v) {
    if (c + W <= cols)
      store_lanes(s + c, v);
    else
      for (int l = 0; l < cols - c; ++l) s[c + l] = v[l];
  };
  for (int c = 0; c < cols; c += 4 * W) {
    V ax[R][4] = {}, ay[R][4] = {};
    for (int i = 0; i < hs; ++i) {
      const V kx[4] = {at(Kx, i, c), at(Kx, i, c + W), at(Kx, i, c + 2 * W), at(Kx, i, c + 3 * W)};
      const V ky[4] = {at(Ky, i, c), at(Ky, i, c + W), at(Ky, i, c + 2 * W), at(Ky, i, c + 3 * W)};
      for (int r = 0; r < R; ++r) {
        const T xi = x[r][i], yi = y[r][i];
        for (int v = 0; v < 4; ++v) ax[r][v] += xi * kx[v], ay[r][v] += yi * ky[v];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) keep(sx[r], c + v * W, ax[r][v]), keep(sy[r], c + v * W, ay[r][v]);
  }
}

// R rows of accumulators (hs apart) receive products summed over a depth d in [d0, d1):
//     acc_r += sum_d coef(r, d) x_d,   coef(r, d) = coef[r * r_step + d * d_step],
// x_d the depth's input row (x_stride apart), each element summed over d in order. A
// tile's four products are this one shape (P, dS: the tile's Br x Bc matrices):
//     O_t  += sum_c P_tc v_c,    dQ_t += sum_c dS_tc k_c    (rows: query rows, depth: keys)
//     dV_c += sum_t P_tc dO_t,   dK_c += sum_t dS_tc q_t    (rows: keys, depth: query rows)
// As in the GEMM's micro-kernel, an R x 4-vector block of accumulators stays in registers
// over the whole depth: each input vector loaded serves R rows, each coefficient four
// vectors, and the accumulators go to memory once, not once a term.
template <int R, class T>
void add_products(T* acc, int hs, const T* coef, size_t r_step, size_t d_step, const T* x, size_t x_stride,
                  int d0, int d1) {
  using V = LaneVector<T>;
  constexpr int W = kLanes<T>;
  auto row = [&](int r, int i) { return acc + size_t(r) * hs + i; };
  int i = 0;
  for (; i + 4 * W <= hs; i += 4 * W) {
    V a[R][4];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) a[r][v] = load_lanes(row(r, i + v * W));
    for (int d = d0; d < d1; ++d) {
      const T* xd = x + size_t(d) * x_stride + i;
      const V x4[4] = {load_lanes(xd), load_lanes(xd + W), load_lanes(xd + 2 * W), load_lanes(xd + 3 * W)};
      for (int r = 0; r < R; ++r) {
        const T c = coef[size_t(r) * r_step + size_t(d) * d_step];
        for (int v = 0; v < 4; ++v) a[r][v] += c * x4[v];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) store_lanes(row(r, i + v * W), a[r][v]);
  }
  for (; i + W <= hs; i += W) {  // a head size that is no multiple of 4 W: a vector at a time
    V a[R];
    for (int r = 0; r < R; ++r) a[r] = load_lanes(row(r, i));
    for (int d = d0; d < d1; ++d) {
      const V xd = load_lanes(x + size_t(d) * x_stride + i);
      for (int r = 0; r < R; ++r) a[r] += coef[size_t(r) * r_step + size_t(d) * d_step] * xd;
    }
    for (int r = 0; r < R; ++r) store_lanes(row(r, i), a[r]);
  }
  // And what is left of it, a value at a time: the same sums, each term one fused
  // multiply-add, spelled out (std::fma) because the compiler fuses a scalar a += c x or
  // not depending on how it vectorises the loop around it, which differs with R; a row
  // must get the same bits in a group of any size (the decoder's one row against the
  // window's groups of four, tests/model/test_sampler.cpp).
  for (; i < hs; ++i)
    for (int r = 0; r < R; ++r) {
      T ai = *row(r, i);
      for (int d = d0; d < d1; ++d)
        ai = std::fma(coef[size_t(r) * r_step + size_t(d) * d_step], x[size_t(d) * x_stride + i], ai);
      *row(r, i) = ai;
    }
}

// add_products over n rows, in groups of four, row r summing only its own depth
// [first(r), last(r)). first and last never decrease with r (a later query row sees the
// keys an earlier one sees, and more; a later key is seen from a later row on), so a
// group's depth splits at those bounds into stretches, each covered by a run of the
// group's adjacent rows, which add_products<rows in the run> sums together: all four
// where they share it, which off the diagonal tiles is everywhere. A row never
// multiplies a coefficient outside its own depth (a zero there times an infinite key or
// value would put a NaN where the mask says nothing reaches), and each element's sum
// still runs over its depth in increasing order.
template <class T, class First, class Last>
void add_products_rows(int n, T* acc, int hs, const T* coef, size_t r_step, size_t d_step, const T* x,
                       size_t x_stride, First&& first, Last&& last) {
  for (int r0 = 0; r0 < n; r0 += 4) {
    const int g = std::min(4, n - r0);
    int f[4], l[4], bounds[8];
    for (int i = 0; i < g; ++i) {
      f[i] = first(r0 + i), l[i] = last(r0 + i);
      bounds[2 * i] = f[i], bounds[2 * i + 1] = l[i];
    }
    if (g == 4 && f[0] == f[3] && l[0] == l[3]) {  // one depth for all four: off the diagonal, always
      if (f[0] < l[0]) add_products<4>(acc + size_t(r0) * hs, hs, coef + size_t(r0) * r_step, r_step, d_step, x,
                                       x_stride, f[0], l[0]);
      continue;
    }
    for (int i = 1; i < 2 * g; ++i)  // in increasing order (at most 8: an insertion sort)
      for (int j = i; j > 0 && bounds[j - 1] > bounds[j]; --j) std::swap(bounds[j - 1], bounds[j]);
    for (int s = 0; s + 1 < 2 * g; ++s) {
      const int d0 = bounds[s], d1 = bounds[s + 1];
      if (d0 >= d1) continue;
      auto covers = [&](int i) { return f[i] <= d0 && d1 <= l[i]; };
      int lo = 0;
      while (lo < g && !covers(lo)) ++lo;
      int hi = lo;
      while (hi < g && covers(hi)) ++hi;
      T* a = acc + size_t(r0 + lo) * hs;
      const T* c = coef + size_t(r0 + lo) * r_step;
      switch (hi - lo) {
        case 4: add_products<4>(a, hs, c, r_step, d_step, x, x_stride, d0, d1); break;
        case 3: add_products<3>(a, hs, c, r_step, d_step, x, x_stride, d0, d1); break;
        case 2: add_products<2>(a, hs, c, r_step, d_step, x, x_stride, d0, d1); break;
        case 1: add_products<1>(a, hs, c, r_step, d_step, x, x_stride, d0, d1); break;
        default: break;  // no row of the group sums this stretch
      }
    }
  }
}

// The largest of x[0 .. n-1] and `start`, in the fixed lanes of lanes.h (lane l takes
// x[l], x[l + L], ...; then the lanes are folded), which the compiler vectorises. A
// maximum rounds nothing; the fixed order only settles which zero wins a tie of +0 and -0.
template <class T>
T max_of(const T* x, int n, T start) {
  constexpr int L = kLanes<T>;
  T acc[L];
  for (int l = 0; l < L; ++l) acc[l] = start;
  int i = 0;
  for (; i + L <= n; i += L) {
#pragma omp simd
    for (int l = 0; l < L; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  }
  for (int l = 0; i + l < n; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int width = L / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] = acc[l + width] > acc[l] ? acc[l + width] : acc[l];
  return acc[0];
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
    // One thread's working set: the score tile and the running state of the query tile
    // (accumulator O, max m, sum l), as a GPU block keeps them in shared memory, and the
    // head's keys transposed (row_dots reads them side by side; made once a head, where a
    // GPU block loads a key tile for each query tile), and its values gathered (copy_head).
    AlignedVector<T> S(size_t(Br) * Bc), Kt(transposed_row<T>(Tk) * hs), Vh(size_t(Tk) * hs);
    AlignedVector<T> O(size_t(Br) * hs), m(static_cast<size_t>(Br)), l(static_cast<size_t>(Br));
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < a.B; ++b)
      for (int h = 0; h < NH; ++h) {
        const T* qb = a.q + size_t(b) * Tq * a.q_stride + size_t(h) * hs;
        const T* kb = a.k + size_t(b) * Tk * a.kv_stride + size_t(h) * hs;
        const T* vb = a.v + size_t(b) * Tk * a.kv_stride + size_t(h) * hs;
        T* L = lse + (size_t(b) * NH + h) * Tq;
        transpose_head(kb, a.kv_stride, Tk, hs, Kt.data());
        copy_head(vb, a.kv_stride, Tk, hs, Vh.data());
        const size_t ld = transposed_row<T>(Tk);
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
            // Row t sees the first visible(t) keys of this tile (none on a diagonal tile's
            // rows above its first key; more as t grows). Rows go four at a time through
            // row_dots, each group scored as far as its last row sees; each row keeps its own.
            auto visible = [&](int t) { return std::max(j0, std::min(j1, t + delta + 1)) - j0; };
            for (int r = 0; r < rows; r += 4) {
              int rr[4];  // the four rows (the last ones repeated past the tile's end)
              for (int n = 0; n < 4; ++n) rr[n] = std::min(r + n, rows - 1);
              const int cols_group = visible(i0 + rr[3]);
              if (cols_group == 0) continue;
              const T* x[2] = {qb + size_t(i0 + rr[0]) * a.q_stride, qb + size_t(i0 + rr[1]) * a.q_stride};
              const T* y[2] = {qb + size_t(i0 + rr[2]) * a.q_stride, qb + size_t(i0 + rr[3]) * a.q_stride};
              T* const sx[2] = {S.data() + size_t(rr[0]) * Bc, S.data() + size_t(rr[1]) * Bc};
              T* const sy[2] = {S.data() + size_t(rr[2]) * Bc, S.data() + size_t(rr[3]) * Bc};
              row_dots<2>(x, y, Kt.data() + j0, Kt.data() + j0, ld, hs, cols_group, sx, sy);
            }
            // Each row's softmax update; its probabilities replace its scores in S (the keys
            // it sees: what the product below reads of it), and its O is rescaled to the new
            // maximum.
            for (int r = 0; r < rows; ++r) {
              const int cols = visible(i0 + r);
              T* s = S.data() + size_t(r) * Bc;
              if (cols == 0) continue;
              for (int c = 0; c < cols; ++c) s[c] *= scale;
              const T mx = max_of(s, cols, m[size_t(r)]);
              scores += cols;
              const T e = std::exp(m[size_t(r)] - mx);  // e^{m - m'}: 0 on the row's first tile (m = -inf)
              for (int c = 0; c < cols; ++c) s[c] = exp_t(s[c] - mx);
              l[size_t(r)] = e * l[size_t(r)] + lane_sum<T>(cols, [=](int c) { return s[c]; });
              T* o = O.data() + size_t(r) * hs;
              for (int i = 0; i < hs; ++i) o[i] *= e;
              m[size_t(r)] = mx;
            }
            // Then O_t += sum_c P_tc v_c as one product (each sum over c in order, after the
            // earlier tiles' terms), the backward's add_products: rows query rows, depth keys.
            add_products_rows(rows, O.data(), hs, S.data(), size_t(Bc), 1, Vh.data() + size_t(j0) * hs, size_t(hs),
                              [](int) { return 0; }, [&](int r) { return visible(i0 + r); });
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
    // The head's keys and values transposed (for row_dots, made once a head), a key tile's
    // gradient accumulators, the head's dQ accumulators and D, a tile's P and dS.
    AlignedVector<T> Kt(transposed_row<T>(Tk) * hs), Vt(transposed_row<T>(Tk) * hs);
    AlignedVector<T> dK(size_t(Bc) * hs), dV(size_t(Bc) * hs), dQ(size_t(Tq) * hs),
        D(static_cast<size_t>(Tq));
    AlignedVector<T> P(size_t(Br) * Bc), dS(size_t(Br) * Bc);
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
        const T* dob = dout + size_t(b) * Tq * a.out_stride + size_t(h) * hs;
        auto dO = [&](int t) { return dob + size_t(t) * a.out_stride; };
        const size_t ld = transposed_row<T>(Tk);

        // D_t = dO_t . O_t
        for (int t = 0; t < Tq; ++t)
          D[size_t(t)] = dot_lanes(dO(t), out + (size_t(b) * Tq + t) * a.out_stride + size_t(h) * hs, hs);

        // Key tiles outer: dK_u and dV_u summed in the tile's own accumulators over every
        // query row that sees key u, then added to dk, dv once; dQ_t summed over the key
        // tiles row t sees, then added to dq once at the end.
        std::fill(dQ.begin(), dQ.end(), T(0));
        transpose_head(kb, a.kv_stride, Tk, hs, Kt.data());
        transpose_head(vb, a.kv_stride, Tk, hs, Vt.data());
        for (int kj = 0; kj < nk; ++kj) {
          const int j0 = kj * Bc, j1 = std::min(j0 + Bc, Tk), width = j1 - j0;
          std::fill(dK.begin(), dK.end(), T(0));
          std::fill(dV.begin(), dV.end(), T(0));
          // query tiles that end before the row j0 - delta (the first to see key j0) are masked
          const int first = std::min(nq, std::max(0, j0 - delta) / Br);
          skipped += first;
          for (int qi = first; qi < nq; ++qi) {
            ++visited;
            const int i0 = qi * Br, i1 = std::min(i0 + Br, Tq), rows = i1 - i0;
            // Row t sees the first visible(t) keys of this tile; key c (of the tile) is seen
            // from row seen_from(c) on.
            auto visible = [&](int t) { return std::max(j0, std::min(j1, t + delta + 1)) - j0; };
            auto seen_from = [&](int c) { return std::min(rows, std::max(0, j0 + c - delta - i0)); };
            // The tile's scores, two rows at a time (row_dots scores a pair as far as its
            // later row sees), recomputed as the forward did: row r of P holds
            // P = e^{s - L_t}, of dS the score's gradient P (dP - D_t) / sqrt(hs) with
            // dP = dO_t . v_u (the last factor: the chain rule through s), on the keys row t
            // sees (the products below read nothing else).
            for (int r = 0; r < rows; r += 2) {
              const int r1 = std::min(r + 1, rows - 1);  // a lone last row is scored twice
              const int cols = visible(i0 + r1);
              const T* x[2] = {qb + size_t(i0 + r) * a.q_stride, qb + size_t(i0 + r1) * a.q_stride};
              const T* y[2] = {dO(i0 + r), dO(i0 + r1)};
              T* const p[2] = {P.data() + size_t(r) * Bc, P.data() + size_t(r1) * Bc};
              T* const ds[2] = {dS.data() + size_t(r) * Bc, dS.data() + size_t(r1) * Bc};
              if (cols > 0) row_dots<2>(x, y, Kt.data() + j0, Vt.data() + j0, ld, hs, cols, p, ds);
              for (int n = 0; n < (r1 > r ? 2 : 1); ++n) {
                const int t = i0 + (n == 0 ? r : r1), seen = visible(t);
                for (int c = 0; c < seen; ++c) {
                  p[n][c] = exp_t(p[n][c] * scale - L[t]);
                  ds[n][c] = p[n][c] * (ds[n][c] - D[size_t(t)]) * scale;
                }
              }
            }
            for (int r = 0; r < rows; ++r) scores += visible(i0 + r);
            // The three products. Every sum runs in the order one row (or key) after another
            // gives: dV_c and dK_c over t, dQ_t over c, each after the earlier tiles' terms.
            auto from_row = [&](int c) { return seen_from(c); };
            auto to_row = [&](int) { return rows; };
            add_products_rows(width, dV.data(), hs, P.data(), 1, size_t(Bc), dO(i0), a.out_stride, from_row, to_row);
            add_products_rows(width, dK.data(), hs, dS.data(), 1, size_t(Bc), qb + size_t(i0) * a.q_stride,
                              a.q_stride, from_row, to_row);
            auto from_key = [&](int) { return 0; };
            auto to_key = [&](int r) { return visible(i0 + r); };
            add_products_rows(rows, dQ.data() + size_t(i0) * hs, hs, dS.data(), size_t(Bc), 1,
                              kb + size_t(j0) * a.kv_stride, a.kv_stride, from_key, to_key);
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
