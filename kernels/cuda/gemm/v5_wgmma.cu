// GEMM v5: Hopper (sm_90a). The product of gemm.h, C = op(A) op(B) (+ C) (+ bias),
// optional GELU copy, bf16 in, fp32 accumulate, for every layout and any M, N, K >= 1.
//
// What v5 adds over v4 (mma.sync fed by cp.async), and why each step is faster:
//  * WGMMA. A warpgroup (4 consecutive warps, 128 threads) issues one asynchronous
//    `wgmma.mma_async m64n256k16`: a 64 x 256 x 16 product whose operands come straight
//    from shared memory through two 64-bit matrix descriptors. No ldmatrix, no operand
//    registers: the registers hold only the fp32 accumulators (128 per thread), and the
//    tensor cores run while the issuing warps do something else. mma.sync on Hopper
//    cannot feed the tensor cores fast enough to reach their peak; wgmma can.
//  * TMA (the bulk tensor copy engine). One thread issues `cp.async.bulk.tensor.2d` and
//    a whole tile (up to 256 x 64 elements) lands in shared memory, already swizzled,
//    rows past the matrix edge zero-filled. Address generation and bounds checks leave
//    the SMs; the copy signals its completion on an mbarrier by bytes (complete_tx).
//  * Warp specialisation. Warpgroup 0 is the producer: one of its threads issues the
//    copies, all of them give registers back (setmaxnreg.dec to kProducerRegs).
//    Warpgroups 1 and 2 are consumers: they take those registers (setmaxnreg.inc to
//    kConsumerRegs), wait for full stages, issue wgmma, release stages. Loads and math
//    overlap without the math warps ever issuing a copy.
//  * Persistence. grid = number of SMs; each CTA walks output tiles tile = blockIdx.x,
//    blockIdx.x + gridDim.x, ... in a fixed grouped order. There is no tail wave of
//    half-empty SMs beyond the last partial round, and while the consumers run the
//    epilogue of tile t the producer already streams the first stages of tile t+1.
//  * Split-K (kernels/cuda/gemm/work_order.h has the plan and its cost model). When there
//    are too few tiles to fill the SMs and K is long (the weight gradients: 768 x 768
//    over 16384 tokens is 18 tiles), K is cut into ranges and a work unit is one (tile,
//    range): the units fill the SMs, each stores its fp32 partial tile in a workspace
//    with the same epilogue code (no bias, no C), and split_k_reduce_kernel adds the
//    partials in range order and applies the real epilogue. The order is fixed, so the
//    bits repeat run to run. Only on the default stream, which orders the one workspace.
//
// Tiles. A CTA computes a kBM x kBN = 128 x 256 tile of C; consumer warpgroup c owns rows
// 64c .. 64c+63 (one m64n256 accumulator each). The K loop walks kBK = 64 columns per
// stage: 4 wgmma k16 steps. One stage = A tile (128 x 64 bf16 = 16 KB) + B tile
// (256 x 64 = 32 KB); kStages = 4 stages = 192 KB of shared memory.
//
// Pipeline (stage s = it mod S, round r = it div S, where `it` counts k-blocks over all
// tiles of the CTA in the same order on both sides). Every mbarrier starts in phase 0;
// a wait on parity p returns once the phase of parity p has completed, and on a fresh
// barrier a wait on parity 1 returns at once (the "previous" phase counts as complete).
//
//   producer (1 thread)                         consumers (2 warpgroups, 256 threads)
//   wait empty[s], parity (r&1)^1    r = 0: passes at once (stage never used)
//   arrive.expect_tx full[s], bytes  ------.
//   TMA A -> stage s  (complete_tx) -------+--> full[s] phase r completes:
//   TMA B -> stage s  (complete_tx) -------'    1 arrival + all bytes landed
//                                               wait full[s], parity r&1
//                                               wgmma x4 on stage s; commit group
//                                               wait_group 1: group of it-1 retired
//   empty[s'] phase completes  <--------------  arrive empty[s'] (s' = stage of it-1),
//   (2 arrivals: one thread per consumer)      one elected thread per warpgroup
//
// Why the parities are right: full[s] phase r completes exactly when the r-th fill of
// stage s has landed, so the consumer in round r waits for parity r&1. empty[s] phase r
// completes when both consumers released round r, which the producer needs before fill
// r+1: in round r it waits for phase r-1, parity (r-1)&1 = (r&1)^1. Neither side can run
// two phases ahead of the other (a stage is refilled only after both consumers released
// it, and released only after it was filled), so one parity bit never aliases.
//
// Shared-memory layouts and the 128-byte swizzle. TMA writes with SWIZZLE_128B: in each
// 128-byte row the 16-byte chunk c is stored at chunk c ^ (row mod 8), rows 128 bytes
// apart, the pattern repeating every 8 rows = 1024 bytes; the address bits themselves
// are swizzled, so every tile base is 1024-byte aligned. wgmma's layout type 1 (128B
// swizzle) applies the same XOR to the addresses it computes, so the two agree when:
//   K-major operand (A row-major M x K; B stored N x K): one TMA box {64 k, rows}: row
//     = one m (or n) = 64 k values = 128 bytes. Descriptor: SBO = 1024 (8 rows to the
//     next 8 rows), LBO unused (one k16 step, 32 bytes, stays inside a 128-byte row).
//     Step j (k = 16j..16j+15) starts 32j bytes into the row: the hardware XORs the
//     chunk bits (4..6) with the row bits (7..9) after adding, as TMA did.
//   MN-major operand (A stored K x M: tnspA = 1; B stored K x N: tnspB = 1): boxes
//     {64 mn, 64 k}, one per 64 columns of m (or n), 8 KB each, side by side: a row is
//     one k = 64 mn values. Descriptor: LBO = 8192 (next 64 mn values = next box),
//     SBO = 1024 (next 8 k rows). Step j starts 16j rows = 2048j bytes in: a multiple of
//     1024, so the swizzle phase is untouched.
// The transpose is done by the tensor cores reading MN-major data (tnspA/tnspB), never
// in global memory.
//
// The PTX primitives (mbarriers, setmaxnreg, the wgmma fence/commit/wait discipline),
// the host's tensor-map encoding and Hopper check are shared with attention v5 in
// kernels/cuda/hopper.cuh, which explains each of them and the descriptor's bit layout.
//
// Accumulator fragment of m64nNk16 (fp32), thread t of the warpgroup, w = t/32, l = t%32:
//   acc[4j + 2h + e] = D[16w + l/4 + 8h][8j + 2(l%4) + e],  j < N/8, h, e in {0, 1}
// so each thread owns pairs of adjacent columns: the epilogue reads and writes C two
// elements at a time (4 or 8 bytes, aligned because ldc is a multiple of 8).
//
// Tails: TMA zero-fills every element outside the tensor (rows >= M or N, columns >= K,
// padding between K and lda). Zeros in k >= K make those products vanish; stale values
// in rows >= M or columns >= N only reach outputs the epilogue never stores. Boxes that
// lie wholly outside the tensor are not issued (the expected byte count says so).
#include <cuda.h>  // CUtensorMap and its enums (types only: libcuda is not linked)

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/work_order.h"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/scratch.h"

// Device code exists only in the sm_90a pass (GPT_HOPPER_DEVICE_CODE, hopper.cuh); the
// sm_80 pass (and a plain sm_90 pass) compiles every kernel body to a trap, which the
// host never reaches: it refuses a build without sm_90a code and any device that is not
// compute capability 9.x (hopper::require_hopper).

namespace gpt::cuda {
namespace {

// ---- configuration ------------------------------------------------------------------

constexpr int kBM = 128;                 // tile rows (2 consumer warpgroups x 64)
constexpr int kBN = 256;                 // tile columns (one m64n256 per consumer)
constexpr int kBK = 64;                  // k per stage: 64 bf16 = one 128-byte row
constexpr int kStages = 4;               // 4 x 48 KB of shared memory
constexpr int kWgmmaM = 64, kWgmmaK = 16;
constexpr int kConsumers = kBM / kWgmmaM;              // 2
constexpr int kThreads = 128 * (1 + kConsumers);       // producer + consumers = 384
[[maybe_unused]] constexpr int kAccRegs = kWgmmaM * kBN / 128;  // 128 fp32 per consumer thread

// Registers: the kernel starts with 65536 / 384 = 168 per thread (launch bounds with
// min blocks 1 fix it there). The producer gives 168 - 40 back, the consumers take
// 232 - 168: 128 x 40 + 256 x 232 = 64512 <= 65536, so the .inc never waits forever.
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register pool");

constexpr int kSwizzleBytes = 128;                     // one swizzled row
constexpr int kSwizzleAtomBytes = 8 * kSwizzleBytes;   // pattern repeats every 1024 bytes
constexpr int kBoxMn = kSwizzleBytes / 2;              // 64 bf16 per 128-byte row
static_assert(kBK * 2 == kSwizzleBytes, "a K-major row is exactly one swizzle row");
static_assert(kBM == kSplitKTileM && kBN == kSplitKTileN && kBK == kSplitKBlock, "work_order.h plans v5's tiles");

constexpr int kATileBytes = kBM * kBK * 2;             // 16 KB
constexpr int kBTileBytes = kBN * kBK * 2;             // 32 KB
constexpr int kStageBytes = kATileBytes + kBTileBytes; // 48 KB
static_assert(kATileBytes % kSwizzleAtomBytes == 0 && kStageBytes % kSwizzleAtomBytes == 0,
              "every tile base stays 1024-byte aligned");
// Dynamic shared memory: the stages plus slack to round the base up to 1024 bytes.
constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + kSwizzleAtomBytes;

// ---- operand layouts (host and device) --------------------------------------------

// How one operand sits in a stage, for a K-major or an MN-major source. "Rows" below
// are the tile's m (for A) or n (for B) extent: kBM or kBN.
template <bool kMnMajor, int kRows>
struct OperandLayout {
  // K-major: one box {64 k, kRows}; MN-major: kRows / 64 boxes {64 mn, 64 k} of 8 KB.
  static constexpr int kBoxBytes = kMnMajor ? kBoxMn * kBK * 2 : kRows * kBK * 2;
  static constexpr int kBoxes = kMnMajor ? kRows / kBoxMn : 1;
  // Descriptor strides (see the opening comment). LBO = 16 bytes (field 1) where unused.
  static constexpr uint32_t kLeadingBytes = kMnMajor ? kBoxMn * kBK * 2 : 16;
  static constexpr uint32_t kStrideBytes = kSwizzleAtomBytes;
  // Byte offset of k16 step j inside the stage: 32 bytes along a row, or 16 rows.
  static constexpr uint32_t kStepBytes = kMnMajor ? kWgmmaK * kSwizzleBytes : kWgmmaK * 2;

  // Bytes the TMA delivers for a tile whose first row is mn0 (boxes wholly past the
  // edge are skipped; a partial box still delivers, and counts, all its bytes).
  __host__ __device__ static constexpr uint32_t bytes(int mn0, int mn_extent) {
    if (!kMnMajor) return kBoxBytes;
    int boxes = (mn_extent - mn0 + kBoxMn - 1) / kBoxMn;
    boxes = boxes < kBoxes ? boxes : kBoxes;
    return uint32_t(boxes) * kBoxBytes;
  }
};

// ---- persistent work order (kernels/cuda/gemm/work_order.h) ------------------------

using Order = V5WorkOrder;  // the tile order's groups: kV5GroupRows tile rows

// What the consumers need besides the tensor maps.
template <class Tout>
struct EpilogueArgs {
  int M, N, K;
  Tout* C;
  long long ldc;
  const __nv_bfloat16* bias;  // length N or null
  Tout* gelu_out;             // null, or M x N with stride ldc
  bool accumulate;
  bool gelu_pairs;            // gelu_out aligned for two-element stores
  // Split-K only: range r's partial tile goes to partials + r * partials_stride, rows
  // partials_ld apart (a multiple of 8, as ldc, for the two-element stores).
  float* partials;
  long long partials_ld, partials_stride;
};

// Which epilogue a kernel is compiled for: bits of what it adds (bias, the old C) and
// writes (gelu_out), or the partial tiles of a split K. A template argument, so each
// kernel carries one variant's code: the epilogue is unrolled over a thread's 128
// accumulators, and with every variant behind run-time branches (GELU's tanh among them)
// its code is long, executed once per tile, and streamed through the instruction cache
// each time (Nsight Compute: 38 % of qkv.fwd's issue stalls were instruction fetches).
enum EpilogueKind : int {
  kEpiloguePlain = 0,        // C = acc
  kEpilogueBias = 1,         // + bias
  kEpilogueAccumulate = 2,   // + the old C
  kEpilogueGelu = 4,         // and gelu_out (never with kEpilogueAccumulate)
  kEpiloguePartials = 8,     // split K: the range's partial tile, nothing added
};

#if GPT_HOPPER_DEVICE_CODE
// ---- PTX wrappers: 2-D TMA copy, descriptors, m64n256k16 wgmma (the rest: hopper.cuh) --

// Copies the box at element coordinates (c0 innermost, c1) of the tensor map into
// shared memory at dst; the bytes count down the transaction count of barrier bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap& map, int c0, int c1,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// Descriptor of a 128B-swizzled operand starting at shared address `start` (bit layout:
// hopper.cuh; LBO and SBO per operand: OperandLayout).
__device__ __forceinline__ uint64_t descriptor_field(uint32_t bytes) {
  return uint64_t((bytes & 0x3FFFF) >> 4);  // 14 bits, in 16-byte units
}
__device__ __forceinline__ uint64_t make_descriptor(uint32_t start, uint32_t leading_bytes,
                                                    uint32_t stride_bytes) {
  return descriptor_field(start) | descriptor_field(leading_bytes) << 16 |
         descriptor_field(stride_bytes) << 32 | uint64_t(1) << 62;
}

// acc (+)= A(64 x 16) B(16 x 256): both from shared memory through descriptors.
// accumulate = 0 overwrites acc (the first step of a tile); tnspA/tnspB = 1 read an
// MN-major operand.
template <bool kAMnMajor, bool kBMnMajor>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[kAccRegs], uint64_t desc_a, uint64_t desc_b,
                                                 uint32_t accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred keep;\n"
      "setp.ne.u32 keep, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, keep, 1, 1, %131, %132;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
        "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),
        "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
        "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),
        "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
        "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),
        "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
        "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),
        "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),
        "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),
        "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(int(kAMnMajor)), "n"(int(kBMnMajor)));
}

// ---- the pipeline ---------------------------------------------------------------------

// Stage index and phase parity of the k-block counter `it` (stage = it mod kStages,
// phase = (it div kStages) mod 2), advanced without divisions.
struct PipelineState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

struct Barriers {
  uint32_t full, empty;  // shared addresses of full[0], empty[0]; 8 bytes apart
  __device__ uint32_t full_at(int stage) const { return full + 8 * stage; }
  __device__ uint32_t empty_at(int stage) const { return empty + 8 * stage; }
};

// full[s]: 1 arrival (the producer's arrive.expect_tx) + the stage's bytes.
// empty[s]: one arrival per consumer warpgroup.
__device__ void init_barriers(const Barriers& bars) {
  for (int s = 0; s < kStages; ++s) {
    hopper::mbarrier_init(bars.full_at(s), 1);
    hopper::mbarrier_init(bars.empty_at(s), kConsumers);
  }
  hopper::fence_barrier_init();
}

// Issues the boxes of one operand for one stage: K-major, one box at (k0, mn0);
// MN-major, one box per 64 columns at (mn0 + 64i, k0), 8 KB apart, the boxes wholly
// past the edge skipped (OperandLayout::bytes counts the same boxes).
template <bool kMnMajor, int kRows>
__device__ __forceinline__ void load_operand(const CUtensorMap& map, uint32_t dst, uint32_t bar, int mn0,
                                             int mn_extent, int k0) {
  using Layout = OperandLayout<kMnMajor, kRows>;
  if constexpr (kMnMajor) {
#pragma unroll
    for (int i = 0; i < Layout::kBoxes; ++i)
      if (mn0 + i * kBoxMn < mn_extent) tma_load_2d(dst + i * Layout::kBoxBytes, map, mn0 + i * kBoxMn, k0, bar);
  } else {
    tma_load_2d(dst, map, k0, mn0, bar);
  }
}

// The producer: one thread walks the same tiles and k-blocks as the consumers and keeps
// up to kStages stages in flight.
template <bool kAMnMajor, bool kBMnMajor>
__device__ void run_producer(const CUtensorMap& map_a, const CUtensorMap& map_b, uint32_t stages_smem,
                             const Barriers& bars, const Order& order, int M, int N) {
  using LayoutA = OperandLayout<kAMnMajor, kBM>;
  using LayoutB = OperandLayout<kBMnMajor, kBN>;
  hopper::prefetch_tensor_map(&map_a);
  hopper::prefetch_tensor_map(&map_b);
  PipelineState state;
  for (int u = blockIdx.x; u < order.count(); u += gridDim.x) {
    int tile_m, tile_n, split, kb0, kb1;
    order.unit(u, tile_m, tile_n, split, kb0, kb1);
    const int m0 = tile_m * kBM, n0 = tile_n * kBN;
    // Invariant: the bytes announced = the bytes of the boxes issued below.
    const uint32_t stage_bytes = LayoutA::bytes(m0, M) + LayoutB::bytes(n0, N);
    for (int kb = kb0; kb < kb1; ++kb) {
      hopper::mbarrier_wait(bars.empty_at(state.stage), state.phase ^ 1);  // round r waits phase r-1
      const uint32_t full = bars.full_at(state.stage);
      hopper::mbarrier_arrive_expect_tx(full, stage_bytes);
      const uint32_t a_dst = stages_smem + state.stage * kStageBytes;
      load_operand<kAMnMajor, kBM>(map_a, a_dst, full, m0, M, kb * kBK);
      load_operand<kBMnMajor, kBN>(map_b, a_dst + kATileBytes, full, n0, N, kb * kBK);
      state.advance();
    }
  }
}

// One consumer warpgroup's product for one tile: acc = A[64 rows] . B over all k.
// One committed group stays in flight: the wgmma of k-block kb are issued before those
// of kb-1 are known to be done, and stage kb-1 is released once they are.
template <bool kAMnMajor, bool kBMnMajor>
__device__ __forceinline__ void mma_tile(float (&acc)[kAccRegs], uint32_t stages_smem, int consumer,
                                         const Barriers& bars, PipelineState& state, int k_blocks,
                                         bool signals) {
  using LayoutA = OperandLayout<kAMnMajor, kBM>;
  using LayoutB = OperandLayout<kBMnMajor, kBN>;
  // Where this warpgroup's 64 rows of A start in a stage: box `consumer` (MN-major), or
  // 64 rows of 128 bytes further per consumer (K-major). Both are multiples of 1024.
  constexpr uint32_t kConsumerRowsBytes = kAMnMajor ? LayoutA::kBoxBytes : kWgmmaM * kSwizzleBytes;
  int previous_stage = -1;
  for (int kb = 0; kb < k_blocks; ++kb) {
    hopper::mbarrier_wait(bars.full_at(state.stage), state.phase);
    const uint32_t a_start = stages_smem + state.stage * kStageBytes + consumer * kConsumerRowsBytes;
    const uint32_t b_start = stages_smem + state.stage * kStageBytes + kATileBytes;
    hopper::pin_registers(acc);
    hopper::wgmma_fence();
#pragma unroll
    for (int j = 0; j < kBK / kWgmmaK; ++j) {
      const uint64_t desc_a =
          make_descriptor(a_start + j * LayoutA::kStepBytes, LayoutA::kLeadingBytes, LayoutA::kStrideBytes);
      const uint64_t desc_b =
          make_descriptor(b_start + j * LayoutB::kStepBytes, LayoutB::kLeadingBytes, LayoutB::kStrideBytes);
      wgmma_m64n256k16<kAMnMajor, kBMnMajor>(acc, desc_a, desc_b, (kb > 0 || j > 0) ? 1u : 0u);
    }
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // the group of k-block kb-1 has finished reading its stage
    if (previous_stage >= 0 && signals) hopper::mbarrier_arrive(bars.empty_at(previous_stage));
    previous_stage = state.stage;
    state.advance();
  }
  hopper::wgmma_wait<0>();
  hopper::pin_registers(acc);
  if (signals) hopper::mbarrier_arrive(bars.empty_at(previous_stage));
}

// ---- epilogue --------------------------------------------------------------------------

__device__ __forceinline__ void load_pair(const float* p, float& a, float& b) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  a = v.x;
  b = v.y;
}
__device__ __forceinline__ void load_pair(const __nv_bfloat16* p, float& a, float& b) {
  const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(p);
  a = __low2float(v);
  b = __high2float(v);
}
__device__ __forceinline__ void store_pair(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store_pair(__nv_bfloat16* p, float a, float b) {
  __nv_bfloat162 v;
  v.x = from_float<__nv_bfloat16>(a);
  v.y = from_float<__nv_bfloat16>(b);
  *reinterpret_cast<__nv_bfloat162*>(p) = v;
}

// Writes this warpgroup's 64 x 256 accumulators to rows row0.., columns col0.. of C:
// (C +) acc + bias, and gelu_out; every element guarded by m < M, n < N.
//
// Loads first, then the arithmetic and the stores, kEpilogueChunk column groups (of 8) at
// a time. The compiler may not move a load of bias or of the old C above a store to C
// (they might alias), so a loop that loads, adds and stores one group after the other
// waits a whole memory round trip per group: 32 per tile. Nsight Compute saw it in the
// accumulating products (fcproj.dinp: half the issue stalls on L1TEX loads). Chunked, the
// chunk's loads go out together and the wait is paid once per chunk. The arithmetic is
// unchanged: v = acc + bias, then v += old C.
constexpr int kEpilogueChunk = 4;
static_assert((kBN / 8) % kEpilogueChunk == 0, "whole chunks of column groups");

template <int kKind, class Tout>
__device__ __forceinline__ void store_tile(const float (&acc)[kAccRegs], const EpilogueArgs<Tout>& ep,
                                           int row0, int col0) {
  constexpr bool kBias = kKind & kEpilogueBias, kAccumulate = kKind & kEpilogueAccumulate;
  constexpr bool kGelu = kKind & kEpilogueGelu;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int first_row = row0 + 16 * warp + lane / 4;
  const int first_col = col0 + 2 * (lane % 4);
#pragma unroll
  for (int j0 = 0; j0 < kBN / 8; j0 += kEpilogueChunk) {
    // The chunk's inputs: bias[jj][e] of column n + e, old[jj][h][e] of C at row m + 8h.
    float bias[kEpilogueChunk][2], old[kEpilogueChunk][2][2];
#pragma unroll
    for (int jj = 0; jj < kEpilogueChunk; ++jj) {
      const int n = first_col + 8 * (j0 + jj);
      const bool inside = n < ep.N, pair = n + 1 < ep.N;  // n is even: a pair is 4- or 8-byte aligned
      bias[jj][0] = bias[jj][1] = 0.0f;
      if (kBias && inside) {
        bias[jj][0] = to_float(ep.bias[n]);
        if (pair) bias[jj][1] = to_float(ep.bias[n + 1]);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = first_row + 8 * h;
        old[jj][h][0] = old[jj][h][1] = 0.0f;
        if (!kAccumulate || !inside || m >= ep.M) continue;
        const Tout* c = ep.C + m * ep.ldc + n;
        if (pair) load_pair(c, old[jj][h][0], old[jj][h][1]);
        else old[jj][h][0] = to_float(*c);
      }
    }
#pragma unroll
    for (int jj = 0; jj < kEpilogueChunk; ++jj) {
      const int j = j0 + jj, n = first_col + 8 * j;
      if (n >= ep.N) continue;
      const bool pair = n + 1 < ep.N;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = first_row + 8 * h;
        if (m >= ep.M) continue;
        float v0 = acc[4 * j + 2 * h] + bias[jj][0], v1 = acc[4 * j + 2 * h + 1] + bias[jj][1];
        if constexpr (kAccumulate) {
          v0 += old[jj][h][0];
          v1 += old[jj][h][1];
        }
        Tout* c = ep.C + m * ep.ldc + n;
        if (pair) store_pair(c, v0, v1);
        else *c = from_float<Tout>(v0);
        if constexpr (kGelu) {
          Tout* g = ep.gelu_out + m * ep.ldc + n;
          // From the fp32 pre-activation, before C's rounding: as every version and the CPU.
          const float g0 = gelu(v0), g1 = gelu(v1);
          if (pair && ep.gelu_pairs) {
            store_pair(g, g0, g1);
          } else {
            g[0] = from_float<Tout>(g0);
            if (pair) g[1] = from_float<Tout>(g1);
          }
        }
      }
    }
  }
}

// A consumer warpgroup: for each unit of the CTA, the product of its 64 rows over the
// unit's k-blocks, then the epilogue straight from registers (meanwhile the producer
// fills the next stages): into C, or, with split K, into the range's partial tile.
template <bool kAMnMajor, bool kBMnMajor, class Tout, int kKind>
__device__ void run_consumer(uint32_t stages_smem, const Barriers& bars, const Order& order,
                             const EpilogueArgs<Tout>& ep) {
  const int consumer = threadIdx.x / 128 - 1;  // which 64-row half of the tile
  const bool signals = threadIdx.x % 128 == 0; // the thread that releases stages
  float acc[kAccRegs];
#pragma unroll
  for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.0f;  // each unit overwrites it (step 0)
  PipelineState state;
  for (int u = blockIdx.x; u < order.count(); u += gridDim.x) {
    int tile_m, tile_n, split, kb0, kb1;
    order.unit(u, tile_m, tile_n, split, kb0, kb1);
    mma_tile<kAMnMajor, kBMnMajor>(acc, stages_smem, consumer, bars, state, kb1 - kb0, signals);
    const int row0 = tile_m * kBM + consumer * kWgmmaM, col0 = tile_n * kBN;
    if constexpr (kKind == kEpiloguePartials) {
      const EpilogueArgs<float> partial{ep.M, ep.N, ep.K, ep.partials + split * ep.partials_stride,
                                        ep.partials_ld, nullptr, nullptr, false, false, nullptr, 0, 0};
      store_tile<kEpiloguePlain>(acc, partial, row0, col0);
    } else {
      store_tile<kKind>(acc, ep, row0, col0);
    }
  }
}
#endif  // GPT_HOPPER_DEVICE_CODE

// kAMnMajor: A stored K x M (trans_a); kBMnMajor: B stored K x N (!trans_b); kKind: the
// epilogue (EpilogueKind bits; kEpiloguePartials when order.splits > 1).
template <bool kAMnMajor, bool kBMnMajor, class Tout, int kKind>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      const EpilogueArgs<Tout> ep, const Order order) {
#if GPT_HOPPER_DEVICE_CODE
  __shared__ __align__(8) uint64_t full_barriers[kStages];
  __shared__ __align__(8) uint64_t empty_barriers[kStages];
  extern __shared__ __align__(1024) unsigned char dynamic_smem[];
  // TMA's swizzle and the descriptors' base offset 0 both assume 1024-aligned tiles.
  const uint32_t stages_smem =
      (hopper::shared_address(dynamic_smem) + kSwizzleAtomBytes - 1) & ~uint32_t(kSwizzleAtomBytes - 1);
  const Barriers bars{hopper::shared_address(full_barriers), hopper::shared_address(empty_barriers)};

  if (threadIdx.x == 0) init_barriers(bars);
  __syncthreads();  // the last block-wide barrier: the roles below never meet again

  if (threadIdx.x < 128) {
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) run_producer<kAMnMajor, kBMnMajor>(map_a, map_b, stages_smem, bars, order, ep.M, ep.N);
  } else {
    hopper::setmaxnreg_inc<kConsumerRegs>();
    run_consumer<kAMnMajor, kBMnMajor, Tout, kKind>(stages_smem, bars, order, ep);
  }
#else
  __trap();  // no sm_90a code in this pass; the host refuses such builds and devices first
#endif
}

// Split-K's second pass, one thread per output (grid-stride): the partials of every
// range added in range order, then what store_tile does with a whole sum: + bias, + the
// old C when accumulating, the store, and gelu_out from the fp32 pre-activation.
template <class Tout>
__global__ void split_k_reduce_kernel(const EpilogueArgs<Tout> ep, int splits) {
  const long long outputs = (long long)ep.M * ep.N;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < outputs;
       i += (long long)gridDim.x * blockDim.x) {
    const long long m = i / ep.N, n = i % ep.N;
    const float* p = ep.partials + m * ep.partials_ld + n;
    float v = p[0];
    for (int r = 1; r < splits; ++r) v += p[r * ep.partials_stride];
    if (ep.bias) v += to_float(ep.bias[n]);
    Tout* c = ep.C + m * ep.ldc + n;
    if (ep.accumulate) v += to_float(*c);
    *c = from_float<Tout>(v);
    if (ep.gelu_out) ep.gelu_out[m * ep.ldc + n] = from_float<Tout>(gelu(v));
  }
}

// ---- host side --------------------------------------------------------------------------

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("gemm_v5: " + what);
}

ScratchBuffer split_k_scratch;  // the partial tiles of a split K (kernels/cuda/scratch.h)

template <class Tout>
void validate(const GemmArgs<__nv_bfloat16, Tout>& a) {
  require(a.M >= 1 && a.N >= 1 && a.K >= 1, "M, N and K must be at least 1");
  require(a.A && a.B && a.C, "A, B and C must not be null");
  require(a.lda >= (a.trans_a ? a.M : a.K), "lda is smaller than a row of the stored A");
  require(a.ldb >= (a.trans_b ? a.K : a.N), "ldb is smaller than a row of the stored B");
  require(a.ldc >= a.N, "ldc is smaller than N");
  require(a.lda % 8 == 0 && a.ldb % 8 == 0 && a.ldc % 8 == 0,
          "lda, ldb and ldc must be multiples of 8 (TMA needs 16-byte row strides)");
  require(aligned16(a.A) && aligned16(a.B) && aligned16(a.C), "A, B and C must be 16-byte aligned");
  require(!(a.gelu_out && a.accumulate), "gelu_out requires accumulate == false");
}

// Tensor map of a row-major bf16 matrix rows x cols (row stride ld elements), read in
// boxes of box_rows x box_cols with the 128-byte swizzle; elements outside rows x cols
// (the padding up to ld included) read as zero.
CUtensorMap make_tensor_map(const __nv_bfloat16* base, int rows, int cols, int ld, int box_rows, int box_cols) {
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * sizeof(__nv_bfloat16)};  // of dim 1, bytes
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  return hopper::bf16_swizzle128_tensor_map<2>("gemm_v5", base, dims, strides, box);
}

// The map and box of one operand: K-major stored (mn x K), one box {64 k, tile rows};
// MN-major stored (K x mn), boxes {64 mn, 64 k}. Must match OperandLayout.
CUtensorMap operand_map(const __nv_bfloat16* p, int ld, bool mn_major, int mn, int K, int tile_rows) {
  return mn_major ? make_tensor_map(p, K, mn, ld, kBK, kBoxMn) : make_tensor_map(p, mn, K, ld, tile_rows, kBK);
}

// The kernel of one layout, output type and epilogue kind.
template <bool kAMnMajor, bool kBMnMajor, class Tout>
auto kernel_for(int kind) {
  switch (kind) {
    case kEpiloguePlain: return wgmma_gemm_kernel<kAMnMajor, kBMnMajor, Tout, kEpiloguePlain>;
    case kEpilogueBias: return wgmma_gemm_kernel<kAMnMajor, kBMnMajor, Tout, kEpilogueBias>;
    case kEpilogueAccumulate: return wgmma_gemm_kernel<kAMnMajor, kBMnMajor, Tout, kEpilogueAccumulate>;
    case kEpilogueBias | kEpilogueAccumulate:
      return wgmma_gemm_kernel<kAMnMajor, kBMnMajor, Tout, kEpilogueBias | kEpilogueAccumulate>;
    case kEpilogueGelu: return wgmma_gemm_kernel<kAMnMajor, kBMnMajor, Tout, kEpilogueGelu>;
    case kEpilogueBias | kEpilogueGelu:
      return wgmma_gemm_kernel<kAMnMajor, kBMnMajor, Tout, kEpilogueBias | kEpilogueGelu>;
    case kEpiloguePartials: return wgmma_gemm_kernel<kAMnMajor, kBMnMajor, Tout, kEpiloguePartials>;
    default: throw std::logic_error("gemm_v5: no kernel for epilogue kind " + std::to_string(kind));
  }
}

template <bool kAMnMajor, bool kBMnMajor, class Tout>
void launch(const CUtensorMap& map_a, const CUtensorMap& map_b, const EpilogueArgs<Tout>& ep, const Order& order,
            int sms, cudaStream_t stream) {
  const int kind = order.splits > 1 ? int(kEpiloguePartials)
                                    : (ep.bias ? kEpilogueBias : 0) | (ep.accumulate ? kEpilogueAccumulate : 0) |
                                          (ep.gelu_out ? kEpilogueGelu : 0);
  auto* kernel = kernel_for<kAMnMajor, kBMnMajor, Tout>(kind);
  // Per call: a cheap attribute set, and it keeps working across devices.
  GPT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
  const int grid = order.count() < sms ? order.count() : sms;
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(map_a, map_b, ep, order);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class Tin, class Tout>
void gemm_v5(const GemmArgs<Tin, Tout>& args, cudaStream_t stream) {
  static_assert(std::is_same_v<Tin, __nv_bfloat16>, "gemm_v5 takes bf16 inputs only");
  validate(args);
  hopper::require_hopper("gemm_v5");
  int device = 0, sms = 0;
  GPT_CUDA_CHECK(cudaGetDevice(&device));
  GPT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  const bool a_mn_major = args.trans_a;   // A stored K x M
  const bool b_mn_major = !args.trans_b;  // B stored K x N
  const CUtensorMap map_a = operand_map(args.A, args.lda, a_mn_major, args.M, args.K, kBM);
  const CUtensorMap map_b = operand_map(args.B, args.ldb, b_mn_major, args.N, args.K, kBN);

  EpilogueArgs<Tout> ep{args.M, args.N, args.K, args.C, args.ldc, args.bias, args.gelu_out, args.accumulate,
                        reinterpret_cast<uintptr_t>(args.gelu_out) % (2 * sizeof(Tout)) == 0, nullptr, 0, 0};
  // Split K only on the default stream, which orders every use of the one workspace.
  const Order order = v5_work_order(args.M, args.N, args.K, sms, /*may_split=*/stream == nullptr);
  if (order.splits > 1) {
    ep.partials_ld = ceil_div(args.N, 8) * 8;
    ep.partials_stride = args.M * ep.partials_ld;
    ep.partials = split_k_scratch.as<float>(size_t(order.splits) * size_t(ep.partials_stride));
  }

  if (a_mn_major && b_mn_major) launch<true, true>(map_a, map_b, ep, order, sms, stream);
  else if (a_mn_major) launch<true, false>(map_a, map_b, ep, order, sms, stream);
  else if (b_mn_major) launch<false, true>(map_a, map_b, ep, order, sms, stream);
  else launch<false, false>(map_a, map_b, ep, order, sms, stream);
  if (order.splits > 1) {
    constexpr int kReduceThreads = 256;
    const long long blocks = ceil_div((long long)args.M * args.N, kReduceThreads);
    split_k_reduce_kernel<Tout><<<int(blocks < 8 * sms ? blocks : 8 * sms), kReduceThreads, 0, stream>>>(
        ep, order.splits);
    GPT_CUDA_CHECK_LAUNCH();
  }
}

template void gemm_v5<__nv_bfloat16, __nv_bfloat16>(const GemmArgs<__nv_bfloat16, __nv_bfloat16>&, cudaStream_t);
template void gemm_v5<__nv_bfloat16, float>(const GemmArgs<__nv_bfloat16, float>&, cudaStream_t);

}  // namespace gpt::cuda
