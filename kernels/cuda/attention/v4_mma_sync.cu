// Attention v4: tensor cores (mma.sync), bf16. What it adds to v2/v3: the same loops
// (online-softmax forward with the logsumexp saved; recomputing backward with D = rowsum
// (dO o O), dK/dV per key tile, dQ per query tile, no atomics), but every tile product
// runs on the tensor cores instead of one fp32 FMA per lane:
//   forward:  S = Q K^T,  O += P V
//   dK/dV:    S^T = K Q^T,  dP^T = V dO^T,  dV += P^T dO,  dK += dS^T Q
//   dQ:       S = Q K^T,    dP = dO V^T,    dQ += dS K
// with mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (D = A B + C, A 16x16 bf16,
// B 16x8 bf16, C and D 16x8 fp32), and the K/V (or Q/dO) tile being walked over is
// loaded with cp.async into one of two shared buffers while the other is computed on.
//
// Work split. A block has 4 warps and owns 64 rows (its own tile: queries in the forward
// and dQ kernels, keys in the dK/dV kernel); warp w owns rows 16w..16w+15, the m = 16 of
// one mma. The tile walked over is 64 rows in the forward, 64 (hs 64) or 32 (hs 128) in
// the backward, where two 16 x hs fp32 accumulators (dK, dV) must fit in registers.
//
// Fragment layouts of m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"). Per lane,
// g = lane/4 (0..7) and q = lane%4 (0..3); a bf16 register holds two neighbours, the
// lower column in the lower half:
//   C, D (16x8 fp32, 4 regs)   c0,c1 = (row g,   cols 2q, 2q+1)    c2,c3 = (row g+8, same cols)
//   A    (16x16 bf16, 4 regs)  a0 = (row g,   k 2q, 2q+1)           a1 = (row g+8, k 2q, 2q+1)
//                              a2 = (row g,   k 2q+8, 2q+9)         a3 = (row g+8, k 2q+8, 2q+9)
//   B    (16x8 bf16, 2 regs)   b0 = (k 2q, 2q+1, col g)             b1 = (k 2q+8, 2q+9, col g)
// A row of scores S (16 x Bc) lives in Bc/8 accumulator tiles. The two tiles covering
// columns 16j..16j+7 and 16j+8..16j+15 hold, in each lane, exactly the elements that the
// A operand of k-block j wants in that lane: a0 = (c0,c1) of the first tile, a1 = (c2,c3)
// of the first, a2 = (c0,c1) of the second, a3 = (c2,c3) of the second. So P = softmax
// pieces of S is rounded to bf16, packed in pairs and fed straight back as the A operand
// of P V: it never goes through shared memory (the same holds for P^T, dS^T and dS in
// the backward, whose accumulator rows are the keys or the queries of the next product).
//
// ldmatrix.x4 loads four 8x8 bf16 matrices from shared memory; lanes 8i..8i+7 give the
// row addresses of matrix i, and matrix i lands in register i with lane l holding row
// l/4, columns 2(l%4), 2(l%4)+1 -- the A/B/C pattern above. With .trans lane l holds
// column l/4, rows 2(l%4), 2(l%4)+1 instead: a tile stored [k][n] (V, dO, Q, K read as
// the right-hand factor of P V, P^T dO, dS^T Q, dS K) arrives as the "col" B operand.
// Tiles stored [n][k] (K in Q K^T, Q in K Q^T, ...) are already "col" and are read
// without .trans. Shared rows are hs + 8 values long: the 8 rows an 8x8 matrix reads
// start 16 bytes (4 banks) apart modulo 128 bytes, so they hit 32 different banks.
//
// Pipeline (double buffering; one commit group per walked tile, empty at the end):
//   prologue   issue own tile + walked tile 0 into buffer 0, commit
//   tile j     issue walked tile j+1 into buffer (j+1)%2, commit
//              wait_group 1 (everything but the newest group has landed: tile j), barrier
//              compute on buffer j%2 while tile j+1 is in flight
//              barrier (buffer j%2 may now be overwritten by the issue of tile j+2)
// Tails: a copy of a row at or past T has src-size 0, which fills its 16 bytes with zeros
// and reads nothing; scores of pairs u > t (causal) or past T are masked. Causal tiles
// that are entirely masked are never visited, as in v2/v3.
//
// Numerics: how v4 differs from v2/v3. Inputs are bf16, so each product q_i k_i (8 x 8
// significant bits) is exact in fp32 on both paths; sums are fp32 on both paths (in a
// different order, and the tensor cores' accumulation has its own rounding). The one new
// rounding at bf16 level is of the probabilities: P (and in the backward dS) is rounded
// to bf16 to be an mma operand, a relative error of at most 2^-8 per term, so
//   |y_v4 - y_v2| <= 2^-8 sum_u P_tu |v_u| <= 2^-8 max|v|        (plus fp32-level terms)
// and likewise dV (P rounded), dK and dQ (dS rounded). The running sum l is accumulated
// from the fp32 probabilities, so the logsumexp is as accurate as v2's. The GPU test
// (its bounds are in tests/gpu/attention_reference.h) adds exactly these terms, element
// by element, to v2/v3's bounds.
//
// Exponentials use exp2: p = 2^(s * scale * log2 e - m) with m kept in the same base-2
// units, one FMA and one ex2 per score; the logsumexp is written in natural units,
// L = m ln 2 + ln l, so it is interchangeable with v2's.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/ampere.cuh"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/common.cuh"

namespace gpt::cuda {
namespace {

using namespace ampere;  // cp.async, ldmatrix and mma.sync (ampere.cuh)

using nv_bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = 16;                      // rows of one mma (m16)
constexpr int kOwnRows = kWarps * kWarpRows;       // 64: the block's own tile
constexpr int kForwardKeys = 64;                   // keys per tile in the forward
// Rows of the tile walked over in the backward: 16 x kBackwardWalk scores and dP per warp,
// next to 2 x (16 x hs) fp32 accumulators; at hs = 128 a 64-wide walk would not fit in
// 255 registers without spilling.
template <int HS>
constexpr int kBackwardWalk = HS == 64 ? 64 : 32;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared tile row stride in elements: hs + 8 (16 bytes of padding, see the top).
template <int HS>
constexpr int kSmemStride = HS + 8;
template <int HS>
constexpr int tile_bytes(int rows) { return rows * kSmemStride<HS> * int(sizeof(nv_bf16)); }

// ---- index maps (host and device; checked when this file compiles, below) -------------

struct LaneOrigin {
  int row, col;
};

// The address lane `lane` gives ldmatrix.x4 for a 16x16 block at (row 0, col 0) of a tile
// in shared memory, when the four 8x8 matrices must be (rows 0-7, cols 0-7), (rows 8-15,
// cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15). That order is a0..a3 of an A
// operand stored [m][k]; read with .trans from a tile stored [k][n] it is b0, b1 of the
// n-tile at cols 0-7 and b0, b1 of the n-tile at cols 8-15.
__host__ __device__ constexpr LaneOrigin rows_then_cols_origin(int lane) {
  return {lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16)};
}
// For a B operand stored [n][k] (rows are n): the matrices must be (n 0-7, k 0-7) = b0 of
// n-tile 0, (n 0-7, k 8-15) = b1 of n-tile 0, (n 8-15, k 0-7) and (n 8-15, k 8-15) for
// n-tile 1.
__host__ __device__ constexpr LaneOrigin cols_then_rows_origin(int lane) {
  return {lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2)};
}
// Row and column, within a 16x8 accumulator tile, of element e (0..3) held by `lane`.
__host__ __device__ constexpr int acc_row(int lane, int e) { return lane / 4 + 8 * (e / 2); }
__host__ __device__ constexpr int acc_col(int lane, int e) { return 2 * (lane % 4) + e % 2; }

// ---- the maps, checked at compile time --------------------------------------------------
// The claims of the opening comment, evaluated by the compiler wherever nvcc compiles this
// file (CPU builds with a CUDA toolkit included): a wrong lane map stops the build.

// Matrix i of an ldmatrix.x4 (lanes 8i..8i+7, one row each) is the 8x8 block at rows
// row_block(i), cols col_block(i) of the 16x16 block, its 8 rows in lane order.
template <class Origin, class RowBlock, class ColBlock>
constexpr bool origins_are(Origin origin, RowBlock row_block, ColBlock col_block) {
  for (int lane = 0; lane < 32; ++lane) {
    const int i = lane / 8, r = lane % 8;
    const LaneOrigin o = origin(lane);
    if (o.row != 8 * row_block(i) + r || o.col != 8 * col_block(i)) return false;
  }
  return true;
}
static_assert(origins_are(rows_then_cols_origin, [](int i) { return i % 2; }, [](int i) { return i / 2; }),
              "rows_then_cols_origin: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)");
static_assert(origins_are(cols_then_rows_origin, [](int i) { return i / 2; }, [](int i) { return i % 2; }),
              "cols_then_rows_origin: matrices (n 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15)");

// The padded stride puts the 8 rows an 8x8 matrix reads in 8 distinct 16-byte bank
// groups (byte address / 16 mod 8), at every 8-column offset of a row.
template <int HS>
constexpr bool padded_rows_conflict_free() {
  for (int col = 0; col < HS; col += 8) {
    bool seen[8] = {};
    for (int row = 0; row < 8; ++row) {
      const int group = (row * kSmemStride<HS> + col) * int(sizeof(nv_bf16)) / 16 % 8;
      if (seen[group]) return false;
      seen[group] = true;
    }
  }
  return true;
}
static_assert(padded_rows_conflict_free<64>() && padded_rows_conflict_free<128>(),
              "a row stride of hs + 8 must spread an 8x8 matrix's rows over 8 bank groups");

// The accumulators cover the 16x8 tile once, and the two tiles of columns 16j..16j+7 and
// 16j+8..16j+15 hold in each lane what the A operand of k-block j wants there (PTX's A
// fragment: register reg, half h at row g + 8 (reg % 2), k 2q + h + 8 (reg / 2)):
// a0 = c0,c1 and a1 = c2,c3 of the first tile, a2, a3 the same of the second.
constexpr bool accumulators_feed_a_operand() {
  bool seen[16 * 8] = {};
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      const int at = acc_row(lane, e) * 8 + acc_col(lane, e);
      if (at < 0 || at >= 16 * 8 || seen[at]) return false;
      seen[at] = true;
    }
  for (int lane = 0; lane < 32; ++lane)
    for (int reg = 0; reg < 4; ++reg)
      for (int h = 0; h < 2; ++h) {
        const int tile = reg / 2, e = 2 * (reg % 2) + h;  // the accumulator element that becomes it
        const int want_row = lane / 4 + 8 * (reg % 2), want_k = 2 * (lane % 4) + h + 8 * (reg / 2);
        if (acc_row(lane, e) != want_row || 8 * tile + acc_col(lane, e) != want_k) return false;
      }
  return true;
}
static_assert(accumulators_feed_a_operand(), "score accumulators must be the A fragment of the next product");

// ---- register packing -----------------------------------------------------------------

// Two fp32 values rounded to bf16 (nearest even) in one register, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- tile loads -----------------------------------------------------------------------

// Issues the copies of rows [0, ROWS) of a head slice (HS values per row, row r at
// src + r * src_stride) into a padded shared tile; rows at or past valid_rows become
// zeros. Invariant: valid_rows >= 1 (every tile starts before T), so row 0 is a safe
// address for the rows that copy nothing. Consecutive threads take consecutive 16-byte
// chunks of a row: each row is read as whole 128-byte lines.
template <int HS, int ROWS>
__device__ __forceinline__ void load_tile_async(nv_bf16* dst, const nv_bf16* src, size_t src_stride,
                                                int valid_rows) {
  constexpr int kChunksPerRow = HS / 8;
  constexpr int kChunks = ROWS * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "every thread issues the same number of copies");
  for (int c = threadIdx.x; c < kChunks; c += kThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool valid = r < valid_rows;
    cp_async_16(shared_address(dst + r * kSmemStride<HS> + col), src + size_t(valid ? r : 0) * src_stride + col,
                valid ? 16 : 0);
  }
}

// The per-row statistics of ROWS queries (logsumexp and D), 4 bytes a copy: threads
// [0, ROWS) copy L, threads [ROWS, 2 ROWS) copy D; rows past valid_rows become 0.
template <int ROWS>
__device__ __forceinline__ void load_row_stats_async(float* dst_lse, float* dst_dsum, const float* lse,
                                                     const float* dsum, int valid_rows) {
  static_assert(2 * ROWS <= kThreads, "one copy per thread");
  const int i = threadIdx.x % ROWS;
  const bool valid = i < valid_rows;
  if (threadIdx.x < ROWS)
    cp_async_4(shared_address(dst_lse + i), lse + (valid ? i : 0), valid ? 4 : 0);
  else if (threadIdx.x < 2 * ROWS)
    cp_async_4(shared_address(dst_dsum + i), dsum + (valid ? i : 0), valid ? 4 : 0);
}

// ---- warp-level tile products -----------------------------------------------------------

// acc (16 x N) += A B^T over K: A is 16 rows of a shared tile stored [m][k] (a_rows points
// at the warp's first row), B is N rows of a shared tile stored [n][k]. Both have HS
// columns (K = HS) and the padded stride. Used for S = Q K^T, dP = dO V^T, S^T = K Q^T,
// dP^T = V dO^T. One ldmatrix of A per 16-wide k-step serves all N/8 mma of that step.
template <int HS, int N>
__device__ __forceinline__ void mma_rows_by_rows(float (&acc)[N / 8][4], const nv_bf16* a_rows,
                                                 const nv_bf16* b_rows, int lane) {
  constexpr int S = kSmemStride<HS>;
  const LaneOrigin ao = rows_then_cols_origin(lane), bo = cols_then_rows_origin(lane);
#pragma unroll
  for (int k = 0; k < HS; k += 16) {
    uint32_t a[4];
    ldmatrix_x4(a, shared_address(a_rows + ao.row * S + k + ao.col));
#pragma unroll
    for (int n = 0; n < N; n += 16) {
      uint32_t b[4];
      ldmatrix_x4(b, shared_address(b_rows + (n + bo.row) * S + k + bo.col));
      mma_m16n8k16(acc[n / 8], a, b[0], b[1]);
      mma_m16n8k16(acc[n / 8 + 1], a, b[2], b[3]);
    }
  }
}

// acc (16 x HS) += A B over K: A (16 x K) is in registers as K/16 A fragments (made from
// accumulators by to_a_fragments), B is K rows of a shared tile stored [k][n] with HS
// columns, read with .trans. Used for O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K.
template <int HS, int K>
__device__ __forceinline__ void mma_regs_by_rows(float (&acc)[HS / 8][4], const uint32_t (&a)[K / 16][4],
                                                 const nv_bf16* b_rows, int lane) {
  constexpr int S = kSmemStride<HS>;
  const LaneOrigin bo = rows_then_cols_origin(lane);
#pragma unroll
  for (int k = 0; k < K; k += 16) {
#pragma unroll
    for (int n = 0; n < HS; n += 16) {
      uint32_t b[4];
      ldmatrix_x4<true>(b, shared_address(b_rows + (k + bo.row) * S + n + bo.col));
      mma_m16n8k16(acc[n / 8], a[k / 16], b[0], b[1]);
      mma_m16n8k16(acc[n / 8 + 1], a[k / 16], b[2], b[3]);
    }
  }
}

// Accumulator tiles (16 x N fp32) -> A fragments (16 x N bf16), register to register:
// the layout identity explained at the top of the file.
template <int N>
__device__ __forceinline__ void to_a_fragments(uint32_t (&a)[N / 16][4], const float (&acc)[N / 8][4]) {
#pragma unroll
  for (int j = 0; j < N / 16; ++j) {
    a[j][0] = pack_bf16(acc[2 * j][0], acc[2 * j][1]);          // row g,   k 2q..
    a[j][1] = pack_bf16(acc[2 * j][2], acc[2 * j][3]);          // row g+8, k 2q..
    a[j][2] = pack_bf16(acc[2 * j + 1][0], acc[2 * j + 1][1]);  // row g,   k 8+2q..
    a[j][3] = pack_bf16(acc[2 * j + 1][2], acc[2 * j + 1][3]);  // row g+8, k 8+2q..
  }
}

// dst[row][col, col+1] += scale * (acc[.][e], acc[.][e+1]) for the accumulator pair of
// each n-tile in row half r of a 16 x HS accumulator: one bf16x2 read-modify-write. The
// lane owns these elements alone (no other thread of any block writes them).
template <int HS>
__device__ __forceinline__ void add_row_half(nv_bf16* dst_row, const float (&acc)[HS / 8][4], int r, float scale,
                                             int lane) {
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) {
    __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(dst_row + 8 * n + acc_col(lane, 0));
    const float2 old = __bfloat1622float2(*p);
    *p = __floats2bfloat162_rn(old.x + scale * acc[n][2 * r], old.y + scale * acc[n][2 * r + 1]);
  }
}

// ---- forward --------------------------------------------------------------------------

template <int HS>
constexpr int forward_smem_bytes() {  // Q | K[2] | V[2]
  return tile_bytes<HS>(kOwnRows) + 4 * tile_bytes<HS>(kForwardKeys);
}

// Online softmax on the fragments of one key tile (the equations are in v2). Each lane
// holds two rows (r = 0: row g, elements 0,1; r = 1: row g+8, elements 2,3), and a row's
// scores are spread over the 4 lanes of a quad (same g): the row max needs two
// shuffles. The running sum l stays a per-lane partial sum (its lanes' columns only),
// rescaled like everything else; the quad adds the partials once, at the end.
// On return s holds the unnormalised probabilities p.
template <int HS, int NT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2],
                                               float (&o)[HS / 8][4], float scale_log2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
    const float m_new = fmaxf(m[r], mx * scale_log2);  // scale > 0: max commutes with it
    // A row with no visible key yet has m_new = -inf; measuring from 0 instead makes
    // every exponent -inf, so p = 0 and c = 0, where -inf - (-inf) would be NaN.
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    const float c = exp2f(m[r] - m_ref);  // rescales what was summed under the old max
    m[r] = m_new;
    l[r] *= c;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      o[n][2 * r] *= c;
      o[n][2 * r + 1] *= c;
    }
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 2 * r; e < 2 * r + 2; ++e) {
        s[n][e] = exp2f(fmaf(s[n][e], scale_log2, -m_ref));  // masked: 2^-inf = 0
        l[r] += s[n][e];
      }
  }
}

// Grid (ceil(T/64), B*NH), 128 threads. Block: queries [q0, q0+64) of (b, h); warp w owns
// rows q0+16w..q0+16w+15 and walks the key tiles [k0, k0+64) up to the diagonal.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(nv_bf16* out, float* lse, const nv_bf16* qkv, int T_, int C, int NH, float scale_log2) {
  constexpr int S = kSmemStride<HS>;
  constexpr int Bc = kForwardKeys;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  nv_bf16* Qs = reinterpret_cast<nv_bf16*>(smem_raw);  // [64][S]
  nv_bf16* Ks = Qs + kOwnRows * S;                     // [2][Bc][S]
  nv_bf16* Vs = Ks + 2 * Bc * S;                       // [2][Bc][S]

  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kOwnRows;  // heaviest (last) query tiles first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t stride = 3 * size_t(C);
  const nv_bf16* k_rows = qkv + qkv_at(b, 0, 1, h, T_, C, HS);  // key u at k_rows + u * stride
  const nv_bf16* v_rows = qkv + qkv_at(b, 0, 2, h, T_, C, HS);

  // Causal: key tiles starting after the block's last query are skipped.
  const int last_query = min(q0 + kOwnRows, T_) - 1;
  const int n_tiles = last_query / Bc + 1;
  auto issue_kv = [&](int j) {
    const int k0 = j * Bc, buf = j % 2;
    load_tile_async<HS, Bc>(Ks + buf * Bc * S, k_rows + size_t(k0) * stride, stride, T_ - k0);
    load_tile_async<HS, Bc>(Vs + buf * Bc * S, v_rows + size_t(k0) * stride, stride, T_ - k0);
  };
  load_tile_async<HS, kOwnRows>(Qs, qkv + qkv_at(b, q0, 0, h, T_, C, HS), stride, T_ - q0);
  issue_kv(0);
  cp_async_commit();

  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row0 = q0 + warp * kWarpRows;  // the warp's first query

  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) issue_kv(j + 1);
    cp_async_commit();  // possibly empty: keeps "tile j = all groups but the newest" true
    cp_async_wait<1>();
    __syncthreads();
    const int k0 = j * Bc;
    const nv_bf16* Kt = Ks + (j % 2) * Bc * S;
    const nv_bf16* Vt = Vs + (j % 2) * Bc * S;

    float s[Bc / 8][4] = {};
    mma_rows_by_rows<HS, Bc>(s, Qs + warp * kWarpRows * S, Kt, lane);  // S = Q K^T (unscaled)
    // Mask keys after the query (the diagonal tile) and past T (the tail tile); other
    // tiles have nothing to mask and skip the compares (warp-uniform branch).
    if (k0 + Bc - 1 > row0 || k0 + Bc > T_) {
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int t = row0 + acc_row(lane, e), u = k0 + 8 * n + acc_col(lane, e);
          if (u > t || u >= T_) s[n][e] = -INFINITY;
        }
    }
    online_softmax<HS, Bc / 8>(s, m, l, o, scale_log2);
    uint32_t p[Bc / 16][4];
    to_a_fragments<Bc>(p, s);                       // P in bf16, still in registers
    mma_regs_by_rows<HS, Bc>(o, p, Vt, lane);       // O += P V
    __syncthreads();  // buffer j%2 is free: the next iteration refills it with tile j+2
  }

  // y = O / l, the logsumexp L = m ln2 + ln l. Quad-reduce l first (all lanes shuffle).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(kFullMask, l[r], 2);
    const int t = row0 + acc_row(lane, 2 * r);
    if (t >= T_) continue;  // padding rows of the tail tile: computed, never written
    const float inv = 1.0f / l[r];
    nv_bf16* y = out + out_at(b, t, h, T_, C, HS);
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
      *reinterpret_cast<__nv_bfloat162*>(y + 8 * n + acc_col(lane, 0)) =
          __floats2bfloat162_rn(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (lane % 4 == 0) lse[size_t(bh) * T_ + t] = m[r] * kLn2 + logf(l[r]);
  }
}

// ---- backward -------------------------------------------------------------------------

template <int HS>
constexpr int dkdv_smem_bytes() {  // K | V | Q[2] | dO[2] | L[2] | D[2]
  constexpr int Br = kBackwardWalk<HS>;
  return 2 * tile_bytes<HS>(kOwnRows) + 4 * tile_bytes<HS>(Br) + 4 * Br * int(sizeof(float));
}

// Grid (ceil(T/64), B*NH), 128 threads. Block: keys [k0, k0+64) of (b, h); warp w owns
// keys k0+16w..k0+16w+15 and accumulates their dK, dV over the query tiles that see
// them. Everything is computed transposed (rows = keys), so that P^T and dS^T come out
// of the mma as accumulators with one row per key and go straight back in as the A
// operands of dV += P^T dO and dK += dS^T Q.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(nv_bf16* dqkv, const nv_bf16* dout, const nv_bf16* qkv, const float* lse, const float* dsum,
                int T_, int C, int NH, float scale, float scale_log2) {
  constexpr int S = kSmemStride<HS>;
  constexpr int Br = kBackwardWalk<HS>;
  static_assert(kOwnRows % Br == 0, "query tiles start at the key tile: k0 is a multiple of Br");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  nv_bf16* Ks = reinterpret_cast<nv_bf16*>(smem_raw);  // [64][S]
  nv_bf16* Vs = Ks + kOwnRows * S;                     // [64][S]
  nv_bf16* Qs = Vs + kOwnRows * S;                     // [2][Br][S]
  nv_bf16* dYs = Qs + 2 * Br * S;                      // [2][Br][S]
  float* Ls = reinterpret_cast<float*>(dYs + 2 * Br * S);  // [2][Br]
  float* Ds = Ls + 2 * Br;                                 // [2][Br]

  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int k0 = blockIdx.x * kOwnRows;  // key tile 0 sees the most query tiles: it starts first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t stride = 3 * size_t(C);
  const nv_bf16* q_rows = qkv + qkv_at(b, 0, 0, h, T_, C, HS);  // query t at q_rows + t * stride
  const nv_bf16* dy_rows = dout + out_at(b, 0, h, T_, C, HS);   // dy_t at dy_rows + t * C
  const float* lse_row = lse + size_t(bh) * T_;
  const float* dsum_row = dsum + size_t(bh) * T_;

  // Causal: queries t < k0 see none of these keys; the first query tile is q0 = k0.
  const int n_tiles = (T_ - k0 + Br - 1) / Br;
  auto issue_queries = [&](int j) {
    const int q0 = k0 + j * Br, buf = j % 2;
    load_tile_async<HS, Br>(Qs + buf * Br * S, q_rows + size_t(q0) * stride, stride, T_ - q0);
    load_tile_async<HS, Br>(dYs + buf * Br * S, dy_rows + size_t(q0) * C, size_t(C), T_ - q0);
    load_row_stats_async<Br>(Ls + buf * Br, Ds + buf * Br, lse_row + q0, dsum_row + q0, T_ - q0);
  };
  load_tile_async<HS, kOwnRows>(Ks, qkv + qkv_at(b, k0, 1, h, T_, C, HS), stride, T_ - k0);
  load_tile_async<HS, kOwnRows>(Vs, qkv + qkv_at(b, k0, 2, h, T_, C, HS), stride, T_ - k0);
  issue_queries(0);
  cp_async_commit();

  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  const int key0 = k0 + warp * kWarpRows;  // the warp's first key

  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) issue_queries(j + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int q0 = k0 + j * Br, buf = j % 2;
    const nv_bf16* Qt = Qs + buf * Br * S;
    const nv_bf16* dYt = dYs + buf * Br * S;
    const float* Lt = Ls + buf * Br;
    const float* Dt = Ds + buf * Br;

    float st[Br / 8][4] = {}, dpt[Br / 8][4] = {};
    mma_rows_by_rows<HS, Br>(st, Ks + warp * kWarpRows * S, Qt, lane);    // S^T  = K Q^T
    mma_rows_by_rows<HS, Br>(dpt, Vs + warp * kWarpRows * S, dYt, lane);  // dP^T = V dO^T
    // P^T[u,t] = exp(scale s - L_t) where visible (u <= t < T), else 0; dS^T = P^T (dP^T - D_t).
    // Padding queries (t >= T) have zero rows, L = D = 0: masked all the same.
#pragma unroll
    for (int n = 0; n < Br / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int u = key0 + acc_row(lane, e), ti = 8 * n + acc_col(lane, e), t = q0 + ti;
        const float p = (u <= t && t < T_) ? exp2f(fmaf(st[n][e], scale_log2, -Lt[ti] * kLog2e)) : 0.0f;
        st[n][e] = p;
        dpt[n][e] = p * (dpt[n][e] - Dt[ti]);
      }
    uint32_t pa[Br / 16][4], dsa[Br / 16][4];
    to_a_fragments<Br>(pa, st);    // P^T in bf16
    to_a_fragments<Br>(dsa, dpt);  // dS^T in bf16
    mma_regs_by_rows<HS, Br>(dv, pa, dYt, lane);  // dV += P^T dO
    mma_regs_by_rows<HS, Br>(dk, dsa, Qt, lane);  // dK += dS^T Q   (scale at the end)
    __syncthreads();  // buffer j%2 is free for tile j+2
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int u = key0 + acc_row(lane, 2 * r);
    if (u >= T_) continue;
    add_row_half<HS>(dqkv + qkv_at(b, u, 1, h, T_, C, HS), dk, r, scale, lane);
    add_row_half<HS>(dqkv + qkv_at(b, u, 2, h, T_, C, HS), dv, r, 1.0f, lane);
  }
}

template <int HS>
constexpr int dq_smem_bytes() {  // Q | dO | K[2] | V[2]
  return 2 * tile_bytes<HS>(kOwnRows) + 4 * tile_bytes<HS>(kBackwardWalk<HS>);
}

// Grid (ceil(T/64), B*NH), 128 threads. Block: queries [q0, q0+64) of (b, h); warp w owns
// rows q0+16w..q0+16w+15 and accumulates their dQ over the key tiles up to the diagonal.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(nv_bf16* dqkv, const nv_bf16* dout, const nv_bf16* qkv, const float* lse, const float* dsum,
              int T_, int C, int NH, float scale, float scale_log2) {
  constexpr int S = kSmemStride<HS>;
  constexpr int Bc = kBackwardWalk<HS>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  nv_bf16* Qs = reinterpret_cast<nv_bf16*>(smem_raw);  // [64][S]
  nv_bf16* dYs = Qs + kOwnRows * S;                    // [64][S]
  nv_bf16* Ks = dYs + kOwnRows * S;                    // [2][Bc][S]
  nv_bf16* Vs = Ks + 2 * Bc * S;                       // [2][Bc][S]

  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kOwnRows;  // heaviest (last) query tiles first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t stride = 3 * size_t(C);
  const nv_bf16* k_rows = qkv + qkv_at(b, 0, 1, h, T_, C, HS);
  const nv_bf16* v_rows = qkv + qkv_at(b, 0, 2, h, T_, C, HS);

  const int last_query = min(q0 + kOwnRows, T_) - 1;
  const int n_tiles = last_query / Bc + 1;  // causal: later key tiles skipped
  auto issue_kv = [&](int j) {
    const int kt0 = j * Bc, buf = j % 2;
    load_tile_async<HS, Bc>(Ks + buf * Bc * S, k_rows + size_t(kt0) * stride, stride, T_ - kt0);
    load_tile_async<HS, Bc>(Vs + buf * Bc * S, v_rows + size_t(kt0) * stride, stride, T_ - kt0);
  };
  load_tile_async<HS, kOwnRows>(Qs, qkv + qkv_at(b, q0, 0, h, T_, C, HS), stride, T_ - q0);
  load_tile_async<HS, kOwnRows>(dYs, dout + out_at(b, q0, h, T_, C, HS), size_t(C), T_ - q0);
  issue_kv(0);
  cp_async_commit();

  // The lane's two rows (g and g+8 of the warp's 16): L in base-2 units, and D. Rows
  // past the end read row T-1 (any valid row: they are never written).
  const int row0 = q0 + warp * kWarpRows;
  float L2[2], D[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = min(row0 + acc_row(lane, 2 * r), T_ - 1);
    L2[r] = lse[size_t(bh) * T_ + t] * kLog2e;
    D[r] = dsum[size_t(bh) * T_ + t];
  }
  float dq[HS / 8][4] = {};

  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) issue_kv(j + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int kt0 = j * Bc;
    const nv_bf16* Kt = Ks + (j % 2) * Bc * S;
    const nv_bf16* Vt = Vs + (j % 2) * Bc * S;

    float s[Bc / 8][4] = {}, dp[Bc / 8][4] = {};
    mma_rows_by_rows<HS, Bc>(s, Qs + warp * kWarpRows * S, Kt, lane);    // S  = Q K^T
    mma_rows_by_rows<HS, Bc>(dp, dYs + warp * kWarpRows * S, Vt, lane);  // dP = dO V^T
#pragma unroll
    for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = row0 + acc_row(lane, e), u = kt0 + 8 * n + acc_col(lane, e);
        const float p = (u <= t && u < T_) ? exp2f(fmaf(s[n][e], scale_log2, -L2[e / 2])) : 0.0f;
        s[n][e] = p * (dp[n][e] - D[e / 2]);  // dS
      }
    uint32_t dsa[Bc / 16][4];
    to_a_fragments<Bc>(dsa, s);                 // dS in bf16
    mma_regs_by_rows<HS, Bc>(dq, dsa, Kt, lane);  // dQ += dS K   (scale at the end)
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + acc_row(lane, 2 * r);
    if (t >= T_) continue;
    add_row_half<HS>(dqkv + qkv_at(b, t, 0, h, T_, C, HS), dq, r, scale, lane);
  }
}

// ---- host side --------------------------------------------------------------------------

// cp.async copies 16 bytes at a time and the epilogues store bf16 pairs: the tensors
// must be 16-byte aligned (rows then are too: every row offset is a multiple of hs).
void require_aligned(const char* fn, const char* name, const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw std::invalid_argument(std::string(fn) + ": " + name + " must be 16-byte aligned");
}

template <class Kernel>
void allow_smem(Kernel* kernel, int bytes) {  // above 48 KiB a kernel must opt in
  GPT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int HS>
void launch_forward(nv_bf16* out, float* lse, const nv_bf16* qkv, int B, int T_, int C, int NH,
                    cudaStream_t stream) {
  const float scale_log2 = kLog2e / std::sqrt(float(HS));
  constexpr int smem = forward_smem_bytes<HS>();
  allow_smem(forward_kernel<HS>, smem);
  const dim3 grid(ceil_div(T_, kOwnRows), unsigned(B * NH));
  forward_kernel<HS><<<grid, kThreads, smem, stream>>>(out, lse, qkv, T_, C, NH, scale_log2);
  GPT_CUDA_CHECK_LAUNCH();
}

template <int HS>
void launch_backward(nv_bf16* dqkv, float* dsum, const nv_bf16* dout, const nv_bf16* qkv, const nv_bf16* out,
                     const float* lse, int B, int T_, int C, int NH, cudaStream_t stream) {
  const float scale = 1.0f / std::sqrt(float(HS)), scale_log2 = kLog2e * scale;
  launch_dsum(dsum, dout, out, B, T_, C, NH, stream);

  const dim3 grid(ceil_div(T_, kOwnRows), unsigned(B * NH));
  constexpr int dkdv_smem = dkdv_smem_bytes<HS>(), dq_smem = dq_smem_bytes<HS>();
  allow_smem(dkdv_kernel<HS>, dkdv_smem);
  allow_smem(dq_kernel<HS>, dq_smem);
  dkdv_kernel<HS><<<grid, kThreads, dkdv_smem, stream>>>(dqkv, dout, qkv, lse, dsum, T_, C, NH, scale,
                                                         scale_log2);
  GPT_CUDA_CHECK_LAUNCH();
  dq_kernel<HS><<<grid, kThreads, dq_smem, stream>>>(dqkv, dout, qkv, lse, dsum, T_, C, NH, scale, scale_log2);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void attention_forward_v4(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, cudaStream_t stream) {
  static_assert(std::is_same_v<T, __nv_bfloat16>, "attention_forward_v4 is bf16 only (fp32 mode: v2)");
  const char* fn = "attention_forward_v4";
  const int hs = attention_head_size(fn, B, T_, C, NH, false);
  require_aligned(fn, "qkv", qkv);
  require_aligned(fn, "out", out);
  if (hs == 64)
    launch_forward<64>(out, lse, qkv, B, T_, C, NH, stream);
  else
    launch_forward<128>(out, lse, qkv, B, T_, C, NH, stream);
}

template <class T>
void attention_backward_v4(T* dqkv, float* dsum, const T* dout, const T* qkv, const T* out, const float* lse,
                           int B, int T_, int C, int NH, cudaStream_t stream) {
  static_assert(std::is_same_v<T, __nv_bfloat16>, "attention_backward_v4 is bf16 only (fp32 mode: v3)");
  const char* fn = "attention_backward_v4";
  const int hs = attention_head_size(fn, B, T_, C, NH, false);
  require_aligned(fn, "dqkv", dqkv);
  require_aligned(fn, "dout", dout);
  require_aligned(fn, "qkv", qkv);
  require_aligned(fn, "out", out);
  if (hs == 64)
    launch_backward<64>(dqkv, dsum, dout, qkv, out, lse, B, T_, C, NH, stream);
  else
    launch_backward<128>(dqkv, dsum, dout, qkv, out, lse, B, T_, C, NH, stream);
}

template void attention_forward_v4<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, int, int, int,
                                                  int, cudaStream_t);
template void attention_backward_v4<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                                   const __nv_bfloat16*, const __nv_bfloat16*, const float*, int,
                                                   int, int, int, cudaStream_t);

}  // namespace gpt::cuda
