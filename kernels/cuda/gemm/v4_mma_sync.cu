// GEMM v4: tensor cores. What it adds to v3 and why it is faster:
//
//  * mma.sync (PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32): one warp-wide
//    instruction multiplies a 16x16 bf16 tile of op(A) by a 16x8 bf16 tile of op(B) and
//    adds the 16x8 product to fp32 accumulators held in the 32 lanes' registers:
//    16 x 8 x 16 = 2048 multiply-adds (4096 flops) per instruction. The tensor cores deliver about 16x the FMA units'
//    fp32 rate (A100: 312 vs 19.5 TFLOP/s), so v3's inner loop of scalar FMAs becomes a
//    handful of instructions and the bottleneck moves to feeding the operands.
//  * cp.async (sm_80): global -> shared copies that bypass the registers and run in the
//    background. Tiles for the next kStages-1 k-steps are in flight while the tensor
//    cores work on the current one, so memory latency hides behind math.
//  * ldmatrix: one warp instruction reads four 8x8 bf16 matrices from shared memory and
//    hands every lane exactly the elements the mma fragments need; its .trans form
//    transposes on the way, which is how every layout of A and B is served without
//    transposing anything in global memory.
//
// Tiling. A block of 8 warps computes a 128x128 tile of C, walking K in 32-deep steps.
// The warps form a 2 (M) x 4 (N) grid; warp (wm, wn) owns the 64x32 sub-tile at
// (64 wm, 32 wn): 4 x 4 mma tiles of 16x8, i.e. 64 fp32 accumulators per lane.
// Per 16-deep k-slice a warp issues 4 ldmatrix.x4 for A, 2 for B and 16 mma.
//
// Fragments of m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
// point type"); lane = 4 g + t (g = lane / 4 "groupID", t = lane % 4). Every register
// is 32 bits: two bf16 side by side, the lower-indexed element in the low half.
//   A (16 x 16, m x k)   a0: (m = g,   k = 2t, 2t+1)     a1: (m = g+8, k = 2t, 2t+1)
//                        a2: (m = g,   k = 2t+8, 2t+9)   a3: (m = g+8, k = 2t+8, 2t+9)
//   B (16 x 8,  k x n)   b0: (k = 2t, 2t+1;   n = g)     b1: (k = 2t+8, 2t+9; n = g)
//   C (16 x 8,  m x n)   c0, c1: (m = g,   n = 2t, 2t+1) c2, c3: (m = g+8, n = 2t, 2t+1)
// ldmatrix.x4: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of
// matrix i; register i of lane 4g + t then holds row g, columns 2t, 2t+1 of matrix i;
// with .trans it holds rows 2t, 2t+1 of column g instead. So an 8x8 block stored with
// its k index contiguous ("k-major") is loaded plainly, one stored with m (or n)
// contiguous ("mn-major") with .trans, and both yield the same fragment:
//   operand   stored in global            shared tile, rows x 16-byte chunks   ldmatrix
//   A !trans  M x K  (k contiguous)       k-major:  128 (m) x 4 chunks of k    plain
//   A  trans  K x M  (m contiguous)       mn-major: 32 (k) x 16 chunks of m    .trans
//   B !trans  K x N  (n contiguous)       mn-major: 32 (k) x 16 chunks of n    .trans
//   B  trans  N x K  (k contiguous)       k-major:  128 (n) x 4 chunks of k    plain
// (training: forward is A k-major, B k-major; dinp A k-major, B mn-major; dW both mn-major.)
//
// Pipeline (kStages = 4 shared-memory stages of A and B tiles, 16 KB each):
//   prologue: issue k-tiles 0, 1, 2 into stages 0, 1, 2 (one commit group each)
//   iteration t:  wait until tile t has landed (cp.async.wait_group kStages-2)
//                 __syncthreads()   -- tile t visible to all; stage (t-1)%4 is free
//                 issue tile t+3 into stage (t+3)%4 = (t-1)%4, commit
//                 mma over stage t%4
//         time ->   it 0     it 1     it 2     it 3
//   cp.async        [t3]     [t4]     [t5]     [t6]   (in flight behind the math)
//   tensor cores    [t0]     [t1]     [t2]     [t3]
// One barrier per k-tile does both jobs: tile t complete for everyone, and nobody still
// reading the stage about to be overwritten (it held tile t-1, read in iteration t-1).
//
// Swizzle. A warp-wide ldmatrix reads, per 8x8 matrix, 8 rows of 16 bytes; shared memory
// serves it in one pass when the 8 rows fall in 8 different 16-byte bank groups
// (group = byte address / 16 mod 8). Unswizzled, the rows of one matrix are 64 bytes
// (k-major) or 256 bytes (mn-major) apart: 2 or 1 distinct groups, a 4- or 8-way conflict.
// The 16-byte chunk c of tile row r is therefore stored at chunk position
//   k-major  (4 chunks per row):   c ^ ((r / 2) % 4)     byte = 64 r  + 16 (c ^ ((r>>1)&3))
//   mn-major (16 chunks per row):  c ^ (r % 8)           byte = 256 r + 16 (c ^ (r&7))
// For 8 consecutive rows r0..r0+7 (r0 a multiple of 8) at the same logical chunk, the
// groups are (r%2)*4 + (c ^ (r/2 % 4)) resp. (c%8) ^ (r%8): all 8 distinct. The cp.async
// writes (one 16-byte chunk per lane) use the same map, so each row stays a permutation
// of its own chunks.
//
// Tails. Any M, N, K >= 1: a chunk partly or wholly outside the matrix is copied with
// cp.async's src-size operand set to its in-bounds bytes (possibly 0), and the rest of
// the 16 bytes is zero-filled, so out-of-range products add exactly 0. The epilogue
// guards rows and columns. Needs: A, B, C 16-byte aligned and lda, ldb, ldc multiples of
// 8, so that every chunk starts on a 16-byte boundary.
//
// Epilogue (registers -> global): C = (accumulate ? C : 0) + sum + bias[n], computed in
// fp32, then converted to Tout; gelu_out = gelu(C) of the same fp32 value. Lane pairs
// (n, n+1) are stored as one 2-element vector.
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/cuda/ampere.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm.h"

namespace gpt::cuda {
namespace {

using namespace ampere;  // cp.async, ldmatrix and mma.sync (ampere.cuh)

using bf16 = __nv_bfloat16;

constexpr int kBlockM = 128, kBlockN = 128, kBlockK = 32;  // block tile
constexpr int kStages = 4;                                 // shared-memory pipeline depth
constexpr int kWarpsM = 2, kWarpsN = 4;                    // warp grid inside the block
constexpr int kThreads = 32 * kWarpsM * kWarpsN;           // 256
constexpr int kWarpTileM = kBlockM / kWarpsM;              // 64
constexpr int kWarpTileN = kBlockN / kWarpsN;              // 32
constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;           // mma.sync.m16n8k16
constexpr int kFragsM = kWarpTileM / kMmaM;                // 4 mma tiles down
constexpr int kFragsN = kWarpTileN / kMmaN;                // 4 mma tiles across
constexpr int kChunkElems = 8;                             // 16 bytes of bf16

// One operand tile holds 128 (m or n) x 32 (k) bf16 = 512 chunks of 16 bytes, in either
// stored orientation; a stage is the A tile followed by the B tile.
constexpr int kTileElems = kBlockM * kBlockK;
constexpr int kTileChunks = kTileElems / kChunkElems;      // 512
constexpr int kChunksPerThread = kTileChunks / kThreads;   // 2 per operand per stage
constexpr int kTileBytes = kTileElems * int(sizeof(bf16)); // 8 KB
constexpr int kStageBytes = 2 * kTileBytes;                // 16 KB
constexpr int kSmemBytes = kStages * kStageBytes;          // 64 KB: above the 48 KB default
static_assert(kBlockM == kBlockN, "both operand tiles share one geometry");
static_assert(kGemmV4MaxN == int64_t(65535) * kBlockN, "gemm.h's bound is this kernel's grid");
static_assert(kTileChunks % kThreads == 0, "every thread copies the same number of chunks");
static_assert(kBlockK % kMmaK == 0 && kBlockK == 4 * kChunkElems, "k-major rows are 4 chunks");
static_assert(kFragsN % 2 == 0, "B fragments are loaded two n-tiles per ldmatrix.x4");

// ---- index arithmetic (host and device; checked when this file compiles, below) --------

// Stored geometry of an operand tile. k-major: 128 rows (m or n) of 4 chunks along k.
// mn-major: 32 rows (k) of 16 chunks along m or n.
template <bool kKMajor>
constexpr int kRowChunks = kKMajor ? kBlockK / kChunkElems : kBlockM / kChunkElems;

// Element offset, inside an operand tile, of logical chunk `chunk` of stored row `row`
// (the XOR swizzle of the opening comment; it permutes chunks within the row).
template <bool kKMajor>
__host__ __device__ constexpr int swizzled_offset(int row, int chunk) {
  const int physical_chunk = kKMajor ? chunk ^ ((row >> 1) & 3) : chunk ^ (row & 7);
  return row * kRowChunks<kKMajor> * kChunkElems + physical_chunk * kChunkElems;
}

// Chunk q (0..511) of a tile, as copied by thread q % 256 (consecutive lanes take
// consecutive chunks of a row, so a warp reads whole 64- or 256-byte row segments).
// (mn, k) is the logical position of its first element relative to the tile origin.
struct TileChunk {
  int row, chunk;  // stored row and logical chunk within it
  int mn, k;
};
template <bool kKMajor>
__host__ __device__ constexpr TileChunk tile_chunk(int q) {
  const int row = q / kRowChunks<kKMajor>, chunk = q % kRowChunks<kKMajor>;
  if (kKMajor) return {row, chunk, row, chunk * kChunkElems};
  return {row, chunk, chunk * kChunkElems, row};
}

// How many of the chunk's 8 elements at global (mn, k) lie inside the MN x K operand:
// the chunk runs along k (k-major) or along mn (mn-major).
template <bool kKMajor>
__host__ __device__ constexpr int chunk_valid_elems(int mn, int k, int MN, int K) {
  if (mn >= MN || k >= K) return 0;
  const int room = kKMajor ? K - k : MN - mn;
  return room < kChunkElems ? room : kChunkElems;
}

// Element offset of (mn, k) in the global operand with row stride ld.
template <bool kKMajor>
__host__ __device__ constexpr size_t global_offset(int mn, int k, int ld) {
  return kKMajor ? size_t(mn) * ld + k : size_t(k) * ld + mn;
}

// ldmatrix.x4 of the 16 (mn) x 16 (k) block at (mn0, k0) of a tile: the tile offset of
// the row this lane supplies. Lane 8i + r gives row r of matrix i. Matrix order:
//   kAOrder (A fragment a0..a3): i -> (mn + 8 (i%2), k + 8 (i/2))
//   B order (b0, b1 of n-tile mn0, then b0, b1 of n-tile mn0+8): i -> (mn + 8 (i/2), k + 8 (i%2))
// A stored row is an mn index (k-major) or a k index (mn-major).
template <bool kKMajor, bool kAOrder>
__host__ __device__ constexpr int ldmatrix_lane_offset(int mn0, int k0, int lane) {
  const int matrix = lane / 8, r = lane % 8;
  const int mn = mn0 + 8 * (kAOrder ? matrix % 2 : matrix / 2);
  const int k = k0 + 8 * (kAOrder ? matrix / 2 : matrix % 2);
  if (kKMajor) return swizzled_offset<true>(mn + r, k / kChunkElems);
  return swizzled_offset<false>(k + r, mn / kChunkElems);
}

// Accumulator element i (0..3) of a lane, relative to its 16x8 mma tile.
__host__ __device__ constexpr int accumulator_row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
__host__ __device__ constexpr int accumulator_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }

// ---- the maps, checked at compile time --------------------------------------------------
// The claims of the opening comment, evaluated by the compiler wherever nvcc compiles this
// file (CPU builds with a CUDA toolkit included): a wrong swizzle, chunk map or lane map
// stops the build.

// The logical (mn, k) of the element at tile offset `offset`, by the opening comment's
// swizzle formula written out again (XOR undoes itself): the maps above are checked
// against it, not against themselves.
struct TilePosition {
  int mn, k;
};
template <bool kKMajor>
constexpr TilePosition position_of(int offset) {
  const int row_elems = kRowChunks<kKMajor> * kChunkElems;
  const int row = offset / row_elems, physical = offset % row_elems / kChunkElems, within = offset % kChunkElems;
  const int chunk = kKMajor ? physical ^ ((row / 2) % 4) : physical ^ (row % 8);
  if (kKMajor) return {row, chunk * kChunkElems + within};
  return {chunk * kChunkElems + within, row};
}

// tile_chunk numbers every chunk of the 128 x 32 tile once, and the swizzle stores it
// where the formula says that (mn, k) lies: the global loads and the shared tile agree.
template <bool kKMajor>
constexpr bool chunks_cover_tile_once() {
  bool seen[kTileChunks] = {};
  for (int q = 0; q < kTileChunks; ++q) {
    const TileChunk c = tile_chunk<kKMajor>(q);
    const TilePosition at = position_of<kKMajor>(swizzled_offset<kKMajor>(c.row, c.chunk));
    if (at.mn != c.mn || at.k != c.k) return false;
    if (c.mn < 0 || c.mn >= kBlockM || c.k < 0 || c.k >= kBlockK) return false;
    const int cell = kKMajor ? c.mn * (kBlockK / kChunkElems) + c.k / kChunkElems
                             : c.k * (kBlockM / kChunkElems) + c.mn / kChunkElems;
    if ((kKMajor ? c.k : c.mn) % kChunkElems != 0 || seen[cell]) return false;
    seen[cell] = true;
  }
  return true;
}

// Every ldmatrix.x4 a warp issues (each (mn0, k0) of the tile) reads its four matrices
// in the documented order (A: (mn + 8 (i%2), k + 8 (i/2)); B: (mn + 8 (i/2), k + 8 (i%2))),
// lane 8i + r giving the matrix's row r, and in one pass: the 8 rows of a matrix fall in
// 8 distinct 16-byte bank groups (byte address / 16 mod 8).
template <bool kKMajor, bool kAOrder>
constexpr bool ldmatrix_reads_fragments_conflict_free() {
  for (int mn0 = 0; mn0 < kBlockM; mn0 += kMmaM)
    for (int k0 = 0; k0 < kBlockK; k0 += kMmaK)
      for (int matrix = 0; matrix < 4; ++matrix) {
        bool seen[8] = {};
        for (int r = 0; r < 8; ++r) {
          const int offset = ldmatrix_lane_offset<kKMajor, kAOrder>(mn0, k0, 8 * matrix + r);
          const int mn = mn0 + 8 * (kAOrder ? matrix % 2 : matrix / 2) + (kKMajor ? r : 0);
          const int k = k0 + 8 * (kAOrder ? matrix / 2 : matrix % 2) + (kKMajor ? 0 : r);
          const TilePosition at = position_of<kKMajor>(offset);
          if (at.mn != mn || at.k != k) return false;
          const int group = offset * int(sizeof(bf16)) / 16 % 8;
          if (seen[group]) return false;
          seen[group] = true;
        }
      }
  return true;
}

// The 32 lanes' 4 accumulators are the 16 x 8 mma tile, each element once.
constexpr bool accumulators_cover_mma_tile() {
  bool seen[kMmaM * kMmaN] = {};
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int at = accumulator_row(lane, i) * kMmaN + accumulator_col(lane, i);
      if (at < 0 || at >= kMmaM * kMmaN || seen[at]) return false;
      seen[at] = true;
    }
  return true;
}

static_assert(chunks_cover_tile_once<true>() && chunks_cover_tile_once<false>(),
              "the chunk map and the swizzle must store every chunk of the tile once, where the formula puts it");
static_assert(ldmatrix_reads_fragments_conflict_free<true, true>() &&
                  ldmatrix_reads_fragments_conflict_free<true, false>() &&
                  ldmatrix_reads_fragments_conflict_free<false, true>() &&
                  ldmatrix_reads_fragments_conflict_free<false, false>(),
              "every ldmatrix.x4 must read its matrices in fragment order, 8 distinct bank groups each");
static_assert(accumulators_cover_mma_tile(), "the accumulator map must cover the 16 x 8 mma tile once");

// ---- the kernel's steps ---------------------------------------------------------------

// Issues the cp.async copies of one operand's k-tile [k0, k0+32) into `tile` (shared
// address): rows/columns [mn0, mn0+128) of an MN x K operand with row stride ld.
template <bool kKMajor>
__device__ __forceinline__ void load_operand_tile(uint32_t tile, const bf16* operand, int ld,
                                                  int mn0, int MN, int k0, int K) {
#pragma unroll
  for (int j = 0; j < kChunksPerThread; ++j) {
    const TileChunk c = tile_chunk<kKMajor>(int(threadIdx.x) + j * kThreads);
    const int mn = mn0 + c.mn, k = k0 + c.k;
    const int valid = chunk_valid_elems<kKMajor>(mn, k, MN, K);
    // With nothing to read, point at the operand's start: an address that is surely
    // mapped, although src-size 0 reads no byte of it.
    const bf16* src = valid > 0 ? operand + global_offset<kKMajor>(mn, k, ld) : operand;
    cp_async_16(tile + uint32_t(swizzled_offset<kKMajor>(c.row, c.chunk) * sizeof(bf16)), src,
                valid * int(sizeof(bf16)));
  }
}

// Both operands' k-tile [k0, k0+32) into one stage: A rows [m0, m0+128), B columns
// [n0, n0+128).
template <bool kAKMajor, bool kBKMajor, class Tout>
__device__ __forceinline__ void load_stage(uint32_t stage, const GemmArgs<bf16, Tout>& args,
                                           int m0, int n0, int k0) {
  load_operand_tile<kAKMajor>(stage, args.A, args.lda, m0, args.M, k0, args.K);
  load_operand_tile<kBKMajor>(stage + kTileBytes, args.B, args.ldb, n0, args.N, k0, args.K);
}

// One 32-deep k-tile of the warp's 64x32 product: two 16-deep slices, each 4 A
// fragments and 4 B fragments from shared memory, then 4 x 4 mma.
template <bool kAKMajor, bool kBKMajor>
__device__ __forceinline__ void mma_stage(uint32_t stage, int warp_m0, int warp_n0, int lane,
                                          float (&acc)[kFragsM][kFragsN][4]) {
  const uint32_t a_tile = stage, b_tile = stage + kTileBytes;
#pragma unroll
  for (int kk = 0; kk < kBlockK; kk += kMmaK) {
    uint32_t a[kFragsM][4], b[kFragsN][2];
#pragma unroll
    for (int i = 0; i < kFragsM; ++i) {
      const int offset = ldmatrix_lane_offset<kAKMajor, true>(warp_m0 + i * kMmaM, kk, lane);
      ldmatrix_x4<!kAKMajor>(a[i], a_tile + uint32_t(offset * sizeof(bf16)));
    }
#pragma unroll
    for (int j = 0; j < kFragsN; j += 2) {  // one x4 = b0, b1 of n-tiles j and j+1
      uint32_t r[4];
      const int offset = ldmatrix_lane_offset<kBKMajor, false>(warp_n0 + j * kMmaN, kk, lane);
      ldmatrix_x4<!kBKMajor>(r, b_tile + uint32_t(offset * sizeof(bf16)));
      b[j][0] = r[0];
      b[j][1] = r[1];
      b[j + 1][0] = r[2];
      b[j + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) mma_m16n8k16(acc[i][j], a[i], b[j][0], b[j][1]);
  }
}

// Two consecutive elements as one vector access (the address is 2-element aligned).
__device__ __forceinline__ float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load_pair(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ void store_pair(float* p, float x, float y) {
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ __forceinline__ void store_pair(bf16* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

// Writes the lane's outputs (row, col) and (row, col+1) (col even), values v0, v1 being
// the sums over k; the second only when col+1 < N.
template <class Tout>
__device__ __forceinline__ void write_output_pair(const GemmArgs<bf16, Tout>& args, int row,
                                                  int col, float v0, float v1,
                                                  bool gelu_pairs_aligned) {
  if (row >= args.M || col >= args.N) return;
  const bool pair = col + 1 < args.N;
  if (args.bias) {
    v0 += to_float(args.bias[col]);
    if (pair) v1 += to_float(args.bias[col + 1]);
  }
  const size_t at = size_t(row) * args.ldc + col;
  Tout* c = args.C + at;
  if (pair) {
    if (args.accumulate) {
      const float2 old = load_pair(c);
      v0 += old.x;
      v1 += old.y;
    }
    store_pair(c, v0, v1);
  } else {
    if (args.accumulate) v0 += to_float(*c);
    *c = from_float<Tout>(v0);
  }
  if (args.gelu_out) {
    Tout* g = args.gelu_out + at;
    if (pair && gelu_pairs_aligned) {
      store_pair(g, gelu(v0), gelu(v1));
    } else {
      g[0] = from_float<Tout>(gelu(v0));
      if (pair) g[1] = from_float<Tout>(gelu(v1));
    }
  }
}

// Block (blockIdx.x, blockIdx.y) computes C rows [128 x, 128 x + 128), columns
// [128 y, 128 y + 128). M tiles run along x so that the blocks resident together share
// B column panels and a few A row panels, which then come from L2.
template <bool kTransA, bool kTransB, class Tout>
__global__ void __launch_bounds__(kThreads, 2)
    gemm_v4_kernel(const GemmArgs<bf16, Tout> args, const bool gelu_pairs_aligned) {
  constexpr bool kAKMajor = !kTransA;  // A stored M x K
  constexpr bool kBKMajor = kTransB;   // B stored N x K
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_base = shared_address(smem);
  auto stage_address = [&](int s) { return smem_base + uint32_t(s * kStageBytes); };

  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int warp_m0 = (warp / kWarpsN) * kWarpTileM;  // warp's origin inside the block tile
  const int warp_n0 = (warp % kWarpsN) * kWarpTileN;
  const int m0 = int(blockIdx.x) * kBlockM, n0 = int(blockIdx.y) * kBlockN;
  const int k_tiles = (args.K + kBlockK - 1) / kBlockK;

  float acc[kFragsM][kFragsN][4];
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // Prologue: k-tiles 0 .. kStages-2 in flight. Every step commits exactly one group,
  // empty or not, so that "group t" always means "k-tile t".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles)
      load_stage<kAKMajor, kBKMajor>(stage_address(s), args, m0, n0, s * kBlockK);
    cp_async_commit();
  }

  for (int t = 0; t < k_tiles; ++t) {
    // Committed so far: groups 0 .. t + kStages-2. Allowing kStages-2 pending leaves
    // groups 0..t complete: k-tile t is in shared memory (this thread's chunks).
    cp_async_wait<kStages - 2>();
    // ... and everybody's chunks; also every warp has finished iteration t-1, so the
    // stage that held k-tile t-1 can be refilled.
    __syncthreads();
    const int next = t + kStages - 1;
    if (next < k_tiles)
      load_stage<kAKMajor, kBKMajor>(stage_address(next % kStages), args, m0, n0, next * kBlockK);
    cp_async_commit();
    mma_stage<kAKMajor, kBKMajor>(stage_address(t % kStages), warp_m0, warp_n0, lane, acc);
  }
  cp_async_wait<0>();  // only empty groups remain; leave none behind at exit

  // Epilogue straight from the accumulator registers (no shared memory involved).
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // elements (0,1) on row g, (2,3) on row g+8
        const int row = m0 + warp_m0 + i * kMmaM + accumulator_row(lane, 2 * half);
        const int col = n0 + warp_n0 + j * kMmaN + accumulator_col(lane, 2 * half);
        write_output_pair(args, row, col, acc[i][j][2 * half], acc[i][j][2 * half + 1],
                          gelu_pairs_aligned);
      }
}

// ---- host side ------------------------------------------------------------------------

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument("gemm_v4: " + what);
}

template <class Tout>
void validate(const GemmArgs<bf16, Tout>& a) {
  if (a.M < 1) invalid("M must be >= 1, got " + std::to_string(a.M));
  if (a.N < 1) invalid("N must be >= 1, got " + std::to_string(a.N));
  if (a.K < 1) invalid("K must be >= 1, got " + std::to_string(a.K));
  if (!a.A || !a.B || !a.C) invalid("A, B and C must not be null");
  const int min_lda = a.trans_a ? a.M : a.K, min_ldb = a.trans_b ? a.K : a.N;
  if (a.lda < min_lda) invalid("lda = " + std::to_string(a.lda) + " < " + std::to_string(min_lda));
  if (a.ldb < min_ldb) invalid("ldb = " + std::to_string(a.ldb) + " < " + std::to_string(min_ldb));
  if (a.ldc < a.N) invalid("ldc = " + std::to_string(a.ldc) + " < N = " + std::to_string(a.N));
  // cp.async moves 16-byte pieces: every row of A and B must start on a 16-byte boundary.
  if (a.lda % 8 || a.ldb % 8 || a.ldc % 8)
    invalid("lda, ldb and ldc must be multiples of 8 elements (16-byte rows)");
  if (!aligned16(a.A) || !aligned16(a.B) || !aligned16(a.C))
    invalid("A, B and C must be 16-byte aligned");
  if (a.gelu_out && a.accumulate) invalid("gelu_out requires accumulate == false");
  if (a.N > kGemmV4MaxN) invalid("N = " + std::to_string(a.N) + " too large for the grid's y dimension");
}

template <class Tout>
using KernelPointer = void (*)(const GemmArgs<bf16, Tout>, const bool);

template <class Tout>
KernelPointer<Tout> select_kernel(bool trans_a, bool trans_b) {
  if (trans_a) return trans_b ? gemm_v4_kernel<true, true, Tout> : gemm_v4_kernel<true, false, Tout>;
  return trans_b ? gemm_v4_kernel<false, true, Tout> : gemm_v4_kernel<false, false, Tout>;
}

// 64 KB of dynamic shared memory is above the 48 KB a kernel gets by default: raise the
// kernel's limit, once per (kernel, device) (the attribute belongs to the kernel as
// loaded on the current device).
void allow_large_shared_memory(const void* kernel) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> raised;
  int device = 0;
  GPT_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (!raised.insert({kernel, device}).second) return;
  GPT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
}

}  // namespace

template <class Tin, class Tout>
void gemm_v4(const GemmArgs<Tin, Tout>& args, cudaStream_t stream) {
  static_assert(std::is_same_v<Tin, bf16>, "gemm_v4 takes bf16 inputs only");
  validate(args);
  const KernelPointer<Tout> kernel = select_kernel<Tout>(args.trans_a, args.trans_b);
  allow_large_shared_memory(reinterpret_cast<const void*>(kernel));
  // gelu_out has the row stride ldc but its own base: pair stores need it 2-element aligned.
  const bool gelu_pairs_aligned =
      reinterpret_cast<uintptr_t>(args.gelu_out) % (2 * sizeof(Tout)) == 0;
  const dim3 grid(ceil_div(args.M, kBlockM), ceil_div(args.N, kBlockN));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(args, gelu_pairs_aligned);
  GPT_CUDA_CHECK_LAUNCH();
}

template void gemm_v4<bf16, bf16>(const GemmArgs<bf16, bf16>&, cudaStream_t);
template void gemm_v4<bf16, float>(const GemmArgs<bf16, float>&, cudaStream_t);

}  // namespace gpt::cuda
