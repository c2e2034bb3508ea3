// Attention v5: the flash forward pass on Hopper (sm_90a). Same loops and the same
// results as v2 (out and the logsumexp), three changes in how a tile is moved and
// multiplied:
//
//  1. Asynchronous warpgroup MMA. v4 multiplies with mma.sync m16n8k16: each warp
//     loads its fragments from shared memory into registers (ldmatrix) and issues many
//     small synchronous MMAs. Here a warpgroup (4 warps, 128 threads) issues
//     wgmma.mma_async m64nNk16, a 64 x N x 16 product that reads its operands straight
//     from shared memory through a 64-bit "matrix descriptor" (address, strides,
//     swizzle): no ldmatrix, no fragment registers for K and V, and the tensor cores
//     work while the issuing threads go on. S = Q K^T is one m64n128k16 per 16
//     columns of the head; O += P V is one m64n{hs}k16 per 16 keys.
//  2. TMA. One thread asks the copy engine for a whole (128 rows x 64 columns) box
//     with cp.async.bulk.tensor; the engine computes the addresses, zero-fills rows
//     past T, writes the box into shared memory in the 128-byte swizzled layout that
//     wgmma reads without bank conflicts, and signals an mbarrier when the bytes land.
//  3. Producer / consumer warp specialisation. Warpgroup 0 only loads (one thread of
//     it issues every copy); warpgroups 1 and 2 only compute, 64 query rows each. K
//     and V tiles flow through a ring of kStages shared-memory stages, so the next
//     tiles are in flight while the current one is multiplied. setmaxnreg moves
//     registers from the producer (24 per thread) to the consumers (240 per thread).
//
// The PTX primitives behind these steps (mbarriers, tensor maps, setmaxnreg, the wgmma
// fence/commit/wait discipline) are shared with GEMM v5 in kernels/cuda/hopper.cuh,
// which explains each of them and the descriptor's bit layout.
//
// Per CTA: one (128-query tile, batch b, head h); grid (ceil(T/128), B*NH), the
// heaviest (last) query tiles first, as v2. Key tiles are 128 keys; a causal query
// tile i visits key tiles 0..i and no further.
//
// The pipeline (tile j lives in stage s = j mod kStages; r = j / kStages is how many
// times stage s was used before):
//
//   producer thread                          consumer warpgroup w (rows 64w..64w+63)
//   Q tile        -> q_full                  wait q_full, parity 0
//   for j:                                   for j:
//     wait kv_empty[s], parity (r&1)^1         wait k_full[s], parity r&1
//     K_j -> k_full[s]   (expect_tx + TMA)     S = Q_w K_j^T          (wgmma, both smem)
//     V_j -> v_full[s]   (expect_tx + TMA)     mask, online softmax, P to bf16 registers
//                                              wait v_full[s], parity r&1
//                                              O = c O + P V_j        (wgmma, A in regs)
//                                              arrive kv_empty[s]     (one lane per warp)
//
// mbarrier phases: a barrier's phase k completes when its k-th round of arrivals
// (and, for the full barriers, of transaction bytes) is done; try_wait.parity(p)
// returns once the most recent phase with parity p is complete. full[s] completes
// phase r when tile j = r*kStages + s has landed, so consumers wait parity r&1.
// kv_empty[s] completes phase r when both consumer warpgroups (8 warps) released tile
// j; before refilling stage s with tile j the producer needs the release of tile
// j - kStages, phase r-1, parity (r&1)^1. For r = 0 that parity names the phase
// before phase 0, which a fresh barrier reports as complete: the first kStages fills
// do not wait. Phases alternate, so a waiter can never mistake phase r-2 for r: the
// producer cannot run more than kStages tiles ahead of the slower consumer.
//
// The register-A trick. The accumulator of S = Q K^T (fp32, 64 x 128 per warpgroup)
// is spread over the 128 threads exactly as the A operand of an m64nNk16 wgmma from
// registers expects its 64 x 16 slices (thread lane = 4g + q of warp wq owns rows
// 16wq + g and 16wq + g + 8, columns 2q, 2q+1 of every 8-column block). So
// P = exp(S - m) is rounded to bf16 in place, two columns packed per 32-bit
// register, and fed to O += P V with no shared-memory round trip and no shuffles.
// V is stored as rows of keys (T, hs), which makes it "MN-major" for the B operand
// of P V (N = head column is contiguous); wgmma's transpose bit for B reads it as it
// is.
//
// Online softmax (as v2, on the accumulator): row r's four quad threads hold 32 of
// its 128 scores each; the row max is a max over the thread's 32, then two xor
// shuffles (1, 2) within the quad. l is kept per thread (a partial sum, rescaled by
// the same factor as the quad's other partials) and summed over the quad once, at
// the end. Exponentials are exp2 of s*scale*log2(e) - m*scale*log2(e), one FFMA each.
// The output is bf16 (out) and the logsumexp fp32 (lse = m*scale + log l), as v2; P
// is rounded to bf16 before P V (as in v4), l sums the unrounded P.
#include <cuda.h>  // CUtensorMap and its enums only: the driver is reached via cudart

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/hopper.cuh"

// wgmma and setmaxnreg exist only on sm_90a (GPT_HOPPER_DEVICE_CODE, hopper.cuh); the
// other passes compile the kernel to a trap, never launched: the host function refuses a
// build without sm_90a code and any device that is not compute capability 9.x first.

namespace gpt::cuda {
// A named namespace, not an anonymous one: the sm_80 pass compiles the device code out,
// and would then report the layout constants it uses as unreferenced.
namespace attention_v5 {

using bf16 = __nv_bfloat16;

inline constexpr int kBr = 128;                // query rows per CTA
inline constexpr int kBc = 128;                // keys per K / V tile
inline constexpr int kRowsPerConsumer = 64;    // a wgmma's M: one consumer warpgroup's rows
inline constexpr int kConsumers = kBr / kRowsPerConsumer;      // 2 consumer warpgroups
inline constexpr int kThreads = 128 * (1 + kConsumers);        // + 1 producer warpgroup = 384
inline constexpr int kSwizzleCols = 64;        // bf16 columns per 128-byte swizzled row
inline constexpr int kSwizzleRowBytes = 128;
inline constexpr int kAtomBytes = 8 * kSwizzleRowBytes;        // 8 rows: one swizzle pattern
inline constexpr int kBoxBytes = 128 * kSwizzleRowBytes;       // one TMA box: 128 rows x 64 cols
// Registers per thread after setmaxnreg: 24 + 2 x 240 = 504 <= 65536 / 128 = 512.
inline constexpr int kProducerRegisters = 24;
inline constexpr int kConsumerRegisters = 240;
static_assert(kBr == 128 && kBc == 128, "one TMA box per 64 columns assumes 128-row tiles");
static_assert(kProducerRegisters + kConsumers * kConsumerRegisters <= 512, "register file");

// Shared memory, in bytes from a 1024-aligned base (the 128-byte swizzle repeats every
// 8 rows = 1024 bytes, and both TMA and wgmma compute it from address bits 4-9, so every
// box starts on a 1024-byte boundary):
//   Q              HS/64 boxes (column blocks c = 0, 1) of 128 rows x 128 bytes
//   K[s], V[s]     the same for each of kStages stages
//   barriers       q_full, k_full[s], v_full[s], kv_empty[s]: 8 bytes each
// Inside a box, row r (token or key) sits at r*128 bytes, its 16-byte chunk k at chunk
// k ^ (r % 8): CU_TENSOR_MAP_SWIZZLE_128B, and what descriptor swizzle mode 1 undoes.
template <int HS>
struct SmemLayout {
  static constexpr int kStages = HS == 64 ? 3 : 2;  // HS=128: 2 stages = 128 KiB of K/V
  static constexpr int kColumnBlocks = HS / kSwizzleCols;
  static constexpr uint32_t kTileBytes = uint32_t(kColumnBlocks) * kBoxBytes;  // Q, K or V
  static constexpr uint32_t q = 0;
  __host__ __device__ static constexpr uint32_t k(int s) { return kTileBytes * (1 + s); }
  __host__ __device__ static constexpr uint32_t v(int s) { return kTileBytes * (1 + kStages + s); }
  static constexpr uint32_t barriers = kTileBytes * (1 + 2 * kStages);
  static constexpr uint32_t q_full = barriers;
  __host__ __device__ static constexpr uint32_t k_full(int s) { return barriers + 8 * (1 + s); }
  __host__ __device__ static constexpr uint32_t v_full(int s) { return barriers + 8 * (1 + kStages + s); }
  __host__ __device__ static constexpr uint32_t kv_empty(int s) { return barriers + 8 * (1 + 2 * kStages + s); }
  static constexpr uint32_t used = barriers + 8 * (1 + 3 * kStages);
  static constexpr size_t dynamic_bytes = used + 1024;  // + slack to align the base
};
static_assert(SmemLayout<64>::dynamic_bytes <= 227 * 1024 && SmemLayout<128>::dynamic_bytes <= 227 * 1024,
              "more shared memory than a Hopper block can have");

#if GPT_HOPPER_DEVICE_CODE
// ---- device: PTX wrappers (the shared primitives are in hopper.cuh) ------------------
// Shared-memory operands are 32-bit shared-window addresses (hopper::shared_address).

// Box (64 columns x 128 rows x 1 batch) at element coordinates (column, row, batch) of
// the tensor map -> shared memory at dst; completion counted in bytes on `bar`.
__device__ __forceinline__ void tma_load_box(uint32_t dst, const CUtensorMap* map, int column, int row,
                                             int batch, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(column), "r"(row), "r"(batch), "r"(bar)
      : "memory");
}

// Shared-memory matrix descriptors, 128-byte swizzle (bit layout: hopper.cuh).
// K-major operand (Q as A, K as B: rows of 64 contiguous head columns): consecutive
//   8-row groups are kAtomBytes apart (stride offset); the leading offset is unused
//   with this swizzle (1 by convention). The 16 columns of k-step kk are selected by
//   moving the start address 32*(kk % 4) bytes into the row: the hardware applies the
//   swizzle to the final address, which is why every box is 1024-aligned.
// MN-major operand (V as B: key rows of 64 contiguous head columns, N = head column):
//   8-key groups are kAtomBytes apart (stride offset); the two 64-column blocks of
//   hs = 128 are a box apart (leading offset).
__device__ __forceinline__ uint64_t matrix_descriptor(uint32_t address, uint32_t leading_bytes,
                                                      uint32_t stride_bytes) {
  return uint64_t((address >> 4) & 0x3FFF) | uint64_t((leading_bytes >> 4) & 0x3FFF) << 16 |
         uint64_t((stride_bytes >> 4) & 0x3FFF) << 32 | uint64_t(1) << 62;
}
__device__ __forceinline__ uint64_t k_major_descriptor(uint32_t address) {
  return matrix_descriptor(address, 16, kAtomBytes);
}
__device__ __forceinline__ uint64_t mn_major_descriptor(uint32_t address) {
  return matrix_descriptor(address, kBoxBytes, kAtomBytes);
}

// Accumulator operand lists: N/2 fp32 registers per thread for a 64 x N tile.
#define GPT_V5_F8(d, i)                                                                      \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define GPT_V5_ACC32(d) GPT_V5_F8(d, 0), GPT_V5_F8(d, 8), GPT_V5_F8(d, 16), GPT_V5_F8(d, 24)
#define GPT_V5_ACC64(d) \
  GPT_V5_ACC32(d), GPT_V5_F8(d, 32), GPT_V5_F8(d, 40), GPT_V5_F8(d, 48), GPT_V5_F8(d, 56)
#define GPT_V5_ACC32_LIST                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define GPT_V5_ACC64_LIST                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"

// d (64 x 128) = A B (+ d if accumulate), A and B K-major in shared memory: S = Q K^T.
__device__ __forceinline__ void wgmma_128_smem_smem(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n .reg .pred acc;\n setp.ne.b32 acc, %66, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " GPT_V5_ACC64_LIST
      ", %64, %65, acc, 1, 1, 0, 0;\n}"
      : GPT_V5_ACC64(d)
      : "l"(a), "l"(b), "r"(accumulate));
}
// d (64 x N) = A B (+ d if accumulate), A (64 x 16 bf16) in registers, B MN-major in
// shared memory (transpose bit 1, the last immediate): O += P V.
__device__ __forceinline__ void wgmma_regs_smem(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                                int accumulate) {
  asm volatile(
      "{\n .reg .pred acc;\n setp.ne.b32 acc, %37, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GPT_V5_ACC32_LIST
      ", {%32, %33, %34, %35}, %36, acc, 1, 1, 1;\n}"
      : GPT_V5_ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_regs_smem(float (&d)[64], const uint32_t (&a)[4], uint64_t b,
                                                int accumulate) {
  asm volatile(
      "{\n .reg .pred acc;\n setp.ne.b32 acc, %69, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " GPT_V5_ACC64_LIST
      ", {%64, %65, %66, %67}, %68, acc, 1, 1, 1;\n}"
      : GPT_V5_ACC64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo -> low 16 bits
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(kFullMask, x, 1);
  return x + __shfl_xor_sync(kFullMask, x, 2);
}

// ---- device: the producer ------------------------------------------------------------

// One thread: the Q tile once, then K_j and V_j for j = 0..n_tiles-1 through the ring.
template <int HS>
__device__ void produce(const CUtensorMap* map, uint32_t base, int b, int h, int C, int q0, int n_tiles) {
  using L = SmemLayout<HS>;
  hopper::prefetch_tensor_map(map);
  // Columns of head h in the (3C)-wide rows: q at h*HS, k at C + h*HS, v at 2C + h*HS;
  // box c of a tile covers the head's columns 64c .. 64c+63.
  hopper::mbarrier_arrive_expect_tx(base + L::q_full, L::kTileBytes);
#pragma unroll
  for (int c = 0; c < L::kColumnBlocks; ++c)
    tma_load_box(base + L::q + c * kBoxBytes, map, h * HS + c * kSwizzleCols, q0, b, base + L::q_full);

  int stage = 0;
  uint32_t round_parity = 0;  // (j / kStages) & 1
  for (int j = 0; j < n_tiles; ++j) {
    hopper::mbarrier_wait(base + L::kv_empty(stage), round_parity ^ 1);  // tile j - kStages released
    // Box bytes count in full even where rows past T are zero-filled.
    hopper::mbarrier_arrive_expect_tx(base + L::k_full(stage), L::kTileBytes);
#pragma unroll
    for (int c = 0; c < L::kColumnBlocks; ++c)
      tma_load_box(base + L::k(stage) + c * kBoxBytes, map, C + h * HS + c * kSwizzleCols, j * kBc, b,
                   base + L::k_full(stage));
    hopper::mbarrier_arrive_expect_tx(base + L::v_full(stage), L::kTileBytes);
#pragma unroll
    for (int c = 0; c < L::kColumnBlocks; ++c)
      tma_load_box(base + L::v(stage) + c * kBoxBytes, map, 2 * C + h * HS + c * kSwizzleCols, j * kBc, b,
                   base + L::v_full(stage));
    if (++stage == L::kStages) {
      stage = 0;
      round_parity ^= 1;
    }
  }
}

// ---- device: the consumers -----------------------------------------------------------
// Fragment ownership (wgmma accumulator, 64 x N, per warpgroup): thread lane = 4g + q of
// warp wq (0..3 in the warpgroup) holds, for every 8-column block n8,
//   acc[4*n8 + 0], acc[4*n8 + 1]   row 16wq + g,     columns 8*n8 + 2q, 8*n8 + 2q + 1
//   acc[4*n8 + 2], acc[4*n8 + 3]   row 16wq + g + 8, the same columns
// The A operand from registers (64 x 16 bf16, k-step kk) wants, per thread,
//   a[0] = row g, cols 2q..2q+1   a[1] = row g+8, cols 2q..2q+1
//   a[2] = row g, cols 8+2q..     a[3] = row g+8, cols 8+2q..
// i.e. accumulator blocks n8 = 2kk (a[0], a[1]) and 2kk+1 (a[2], a[3]) of S.

// S = Q_w K^T for this warpgroup's 64 rows: HS/16 k-steps of 16 head columns.
template <int HS>
__device__ __forceinline__ void compute_scores(float (&s)[kBc / 2], uint32_t q_rows, uint32_t k_tile) {
  hopper::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    const uint32_t column_offset = (kk / 4) * kBoxBytes + (kk % 4) * 32;  // box, then 32 B = 16 cols
    wgmma_128_smem_smem(s, k_major_descriptor(q_rows + column_offset),
                        k_major_descriptor(k_tile + column_offset), kk > 0);
  }
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
  hopper::pin_registers(s);
}

// Keys u > t (causal) and u >= T (tail, zero-filled rows of K) score -inf.
__device__ __forceinline__ void mask_scores(float (&s)[kBc / 2], int k0, int row_lo, int q, int T_) {
#pragma unroll
  for (int n8 = 0; n8 < kBc / 8; ++n8)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int u = k0 + 8 * n8 + 2 * q + e;
      if (u > row_lo || u >= T_) s[4 * n8 + e] = -INFINITY;
      if (u > row_lo + 8 || u >= T_) s[4 * n8 + 2 + e] = -INFINITY;
    }
}

// Online softmax step for the thread's two rows (half = 0: row g, 1: row g + 8). On
// return s holds p = exp(scale*(s - m_new)), O and l are rescaled by exp(scale*(m - m_new)).
// Invariant that keeps this NaN-free: every row sees at least key k0 of every tile it
// visits (k0 <= q0 <= t and k0 < T), so m_new is finite; m = -inf only before the first
// tile, where the factor exp2(-inf) = 0 multiplies O = 0 and l = 0.
template <int HS>
__device__ __forceinline__ void online_softmax(float (&s)[kBc / 2], float (&o)[HS / 2], float (&m)[2],
                                               float (&l)[2], float scale_log2) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float m_new = m[half];
#pragma unroll
    for (int n8 = 0; n8 < kBc / 8; ++n8)
      m_new = fmaxf(m_new, fmaxf(s[4 * n8 + 2 * half], s[4 * n8 + 2 * half + 1]));
    m_new = quad_max(m_new);
    const float rescale = exp2f((m[half] - m_new) * scale_log2);
    const float m_scaled = m_new * scale_log2;
    m[half] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n8 = 0; n8 < kBc / 8; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[4 * n8 + 2 * half + e];
        x = exp2f(fmaf(x, scale_log2, -m_scaled));  // -inf -> 0
        sum += x;
      }
    l[half] = l[half] * rescale + sum;  // this thread's partial sum of the row
#pragma unroll
    for (int n8 = 0; n8 < HS / 8; ++n8) {
      o[4 * n8 + 2 * half] *= rescale;
      o[4 * n8 + 2 * half + 1] *= rescale;
    }
  }
}

// O += P V: P (64 x 128) from registers in Bc/16 k-steps of 16 keys; V k-step kk is
// key rows 16kk..16kk+15 of the tile, two 8-row swizzle atoms, 2 KiB into each box.
template <int HS>
__device__ __forceinline__ void accumulate_pv(float (&o)[HS / 2], float (&s)[kBc / 2], uint32_t v_tile) {
  uint32_t p[kBc / 16][4];
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk) {
    p[kk][0] = pack_bf16x2(s[8 * kk + 0], s[8 * kk + 1]);
    p[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
    p[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
    p[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
  }
  hopper::pin_registers(p);
  hopper::pin_registers(o);
  hopper::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk)
    wgmma_regs_smem(o, p[kk], mn_major_descriptor(v_tile + kk * 2 * kAtomBytes), 1);
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
  hopper::pin_registers(o);
}

// Normalise and store the thread's two rows: out in bf16 pairs (columns 8n8+2q, +1),
// lse by the quad's first thread. Rows past T (zero-filled Q) are computed, not written.
template <int HS>
__device__ __forceinline__ void store_rows(const float (&o)[HS / 2], const float (&m)[2], float (&l)[2],
                                           bf16* out, float* lse, int b, int h, int bh, int T_, int C,
                                           int row_lo, int q, float scale) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float l_row = quad_sum(l[half]);  // all lanes take part in the shuffles
    const int t = row_lo + 8 * half;
    if (t >= T_) continue;
    const float inv = 1.0f / l_row;
    bf16* y = out + out_at(b, t, h, T_, C, HS) + 2 * q;
#pragma unroll
    for (int n8 = 0; n8 < HS / 8; ++n8)
      *reinterpret_cast<uint32_t*>(y + 8 * n8) =
          pack_bf16x2(o[4 * n8 + 2 * half] * inv, o[4 * n8 + 2 * half + 1] * inv);
    if (q == 0) lse[size_t(bh) * T_ + t] = m[half] * scale + logf(l_row);
  }
}

// Consumer warpgroup `w` (0 or 1): rows q0 + 64w .. q0 + 64w + 63 of the query tile.
template <int HS>
__device__ void consume(uint32_t base, bf16* out, float* lse, int b, int h, int bh, int T_, int C, int q0,
                        int n_tiles, float scale, int w) {
  using L = SmemLayout<HS>;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int first_row = q0 + kRowsPerConsumer * w;
  const int row_lo = first_row + 16 * warp + g;  // and row_lo + 8
  const float scale_log2 = scale * 1.4426950408889634f;
  // This warpgroup's 64 rows start 64*128 bytes (8 swizzle atoms) into each Q box.
  const uint32_t q_rows = base + L::q + kRowsPerConsumer * kSwizzleRowBytes * w;

  float o[HS / 2], s[kBc / 2], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < HS / 2; ++i) o[i] = 0.0f;

  hopper::mbarrier_wait(base + L::q_full, 0);
  int stage = 0;
  uint32_t round_parity = 0;
  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = j * kBc;
    hopper::mbarrier_wait(base + L::k_full(stage), round_parity);
    compute_scores<HS>(s, q_rows, base + L::k(stage));
    // Only a tile reaching past this warpgroup's first row (the diagonal) or past T
    // has anything to mask; the others are entirely visible.
    if (k0 + kBc - 1 > first_row || k0 + kBc > T_) mask_scores(s, k0, row_lo, q, T_);
    online_softmax<HS>(s, o, m, l, scale_log2);
    hopper::mbarrier_wait(base + L::v_full(stage), round_parity);
    accumulate_pv<HS>(o, s, base + L::v(stage));
    // Both products of this stage are complete (wgmma_wait<0>): hand it back.
    if (lane == 0) hopper::mbarrier_arrive(base + L::kv_empty(stage));
    if (++stage == L::kStages) {
      stage = 0;
      round_parity ^= 1;
    }
  }
  store_rows<HS>(o, m, l, out, lse, b, h, bh, T_, C, row_lo, q, scale);
}
#endif  // GPT_HOPPER_DEVICE_CODE

// ---- the kernel ------------------------------------------------------------------------

// __launch_bounds__(384, 1) caps registers at entry (65536 / 384 -> 168), which is what
// lets setmaxnreg re-divide them; each warpgroup's role is one branch of one if/else.
template <int HS>
__global__ void __launch_bounds__(kThreads, 1)
    flash_forward_wgmma_kernel(const __grid_constant__ CUtensorMap qkv_map, bf16* out, float* lse, int T_,
                               int C, int NH, float scale) {
#if GPT_HOPPER_DEVICE_CODE
  using L = SmemLayout<HS>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (hopper::shared_address(smem_raw) + 1023u) & ~1023u;

  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q_tile = gridDim.x - 1 - blockIdx.x;  // heaviest tiles first
  const int q0 = q_tile * kBr;
  // Causal: key tiles 0 .. (last query row) / kBc; k0 <= last row < T for each.
  const int n_tiles = (min(q0 + kBr, T_) - 1) / kBc + 1;

  if (threadIdx.x == 0) {
    hopper::mbarrier_init(base + L::q_full, 1);  // the producer's arrive.expect_tx
    for (int s = 0; s < L::kStages; ++s) {
      hopper::mbarrier_init(base + L::k_full(s), 1);
      hopper::mbarrier_init(base + L::v_full(s), 1);
      hopper::mbarrier_init(base + L::kv_empty(s), 4 * kConsumers);  // lane 0 of each consumer warp
    }
    hopper::fence_barrier_init();  // visible to the copy engine (the async proxy)
  }
  __syncthreads();  // the last block-wide barrier: the producer's idle warps exit below

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    hopper::setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x == 0) produce<HS>(&qkv_map, base, b, h, C, q0, n_tiles);
  } else {
    hopper::setmaxnreg_inc<kConsumerRegisters>();
    consume<HS>(base, out, lse, b, h, bh, T_, C, q0, n_tiles, scale, warpgroup - 1);
  }
#else
  __trap();  // no sm_90a code in this pass: never launched (attention_forward_v5 checks build and device)
#endif
}

// ---- host ------------------------------------------------------------------------------

// qkv seen as a 3-D tensor (column 0..3C-1, position t 0..T-1, batch 0..B-1): batches
// are their own dimension, so a box that runs past T reads zeros, not the next
// sequence. Boxes are 64 columns (128 bytes, the swizzle width) x 128 rows.
CUtensorMap make_qkv_map(const bf16* qkv, int B, int T_, int C) {
  const cuuint64_t row_bytes = 3 * cuuint64_t(C) * sizeof(bf16);
  const cuuint64_t dims[3] = {3 * cuuint64_t(C), cuuint64_t(T_), cuuint64_t(B)};
  const cuuint64_t strides[2] = {row_bytes, row_bytes * cuuint64_t(T_)};  // of dims 1, 2 (bytes)
  const cuuint32_t box[3] = {kSwizzleCols, 128, 1};
  return hopper::bf16_swizzle128_tensor_map<3>("attention_forward_v5", qkv, dims, strides, box);
}

template <int HS>
void launch(bf16* out, float* lse, const bf16* qkv, int B, int T_, int C, int NH, cudaStream_t stream) {
  const CUtensorMap map = make_qkv_map(qkv, B, T_, C);
  constexpr size_t smem = SmemLayout<HS>::dynamic_bytes;
  GPT_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_wgmma_kernel<HS>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(ceil_div(T_, kBr), unsigned(B * NH));
  const float scale = 1.0f / std::sqrt(float(HS));
  flash_forward_wgmma_kernel<HS><<<grid, kThreads, smem, stream>>>(map, out, lse, T_, C, NH, scale);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace attention_v5

template <class T>
void attention_forward_v5(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, cudaStream_t stream) {
  static_assert(std::is_same_v<T, __nv_bfloat16>, "attention_forward_v5 is bf16 only (wgmma bf16 inputs)");
  const char* fn = "attention_forward_v5";
  const int hs = attention_head_size(fn, B, T_, C, NH, false);  // hs = 64 or 128
  // TMA reads from a 16-byte aligned base; out is written in 4-byte bf16 pairs.
  if (reinterpret_cast<uintptr_t>(qkv) % 16 != 0)
    throw std::invalid_argument(std::string(fn) + ": qkv must be 16-byte aligned (TMA)");
  if (reinterpret_cast<uintptr_t>(out) % 4 != 0)
    throw std::invalid_argument(std::string(fn) + ": out must be 4-byte aligned");
  hopper::require_hopper(fn);
  if (hs == 64)
    attention_v5::launch<64>(out, lse, qkv, B, T_, C, NH, stream);
  else
    attention_v5::launch<128>(out, lse, qkv, B, T_, C, NH, stream);
}

template void attention_forward_v5<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, int, int, int,
                                                  int, cudaStream_t);

}  // namespace gpt::cuda
