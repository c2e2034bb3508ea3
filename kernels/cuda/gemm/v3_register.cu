// GEMM v3: 2-D register blocking. What it adds to v2: each thread computes an 8 x 8
// block of outputs, so a value read from shared memory feeds 8 FMAs instead of 1;
// global loads are 16-byte vectors; the next k-tile is loaded while this one is used.
//
// Block tile 128 x 128 of C, k-step BK (8 for float, 16 for bf16), 256 threads as a
// 16 x 16 grid (tr, tc). Thread (tr, tc) owns rows {tr*4 + i, 64 + tr*4 + i} and columns {tc*4 + j, 64 + tc*4 + j}
// (i, j < 4) of the tile: two 4-row groups 64 apart, two 4-column groups 64 apart.
//
//   per k (one column of As, one row of Bs, both k-major in shared memory):
//     a[8] = As[k][tr*4 .. +3], As[k][64 + tr*4 .. +3]     two 16-byte shared loads
//     b[8] = Bs[k][tc*4 .. +3], Bs[k][64 + tc*4 .. +3]     two 16-byte shared loads
//     acc[i][j] += a[i] * b[j]                             64 FMAs (an outer product)
//
// Reuse. v2 read 2 shared values per FMA; here 16 values feed 64 FMAs: 1/4 per FMA,
// 8x fewer. Global traffic per FMA: a k-step loads (128 + 128) x BK values for
// 128 x 128 x BK FMAs, 1/64 per FMA (v2: 1/16, v1: 2). The 64 accumulators live in
// registers; with 4-wide rows a warp reads As with 2 distinct addresses (broadcasts)
// and Bs as 16 consecutive float4s (conflict-free), and the 64-apart split is what
// keeps those float4 reads contiguous across the warp.
//
// Shared tiles are k-major, As[k][m] and Bs[k][n], so the inner loop reads vectors.
// Where an operand is stored contiguous along k (A when !trans_a, B when trans_b: both
// operands of the forward product) a thread loads a 16-byte piece along k and writes
// it transposed, one element per k-row of the tile; otherwise the piece is already a
// run of m (or n) and is written as it came. Rows of the tile are 128 + 4 floats
// apart, which keeps the transposing writes at most 2-way bank conflicted while every
// row start stays 16-byte aligned for the float4 reads.
//
// Any M, N, K, any ld, every layout. A 16-byte load is used when the operand's base is
// 16-byte aligned and its ld a multiple of the vector width (decided once, on the
// host: then every piece of every tile is aligned) and the whole piece lies inside the
// matrix; otherwise the piece is read element by element, zero past the edges. Values
// past M, N or K are zero and add nothing; outputs past M or N are not stored.
//
// Pipelining with registers: while the block computes on k-tile t from one of two
// shared buffers, each thread's loads of tile t+1 are in flight into registers; they
// are written into the other buffer after the FMAs. One barrier per k-step suffices:
// the buffer written in step t was last read in step t-1, which every thread finished
// before that step's closing barrier.
//
// Block order: consecutive blocks walk down a group of 8 tile-rows before moving to
// the next tile-column, so blocks running together share A rows and B columns in L2.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm.h"

namespace gpt::cuda {
namespace {

constexpr int kBlockM = 128, kBlockN = 128;  // C tile per block
constexpr int kThreads = 256;                // a 16 x 16 grid of threads
constexpr int kThreadGrid = 16;
constexpr int kHalf = 64;                    // the two 4-row (4-column) groups are kHalf apart
constexpr int kTileRow = kBlockM + 4;        // shared row stride in floats (see the top)
constexpr int kGroupM = 8;                   // tile-rows per block-order group
static_assert(kBlockM == kBlockN, "one loader shape serves A and B");
static_assert(kThreadGrid * 4 * 2 == kBlockM, "16 threads x (2 groups of 4) cover the tile");
static_assert(kTileRow % 4 == 0, "shared rows must start 16-byte aligned for float4 reads");

// ---- 16-byte pieces -------------------------------------------------------------

// Elements of Tin in 16 bytes: 4 floats or 8 bf16.
template <class Tin>
constexpr int kVecWidth = 16 / int(sizeof(Tin));

// The k-step: 8 for float, 16 for bf16, so that each thread moves exactly one 16-byte
// piece of each operand per step (16 x 128 / 256 threads = 8 bf16 = 16 bytes).
template <class Tin>
constexpr int kBlockK = 2 * kVecWidth<Tin>;

template <int BK>
using Tile = float[BK][kTileRow];  // Tile[k][r]: one k-step of one operand

// A piece of W elements starting at p, kept in registers in its storage format (4 x 32
// bits for either type: staging costs 4 registers per operand). The first `valid`
// elements are read, the rest are zero; vector: one 16-byte load (p aligned, valid = W).
__device__ __forceinline__ uint4 load_piece(const float* p, int valid, bool vector) {
  if (vector) return __ldg(reinterpret_cast<const uint4*>(p));
  float f[4];
  for (int j = 0; j < 4; ++j) f[j] = j < valid ? p[j] : 0.0f;
  return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
}
__device__ __forceinline__ uint4 load_piece(const __nv_bfloat16* p, int valid, bool vector) {
  if (vector) return __ldg(reinterpret_cast<const uint4*>(p));
  unsigned h[8];  // the raw 16 bits of each element; +0.0 is all zero bits
  for (int j = 0; j < 8; ++j) h[j] = j < valid ? __bfloat16_as_ushort(p[j]) : 0u;
  return make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
}

// The piece's elements as fp32, in memory order.
__device__ __forceinline__ void unpack(uint4 raw, float* out, float) {
  out[0] = __uint_as_float(raw.x), out[1] = __uint_as_float(raw.y);
  out[2] = __uint_as_float(raw.z), out[3] = __uint_as_float(raw.w);
}
__device__ __forceinline__ void unpack(uint4 raw, float* out, __nv_bfloat16) {
  // Little-endian: the lower half of each word is the element at the lower address. A
  // bf16 is the top half of an fp32, so widening is a shift (or a mask).
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int w = 0; w < 4; ++w) {
    out[2 * w] = __uint_as_float(words[w] << 16);
    out[2 * w + 1] = __uint_as_float(words[w] & 0xffff0000u);
  }
}

// ---- global -> registers -> shared: one operand's k-tile -----------------------------
//
// The operand X is seen as the tile it feeds: T[k][r], k < BK, r < 128, with
//   kAlongK:  X stored with one row per r, contiguous along k:  T[k][r] = X[r0 + r][k0 + k]
//   !kAlongK: X stored with one row per k, contiguous along r:  T[k][r] = X[k0 + k][r0 + r]
// A: X = A, r = m, kAlongK = !trans_a.   B: X = B, r = n, kAlongK = trans_b.
// The tile has BK x 128 elements in 16-byte pieces of W = BK / 2 elements: 256 pieces,
// one per thread. Thread t's piece sits at
//   kAlongK:  r = t / 2,            k = (t % 2) * W           (W consecutive k)
//   !kAlongK: k = t / (128 / W),    r = (t % (128 / W)) * W   (W consecutive r)
// so consecutive threads read consecutive 16-byte pieces of memory (coalesced).
template <class Tin, bool kAlongK>
struct OperandStage {
  static constexpr int W = kVecWidth<Tin>, BK = kBlockK<Tin>;
  static_assert(BK * kBlockM == W * kThreads, "one 16-byte piece per thread per operand");
  uint4 raw;  // the staged piece

  __device__ __forceinline__ static void piece_at(int& k, int& r) {
    const int t = int(threadIdx.x);
    if constexpr (kAlongK) {
      r = t / (BK / W);
      k = (t % (BK / W)) * W;
    } else {
      k = t / (kBlockM / W);
      r = (t % (kBlockM / W)) * W;
    }
  }

  // Loads this thread's piece of the k-tile at (r0, k0). rows: M for A, N for B.
  // vec_ok: X is 16-byte aligned and ld % W == 0 (so every piece is aligned).
  __device__ __forceinline__ void fetch(const Tin* X, int ld, int r0, int k0, int rows, int K, bool vec_ok) {
    int k, r;
    piece_at(k, r);
    // The piece in X's own storage: row srow, columns scol .. scol + W - 1.
    const int srow = kAlongK ? r0 + r : k0 + k, scol = kAlongK ? k0 + k : r0 + r;
    const int srows = kAlongK ? rows : K, scols = kAlongK ? K : rows;
    const int valid = srow < srows ? min(W, scols - scol) : 0;  // <= 0: wholly outside
    raw = load_piece(X + int64_t(srow) * ld + scol, valid, vec_ok && valid == W);
  }

  // Writes the staged piece into the tile, as fp32.
  __device__ __forceinline__ void commit(Tile<BK>& tile) const {
    int k, r;
    piece_at(k, r);
    float v[W];
    unpack(raw, v, Tin{});
    if constexpr (kAlongK) {  // a run of k: one element into each of W tile rows
      for (int j = 0; j < W; ++j) tile[k + j][r] = v[j];
    } else {  // a run of r: float4 writes along one tile row (r % 4 == 0: aligned)
      for (int j = 0; j < W; j += 4)
        *reinterpret_cast<float4*>(&tile[k][r + j]) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
    }
  }
};

// ---- the epilogue: 4 consecutive outputs of one row ------------------------------------

__device__ __forceinline__ void load4(const float* p, float* out) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
}
__device__ __forceinline__ void load4(const __nv_bfloat16* p, float* out) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  __nv_bfloat162 lo, hi;
  __builtin_memcpy(&lo, &raw.x, sizeof(lo));
  __builtin_memcpy(&hi, &raw.y, sizeof(hi));
  const float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
  out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
}
__device__ __forceinline__ void store4(float* p, const float* v) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(__nv_bfloat16* p, const float* v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
  uint2 raw;
  __builtin_memcpy(&raw.x, &lo, sizeof(lo));
  __builtin_memcpy(&raw.y, &hi, sizeof(hi));
  *reinterpret_cast<uint2*>(p) = raw;
}

// Outputs (m, n .. n+3): v = sum (+ old C) (+ bias), C = v, gelu_out = gelu(v), with the
// bias already loaded (zeros when there is none). vec_ok: C and gelu_out 16-byte
// aligned and ldc % 4 == 0, so (m, n) with n % 4 == 0 starts an aligned 4-piece.
template <class Tin, class Tout>
__device__ __forceinline__ void store_row4(const GemmArgs<Tin, Tout>& a, int m, int n, const float* sum,
                                           const float* bias, bool vec_ok) {
  const int64_t at = int64_t(m) * a.ldc + n;
  float v[4];
  if (vec_ok && n + 4 <= a.N) {
    float old[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (a.accumulate) load4(a.C + at, old);
    for (int j = 0; j < 4; ++j) v[j] = sum[j] + old[j] + bias[j];
    store4(a.C + at, v);
    if (a.gelu_out) {
      for (int j = 0; j < 4; ++j) v[j] = gelu(v[j]);
      store4(a.gelu_out + at, v);
    }
    return;
  }
  for (int j = 0; j < 4 && n + j < a.N; ++j) {  // unaligned C, or the last columns
    float x = sum[j];  // added in the vector path's order: sum, old C, bias
    if (a.accumulate) x += to_float(a.C[at + j]);
    x += bias[j];
    a.C[at + j] = from_float<Tout>(x);
    if (a.gelu_out) a.gelu_out[at + j] = from_float<Tout>(gelu(x));
  }
}

// ---- the kernel ----------------------------------------------------------------------

// Block number -> (tile row, tile column), grouped: blocks g*8*tiles_n .. walk tile
// rows first_m .. first_m+7 (fewer in the last group) column by column.
__device__ __forceinline__ void block_tile(int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int per_group = kGroupM * tiles_n;
  const int first_m = int(blockIdx.x) / per_group * kGroupM;
  const int rows_here = min(tiles_m - first_m, kGroupM);
  const int in_group = int(blockIdx.x) % per_group;
  tile_m = first_m + in_group % rows_here;
  tile_n = in_group / rows_here;
}

struct VecFlags {
  bool a, b, c;  // 16-byte paths allowed for A, B and the outputs (see the top)
};

template <class Tin, class Tout, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kThreads, 2)
    gemm_register_kernel(GemmArgs<Tin, Tout> a, int tiles_m, int tiles_n, VecFlags vec) {
  constexpr int BK = kBlockK<Tin>;
  __shared__ __align__(16) Tile<BK> As[2];  // As[buf][k][m]
  __shared__ __align__(16) Tile<BK> Bs[2];  // Bs[buf][k][n]
  int tile_m, tile_n;
  block_tile(tiles_m, tiles_n, tile_m, tile_n);
  const int m0 = tile_m * kBlockM, n0 = tile_n * kBlockN;
  const int tr = int(threadIdx.x) / kThreadGrid, tc = int(threadIdx.x) % kThreadGrid;

  OperandStage<Tin, !kTransA> a_stage;
  OperandStage<Tin, kTransB> b_stage;
  a_stage.fetch(a.A, a.lda, m0, 0, a.M, a.K, vec.a);
  b_stage.fetch(a.B, a.ldb, n0, 0, a.N, a.K, vec.b);
  a_stage.commit(As[0]);
  b_stage.commit(Bs[0]);
  __syncthreads();

  float acc[8][8] = {};
  const int k_tiles = (a.K + BK - 1) / BK;
  for (int t = 0; t < k_tiles; ++t) {
    const int cur = t & 1;
    const bool more = t + 1 < k_tiles;
    if (more) {  // issue the next tile's global loads now; they land during the FMAs
      a_stage.fetch(a.A, a.lda, m0, (t + 1) * BK, a.M, a.K, vec.a);
      b_stage.fetch(a.B, a.ldb, n0, (t + 1) * BK, a.N, a.K, vec.b);
    }
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float av[8], bv[8];
      const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][tr * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][kHalf + tr * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tc * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][kHalf + tc * 4]);
      av[0] = a0.x, av[1] = a0.y, av[2] = a0.z, av[3] = a0.w;
      av[4] = a1.x, av[5] = a1.y, av[6] = a1.z, av[7] = a1.w;
      bv[0] = b0.x, bv[1] = b0.y, bv[2] = b0.z, bv[3] = b0.w;
      bv[4] = b1.x, bv[5] = b1.y, bv[6] = b1.z, bv[7] = b1.w;
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    if (more) {  // buffer cur^1 was last read in step t-1, closed by its barrier
      a_stage.commit(As[cur ^ 1]);
      b_stage.commit(Bs[cur ^ 1]);
    }
    __syncthreads();
  }

  // acc[i][j] is C[m0 + (i/4)*64 + tr*4 + i%4][n0 + (j/4)*64 + tc*4 + j%4].
  float bias[8];
  for (int j = 0; j < 8; ++j) {
    const int n = n0 + (j / 4) * kHalf + tc * 4 + j % 4;
    bias[j] = (a.bias && n < a.N) ? to_float(a.bias[n]) : 0.0f;
  }
  for (int i = 0; i < 8; ++i) {
    const int m = m0 + (i / 4) * kHalf + tr * 4 + i % 4;
    if (m >= a.M) continue;
    for (int half = 0; half < 2; ++half) {
      const int n = n0 + half * kHalf + tc * 4;
      if (n < a.N) store_row4(a, m, n, &acc[i][half * 4], &bias[half * 4], vec.c);
    }
  }
}

template <class Tin, class Tout, bool kTransA, bool kTransB>
void launch(const GemmArgs<Tin, Tout>& args, cudaStream_t stream) {
  constexpr int W = kVecWidth<Tin>;
  const VecFlags vec{aligned16(args.A) && args.lda % W == 0, aligned16(args.B) && args.ldb % W == 0,
                     aligned16(args.C) && (!args.gelu_out || aligned16(args.gelu_out)) && args.ldc % 4 == 0};
  const unsigned tiles_m = ceil_div(args.M, kBlockM), tiles_n = ceil_div(args.N, kBlockN);
  gemm_register_kernel<Tin, Tout, kTransA, kTransB>
      <<<tiles_m * tiles_n, kThreads, 0, stream>>>(args, int(tiles_m), int(tiles_n), vec);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

// The arguments were validated by gemm() (gemm.cu). The layout is a template argument
// of the kernel: the loaders' index arithmetic is then fixed at compile time.
template <class Tin, class Tout>
void gemm_v3(const GemmArgs<Tin, Tout>& args, cudaStream_t stream) {
  if (!args.trans_a && !args.trans_b) return launch<Tin, Tout, false, false>(args, stream);
  if (!args.trans_a && args.trans_b) return launch<Tin, Tout, false, true>(args, stream);
  if (args.trans_a && !args.trans_b) return launch<Tin, Tout, true, false>(args, stream);
  return launch<Tin, Tout, true, true>(args, stream);
}

template void gemm_v3<float, float>(const GemmArgs<float, float>&, cudaStream_t);
template void gemm_v3<__nv_bfloat16, __nv_bfloat16>(const GemmArgs<__nv_bfloat16, __nv_bfloat16>&, cudaStream_t);
template void gemm_v3<__nv_bfloat16, float>(const GemmArgs<__nv_bfloat16, float>&, cudaStream_t);

}  // namespace gpt::cuda
