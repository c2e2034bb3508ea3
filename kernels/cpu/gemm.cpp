// The CPU GEMM, C (+)= op(A) . op(B): cache blocking in the style of GotoBLAS/BLIS,
// written from their published description.
//
// Three levels of blocking keep each operand in the cache level that reuses it:
//   for jc in steps of NC over N:            (or threads split N: GemmSplit::columns)
//     for pc in steps of KC over K:          pack B block (KC x NC) into NR-wide column panels
//       for ic in steps of MC over M:        (or threads split this loop: GemmSplit::rows)
//         pack A block (MC x KC) into MR-tall row panels   -> lives in L2
//         for each MR x NR tile: micro-kernel               -> accumulators in registers
// The micro-kernel keeps an MR x NR tile of C in vector registers and, for each k,
// loads one NR-wide row of packed B and broadcasts MR values of packed A: MR*NR/W fused
// multiply-adds per (NR/W + MR) loads, so it runs at the FMA units' speed, not memory's.
// Packing also absorbs transposes and ragged edges (zero-padded panels), so the
// micro-kernel is the only hot loop and has no branches.
//
// Vectors are GCC/Clang vector extensions of 64 bytes (lanes.h's LaneVector): AVX-512 zmm registers when
// compiled for a CPU that has them, two AVX2 ymm operations otherwise.
//
// Operands stored as bf16 (bf16 storage, kernels/cpu/bf16_ops.h) are widened to fp32 as
// they are packed: a bf16 is the top half of an fp32, so the packed panels, and with them
// every product, are exactly those of the fp32 GEMM on widened copies, without the copies.
#include "kernels/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "kernels/cpu/aligned.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {
namespace {

template <class T>
struct Tile {
  static constexpr int W = kLanes<T>;       // elements per vector
  static constexpr int MR = 8;              // rows of the register tile
  static constexpr int NR = 2 * W;          // columns: two vectors
  static constexpr int KC = 256;            // depth of a packed block
  static constexpr int MC = 96;             // rows of a packed A block
  static constexpr int NC = 2048;           // columns of a packed B block
};

// Element (i, k) of op(A) and (k, j) of op(B), in the arithmetic type.
template <class S>
inline auto at_a(const S* A, int lda, bool trans, int i, int k) {
  return widen(trans ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k]);
}
template <class S>
inline auto at_b(const S* B, int ldb, bool trans, int k, int j) {
  return widen(trans ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j]);
}

// An 8 x 8 block transposed in registers: dst[k][c] = src[c][k] for c, k < 8, rows
// `ld_src` and `ld_dst` apart. Three rounds of shuffles (pairs of 1, 2, then 4 values),
// as an AVX transpose does; the compiler picks the instructions.
// GCC before 12 has only __builtin_shuffle (a vector of indices), Clang only
// __builtin_shufflevector (the indices as arguments).
#if defined(__clang__)
#define SHUFFLE8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE8(a, b, ...) __builtin_shuffle(a, b, I8{__VA_ARGS__})
#endif
inline void transpose_8x8(const float* src, int ld_src, float* dst, int ld_dst) {
  typedef float V8 __attribute__((vector_size(32), aligned(4)));
  [[maybe_unused]] typedef int I8 __attribute__((vector_size(32)));
  V8 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = *reinterpret_cast<const V8*>(src + size_t(i) * ld_src);
  for (int i = 0; i < 8; i += 2) {  // interleave single values of rows i, i+1
    t[i] = SHUFFLE8(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = SHUFFLE8(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)  // then pairs of values of rows i.., i+2..
    for (int h = 0; h < 2; ++h) {
      r[i + h] = SHUFFLE8(t[i + h], t[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      r[i + h + 2] = SHUFFLE8(t[i + h], t[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int h = 0; h < 4; ++h) {  // then halves of rows 0..3 and 4..7
    t[h] = SHUFFLE8(r[h], r[h + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    t[h + 4] = SHUFFLE8(r[h], r[h + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
  // t[h] holds the block's column k = column_of[h] (rounds 1 and 2 leave k = 1 and 2
  // swapped within each half).
  constexpr int column_of[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int h = 0; h < 8; ++h) *reinterpret_cast<V8*>(dst + size_t(column_of[h]) * ld_dst) = t[h];
}
#undef SHUFFLE8

// Packs rows [i0, i0+mc) x depth [k0, k0+kc) of op(A) into MR-tall panels, each stored
// k-major (MR consecutive values per k), zero-padded to a multiple of MR rows.
// A transposed op(A) (A stored K x M) has a panel's MR values for one k side by side in
// memory. Otherwise they lie in MR rows of A: as for B's transposed panels, full 8 x 8
// blocks of floats are read along the rows and transposed in registers, and only the
// ragged rows and depths go value by value.
template <class T, class S>
void pack_a(const S* A, int lda, bool trans, int i0, int mc, int k0, int kc, T* out) {
  constexpr int MR = Tile<T>::MR;
  for (int p = 0; p < mc; p += MR) {
    const int rows = std::min(MR, mc - p);
    T* panel = out + size_t(p) * kc;
    int k_done = 0;
    if constexpr (std::is_same_v<T, float> && MR == 8) {
      if (!trans && rows == MR) {
        k_done = kc / 8 * 8;
        for (int k = 0; k < k_done; k += 8) {
          const S* block = A + size_t(i0 + p) * lda + k0 + k;
          if constexpr (std::is_same_v<S, float>) {
            transpose_8x8(block, lda, panel + size_t(k) * MR, MR);
          } else {
            alignas(32) float wide[8 * 8];
            for (int r = 0; r < 8; ++r)
              for (int j = 0; j < 8; ++j) wide[r * 8 + j] = widen(block[size_t(r) * lda + j]);
            transpose_8x8(wide, 8, panel + size_t(k) * MR, MR);
          }
        }
      }
    }
    for (int k = k_done; k < kc; ++k) {
      for (int r = 0; r < rows; ++r) panel[k * MR + r] = at_a(A, lda, trans, i0 + p + r, k0 + k);
      for (int r = rows; r < MR; ++r) panel[k * MR + r] = T(0);
    }
  }
}

// One NR-wide panel of a transposed op(B): op(B)'s column j is row j of B, contiguous
// in k. `src` points at (row of the panel's first column, k0); `cols` rows are real, the
// rest of the NR are zero. Reading k-major (one value from each of NR rows per k) keeps
// NR read streams open at once and moves values one by one; instead 8 x 8 blocks are
// read along the rows and transposed in registers (floats; doubles, for the fp64 ground
// truth only, go a cache line of each row at a time). The forward's linears (x . w^T)
// then run as fast as the backward's at GPT-2 widths on the CPU. A bf16 block is widened
// into 8 x 8 floats first.
template <class T, class S>
void pack_b_transposed(const S* src, int ld, int cols, int kc, T* panel) {
  constexpr int NR = Tile<T>::NR;
  int k_done = 0, c_done = 0;
  if constexpr (std::is_same_v<T, float>) {
    k_done = kc / 8 * 8, c_done = cols / 8 * 8;
    for (int k = 0; k < k_done; k += 8)
      for (int c = 0; c < c_done; c += 8) {
        const S* block = src + size_t(c) * ld + k;
        if constexpr (std::is_same_v<S, float>) {
          transpose_8x8(block, ld, panel + size_t(k) * NR + c, NR);
        } else {
          alignas(32) float wide[8 * 8];
          for (int r = 0; r < 8; ++r)
            for (int j = 0; j < 8; ++j) wide[r * 8 + j] = widen(block[size_t(r) * ld + j]);
          transpose_8x8(wide, 8, panel + size_t(k) * NR + c, NR);
        }
      }
  }
  // What the blocks left: the ragged columns for every k, and the ragged k for the
  // blocked columns; a cache line of each row at a time.
  constexpr int KB = 64 / sizeof(T);
  for (int kb = 0; kb < kc; kb += KB) {
    const int depth = std::min(KB, kc - kb);
    for (int c = 0; c < cols; ++c) {
      const int k_from = c < c_done ? std::max(kb, k_done) : kb;
      for (int k = k_from; k < kb + depth; ++k) panel[size_t(k) * NR + c] = widen(src[size_t(c) * ld + k]);
    }
  }
  for (int c = cols; c < NR; ++c)
    for (int k = 0; k < kc; ++k) panel[size_t(k) * NR + c] = T(0);
}

// Packs panel q (columns [j0 + q NR, j0 + (q+1) NR), depth [k0, k0+kc)) of op(B) into
// `out`'s q-th NR-wide panel, stored k-major (NR consecutive values per k), the columns
// past j0 + nc zero.
template <class T, class S>
void pack_b_panel(const S* B, int ldb, bool trans, int k0, int kc, int j0, int nc, int q, T* out) {
  constexpr int NR = Tile<T>::NR;
  const int cols = std::min(NR, nc - q * NR);
  T* panel = out + size_t(q) * NR * kc;
  if (trans) {
    pack_b_transposed(B + size_t(j0 + q * NR) * ldb + k0, ldb, cols, kc, panel);
    return;
  }
  for (int k = 0; k < kc; ++k) {
    T* dst = panel + k * NR;
    if (cols == NR) {
      const S* row = B + size_t(k0 + k) * ldb + j0 + q * NR;
      if constexpr (std::is_same_v<S, T>)
        std::memcpy(dst, row, sizeof(T) * NR);
      else
        for (int c = 0; c < NR; ++c) dst[c] = widen(row[c]);
      continue;
    }
    for (int c = 0; c < cols; ++c) dst[c] = at_b(B, ldb, false, k0 + k, j0 + q * NR + c);
    for (int c = cols; c < NR; ++c) dst[c] = T(0);
  }
}

// acc[MR][2] += a_panel (MR x kc) . b_panel (kc x NR); then C tile (rows x cols valid)
// is overwritten (first depth block without accumulate) or added to. Loads and stores
// go through the vector type directly (its alignment attribute allows unaligned
// addresses) so the accumulators are never address-taken and stay in registers.
template <class T>
void micro_kernel(int kc, const T* a, const T* b, T* C, int ldc, int rows, int cols, bool add) {
  using V = LaneVector<T>;
  constexpr int MR = Tile<T>::MR, W = Tile<T>::W, NR = Tile<T>::NR;
  V acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = V{};
  for (int k = 0; k < kc; ++k) {
    const V b0 = load_lanes(b + k * NR);
    const V b1 = load_lanes(b + k * NR + W);
    for (int r = 0; r < MR; ++r) {
      const T ar = a[k * MR + r];
      acc[r][0] += ar * b0;  // contracts to a fused multiply-add
      acc[r][1] += ar * b1;
    }
  }
  if (rows == MR && cols == NR) {
    for (int r = 0; r < MR; ++r) {
      T* c = C + size_t(r) * ldc;
      if (add) {
        store_lanes(c, load_lanes(c) + acc[r][0]);
        store_lanes(c + W, load_lanes(c + W) + acc[r][1]);
      } else {
        store_lanes(c, acc[r][0]);
        store_lanes(c + W, acc[r][1]);
      }
    }
    return;
  }
  alignas(64) T tile[MR][NR];
  for (int r = 0; r < MR; ++r) {
    store_lanes(&tile[r][0], acc[r][0]);
    store_lanes(&tile[r][W], acc[r][1]);
  }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      T& dst = C[size_t(r) * ldc + c];
      dst = add ? dst + tile[r][c] : tile[r][c];
    }
}

// Where a thread packs its panels. Each thread keeps its buffers from one product to the
// next: a fresh buffer for every product costs page faults on its first touch and, as a
// std::vector, a fill with zeros that the packing overwrites (2 MB for a B block, a few
// percent of a GPT-2 product at 256 tokens). On a cache line (aligned.h): one panel row a
// cache line.
enum class Panels { a, b };

template <class T>
T* packing_buffer(Panels which, size_t elements) {
  thread_local AlignedArray<T> buffers[2];
  thread_local size_t capacity[2] = {0, 0};
  const int i = which == Panels::a ? 0 : 1;
  if (capacity[i] < elements) {
    buffers[i].reset();  // the old one given back first
    buffers[i] = aligned_array<T>(elements);
    capacity[i] = elements;
  }
  return buffers[i].get();
}

// C rows [ic, ic+rows) x columns [jc, jc+nc) (+)= that block of op(A) (depth [pc, pc+kc))
// times the packed B block: packs the rows' A block, then runs the micro-kernel over it.
template <class T, class SA>
void row_block(const SA* A, int lda, bool trans_a, int ic, int rows, int pc, int kc, int jc, int nc,
               const T* packed_b, T* packed_a, T* C, int ldc, bool add) {
  using P = Tile<T>;
  pack_a(A, lda, trans_a, ic, rows, pc, kc, packed_a);
  for (int jr = 0; jr < nc; jr += P::NR) {
    const T* b_panel = packed_b + size_t(jr) * kc;
    for (int ir = 0; ir < rows; ir += P::MR)
      micro_kernel(kc, packed_a + size_t(ir) * kc, b_panel, C + size_t(ic + ir) * ldc + jc + jr, ldc,
                   std::min(P::MR, rows - ir), std::min(P::NR, nc - jr), add);
  }
}

// How the threads share a product (gemm_split below chooses). Either way every element of C
// is summed in the same order (depth blocks of KC in turn, k in turn within one), so the
// bits depend neither on the split nor on the number of threads.
//
// Split rows: the threads pack each B block together, then take row blocks of op(A). Every
// thread reads the whole packed block, most of which other cores packed, so its first pass
// over those panels reads another core's cache; two barriers per block order packing and use.
// Split columns: each thread owns a slice of C's columns: it packs its own B panels and its
// own copy of op(A)'s blocks, shares nothing and never waits for another thread.
std::atomic<GemmSplit> forced_split{GemmSplit::automatic};

// GemmSplit::rows, on the calling team.
template <class T, class SA, class SB>
void gemm_split_rows(bool trans_a, bool trans_b, int M, int N, int K, const SA* A, int lda, const SB* B,
                     int ldb, T* C, int ldc, bool accumulate, bool parallel) {
  using P = Tile<T>;
  const int nc_max = std::min(P::NC, (N + P::NR - 1) / P::NR * P::NR);
  const int kc_max = std::min(P::KC, K);
  T* const packed_b = packing_buffer<T>(Panels::b, size_t(nc_max) * kc_max);  // the calling thread's
  const int threads = parallel ? omp_get_max_threads() : 1;
  // Row blocks of at most MC rows, as many per thread and as equal as the rows allow:
  // 256 rows on 2 threads are 4 blocks of 64, not 96 + 96 + 64 (one thread doing 160
  // rows while the other waits after 96).
  const int rows_per_thread = (M + threads - 1) / threads;
  const int blocks_per_thread = (rows_per_thread + P::MC - 1) / P::MC;
  int mc = (M + threads * blocks_per_thread - 1) / (threads * blocks_per_thread);
  mc = (mc + P::MR - 1) / P::MR * P::MR;
  const int row_blocks = (M + mc - 1) / mc;

  // One parallel region for the whole product: the threads pack B together, then split
  // the row blocks; the implicit barriers of the `omp for` loops order the two.
#pragma omp parallel if (parallel : parallel)
  {
    T* const packed_a = packing_buffer<T>(Panels::a, size_t(mc) * kc_max);
    for (int jc = 0; jc < N; jc += P::NC) {
      const int nc = std::min(P::NC, N - jc);
      const int panels = (nc + P::NR - 1) / P::NR;
      for (int pc = 0; pc < K; pc += P::KC) {
        const int kc = std::min(P::KC, K - pc);
#pragma omp for schedule(static)
        for (int q = 0; q < panels; ++q) pack_b_panel(B, ldb, trans_b, pc, kc, jc, nc, q, packed_b);
#pragma omp for schedule(dynamic, 1)
        for (int blk = 0; blk < row_blocks; ++blk) {
          const int ic = blk * mc;
          row_block(A, lda, trans_a, ic, std::min(mc, M - ic), pc, kc, jc, nc, packed_b, packed_a,
                    C, ldc, accumulate || pc > 0);
        }
      }
    }
  }
}

// GemmSplit::columns: thread t of T computes the columns of panels [t P / T, (t+1) P / T)
// of C's P NR-wide panels, alone.
template <class T, class SA, class SB>
void gemm_split_columns(bool trans_a, bool trans_b, int M, int N, int K, const SA* A, int lda, const SB* B,
                        int ldb, T* C, int ldc, bool accumulate) {
  using P = Tile<T>;
  const int kc_max = std::min(P::KC, K);
  const int panels_total = (N + P::NR - 1) / P::NR;
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int j_begin = int(int64_t(panels_total) * t / threads) * P::NR;
    const int j_end = std::min(N, int(int64_t(panels_total) * (t + 1) / threads) * P::NR);
    const int nc_max = std::min(P::NC, j_end - j_begin);
    T* const packed_b = packing_buffer<T>(Panels::b, size_t(std::max(nc_max, 0) + P::NR) * kc_max);
    T* const packed_a = packing_buffer<T>(Panels::a, size_t(std::min(P::MC, M) + P::MR) * kc_max);
    for (int jc = j_begin; jc < j_end; jc += P::NC) {
      const int nc = std::min(P::NC, j_end - jc);
      for (int pc = 0; pc < K; pc += P::KC) {
        const int kc = std::min(P::KC, K - pc);
        for (int q = 0; q < (nc + P::NR - 1) / P::NR; ++q)
          pack_b_panel(B, ldb, trans_b, pc, kc, jc, nc, q, packed_b);
        for (int ic = 0; ic < M; ic += P::MC)
          row_block(A, lda, trans_a, ic, std::min(P::MC, M - ic), pc, kc, jc, nc, packed_b,
                    packed_a, C, ldc, accumulate || pc > 0);
      }
    }
  }
}

// The blocked product in arithmetic type T, of operands stored as SA and SB (T or bf16).
template <class T, class SA, class SB>
void blocked_gemm(bool trans_a, bool trans_b, int M, int N, int K, const SA* A, int lda, const SB* B, int ldb,
                  T* C, int ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // empty product
    if (!accumulate)
      for (int i = 0; i < M; ++i) std::fill(C + size_t(i) * ldc, C + size_t(i) * ldc + N, T(0));
    return;
  }
  const bool parallel = worth_threads_macs(double(M) * N * K) && omp_get_max_threads() > 1;
  GemmSplit split = forced_split.load(std::memory_order_relaxed);
  if (split == GemmSplit::automatic) split = gemm_split<T>(M, N, omp_get_max_threads());
  if (parallel && split == GemmSplit::columns)
    gemm_split_columns(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  else
    gemm_split_rows(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, accumulate, parallel);
}

}  // namespace

// Packing op(A) once per thread costs M K per thread, the row split's reads of panels that
// other cores packed about K N: the columns are split when N >= M, and only when there are
// panels enough for each thread to get several (a thread with one panel more than another
// then waits little). Measured on GPT-2 124M's products: docs/benchmarks/README.md.
template <class T>
GemmSplit gemm_split(int M, int N, int threads) {
  const int panels = (N + Tile<T>::NR - 1) / Tile<T>::NR;
  return N >= M && panels >= 4 * threads ? GemmSplit::columns : GemmSplit::rows;
}

void force_gemm_split(GemmSplit split) { forced_split.store(split, std::memory_order_relaxed); }

template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, const T* A, int lda, const T* B, int ldb,
          T* C, int ldc, bool accumulate) {
  blocked_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
          float* C, int ldc, bool accumulate) {
  blocked_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

template <class T>
void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, const T* A, int lda,
                    const T* B, int ldb, T* C, int ldc, bool accumulate) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      T sum = 0;
      for (int k = 0; k < K; ++k) sum += at_a(A, lda, trans_a, i, k) * at_b(B, ldb, trans_b, k, j);
      T& c = C[size_t(i) * ldc + j];
      c = accumulate ? c + sum : sum;
    }
}

template void gemm<float>(bool, bool, int, int, int, const float*, int, const float*, int, float*,
                          int, bool);
template void gemm<double>(bool, bool, int, int, int, const double*, int, const double*, int,
                           double*, int, bool);
template GemmSplit gemm_split<float>(int, int, int);
template GemmSplit gemm_split<double>(int, int, int);
template void gemm_reference<float>(bool, bool, int, int, int, const float*, int, const float*, int,
                                    float*, int, bool);
template void gemm_reference<double>(bool, bool, int, int, int, const double*, int, const double*,
                                     int, double*, int, bool);

}  // namespace gpt::cpu
