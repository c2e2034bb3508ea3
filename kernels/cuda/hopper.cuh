/// @file
/// Hopper (sm_90a) building blocks shared by the two v5 kernels, GEMM v5
/// (kernels/cuda/gemm/v5_wgmma.cu) and the attention v5 forward pass
/// (kernels/cuda/attention/v5_wgmma_forward.cu). Both have the same shape: a producer
/// warpgroup asks the TMA engine for tiles, consumer warpgroups multiply them with
/// wgmma, and mbarriers tell each side when a shared-memory stage is full or free. What
/// the two kernels do differently (tile shapes, TMA box rank, wgmma shapes, descriptor
/// strides) stays in their files; the primitives below are the part that is the same.
///
/// ```
/// mbarrier: a 64-bit object in shared memory that counts two things for its current
///   phase: arrivals still expected (set at init) and transaction bytes still expected.
///   When both reach zero the phase completes: the arrival count is reloaded, and the
///   phase number goes up by one. A waiter cannot name a phase by its number, only by its
///   parity: try_wait.parity(p) succeeds once the most recent phase of parity p has
///   completed, i.e. while the barrier's current phase has parity p ^ 1. A fresh barrier
///   is in phase 0, so a wait on parity 0 blocks until phase 0 completes, and a wait on
///   parity 1 returns at once (the "phase -1" before it counts as complete). A ring of
///   stages uses this as: round r of stage s waits for parity r & 1. One bit is enough
///   as long as no side can run two phases ahead of the other, which each kernel's
///   pipeline comment argues for itself.
/// ```
/// ```
/// expect_tx and TMA: the producer's arrive.expect_tx(bytes) is one arrival and raises
///   the phase's transaction count by `bytes`; each cp.async.bulk.tensor copy names the
///   barrier and lowers that count by the bytes it writes (complete_tx) when they land.
///   The phase (the "stage is full" event) therefore completes only once every byte of
///   the stage is in shared memory. TMA copies a box of a tensor described by a
///   CUtensorMap, a 128-byte opaque object encoded on the host (cuTensorMapEncodeTiled,
///   below) and passed to the kernel as a __grid_constant__ parameter; the engine
///   computes every address, zero-fills what lies outside the tensor and writes the box
///   already swizzled.
/// ```
/// ```
/// Barrier init: mbarrier.init is an ordinary shared-memory write, and the TMA engine
///   reads barriers through the "async proxy"; fence_barrier_init() makes the
///   initialised barriers visible to the other threads and to that proxy before anyone
///   uses them (the kernels follow it with __syncthreads()).
/// ```
/// ```
/// setmaxnreg: at launch every warp gets the kernel's register count (with
///   __launch_bounds__(threads, 1), at most 65536 / threads). A producer that only issues copies needs few, the
///   consumers holding accumulators need many: .dec gives a warpgroup's surplus back to
///   the SM's pool, .inc waits until the pool can grant the larger count. The counts are
///   compile-time immediates, multiples of 8 in [24, 256], and all four warps of a
///   warpgroup execute the instruction together (.sync.aligned).
/// ```
/// ```
/// wgmma: wgmma.mma_async is issued by a whole warpgroup and runs asynchronously; the
///   discipline around it is
///     wgmma_fence()      before the first wgmma that reads registers (accumulators, an
///                        A operand from registers) written by ordinary instructions;
///     wgmma ... wgmma    issue the products;
///     wgmma_commit()     close them into one "group";
///     wgmma_wait<N>()    block until at most N committed groups are still running.
///   Between issue and wait the accumulator registers belong to the tensor cores: no
///   instruction may read or write them. The compiler does not know that (it sees the
///   wgmma asm statement as the writer), so pin_registers() puts an empty asm that
///   "modifies" each register next to the fence and the wait: no read of an accumulator
///   can be hoisted above the wait, no write sunk below the fence.
/// ```
/// ```
/// Shared-memory matrix descriptor: how wgmma finds an operand in shared memory, a
///   64-bit value (addresses and offsets in units of 16 bytes, 14 bits each):
///     bits  0-13  start address >> 4
///     bits 16-29  leading dimension byte offset (LBO) >> 4
///     bits 32-45  stride dimension byte offset (SBO) >> 4
///     bits 49-51  base offset (0 here: every swizzle pattern starts 1024-byte aligned)
///     bits 62-63  layout: 0 interleaved (none), 1 128-byte swizzle, 2 64-byte, 3 32-byte
///   Both kernels use the 128-byte swizzle (layout 1), the layout that TMA's
///   CU_TENSOR_MAP_SWIZZLE_128B writes: in each 128-byte row, 16-byte chunk c is stored
///   at chunk c ^ (row % 8), the pattern repeating every 8 rows = 1024 bytes. SBO is the
///   distance between consecutive 8-row groups; LBO, for an MN-major operand, the
///   distance between its 64-element (128-byte) blocks along M or N (unused, 16 by
///   convention, for a K-major operand). Which LBO and SBO an operand needs is the
///   kernel's business, and so is the encoder: each kernel packs its own descriptors
///   (the same bits; merging the two spellings would reorder one kernel's shift and
///   mask instructions, so they stay apart).
/// ```
///
/// Everything on the device side exists only where sm_90a instructions do:
/// GPT_HOPPER_DEVICE_CODE is 1 in the sm_90a compilation pass and 0 in the host pass and
/// in the other passes (sm_80, plain sm_90), whose kernels compile to a trap that the host
/// never launches: require_hopper refuses any device that is not compute capability 9.x,
/// and every device in a build without sm_90a code (a plain sm_90 binary on an H100
/// would otherwise run the trap).
#pragma once
#include <cuda.h>  // CUtensorMap and its enums (types only: libcuda is not linked)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
/// 1: the sm_90a compilation pass, where the Hopper instructions exist.
#define GPT_HOPPER_DEVICE_CODE 1
#else
/// 0 in the host pass and the sm_80 pass: the device code below is left out (see above).
#define GPT_HOPPER_DEVICE_CODE 0
#endif

namespace gpt::cuda::hopper {

#if GPT_HOPPER_DEVICE_CODE
// ---- device: shared-memory addresses --------------------------------------------------

/// The PTX below addresses shared memory with 32-bit shared-window addresses (what
/// cvta.to.shared makes of a generic pointer), not with generic 64-bit pointers.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- device: mbarriers ----------------------------------------------------------------

/// A barrier whose phases complete after `arrivals` arrivals (plus the expected bytes).
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

/// After the last mbarrier_init: the barriers become visible to the other threads and to
/// the async proxy (the TMA engine completes transactions on them).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/// One arrival that also announces `bytes` more bytes of transactions for this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/// Returns once the most recent phase of parity `parity` has completed. try_wait may
/// give up after a hardware time limit without the phase completing, hence the loop.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n"
        ".reg .pred complete;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
        "selp.u32 %0, 1, 0, complete;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// ---- device: TMA ----------------------------------------------------------------------

/// Brings the 128-byte tensor map into the cache before the first copy needs it. (The
/// copies themselves, cp.async.bulk.tensor.{2d,3d}, stay with the kernels: their rank
/// and coordinates are each kernel's own.)
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- device: register reallocation ----------------------------------------------------

/// Lowers this warpgroup's registers per thread to kRegisters (gives the rest back).
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
/// Raises this warpgroup's registers per thread to kRegisters (waits for the pool).
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// ---- device: wgmma async-group discipline ---------------------------------------------

/// Orders this warpgroup's earlier register writes before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
/// Closes the wgmma issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
/// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

/// A compiler-only fence: each register's value is "produced" here, so the compiler can
/// neither hoist a read of an accumulator above the wait that completes it nor sink a
/// write below the wgmma_fence that must follow it. No instruction is emitted.
template <int N>
__device__ __forceinline__ void pin_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N, int M>
__device__ __forceinline__ void pin_registers(uint32_t (&r)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

#endif  // GPT_HOPPER_DEVICE_CODE

// ---- host: tensor maps ----------------------------------------------------------------

/// The driver's tensor-map encoder. cuTensorMapEncodeTiled is a driver function; the
/// runtime hands out its address, so the program needs no -lcuda. Looked up once;
/// `caller` names the kernel in the error when the driver lacks it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(const char* caller) {
  static void* const encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    GPT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    return found == cudaDriverEntryPointSuccess ? fn : nullptr;
  }();
  if (encode == nullptr) throw std::runtime_error(std::string(caller) + ": the driver has no cuTensorMapEncodeTiled");
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(encode);
}

/// Tensor map of a bf16 tensor of rank kRank read in boxes written with the 128-byte
/// swizzle (what a layout-1 descriptor reads back). dims and box are innermost first, in
/// elements; strides are the byte strides of dimensions 1 .. kRank-1 (dimension 0 is
/// contiguous). Every element of a box is taken (element strides 1), and elements
/// outside dims read as zero (OOB fill NONE means "zeros", not NaN).
template <int kRank>
CUtensorMap bf16_swizzle128_tensor_map(const char* caller, const void* base, const cuuint64_t (&dims)[kRank],
                                       const cuuint64_t (&strides)[kRank - 1], const cuuint32_t (&box)[kRank]) {
  static_assert(kRank >= 2 && kRank <= 5, "TMA tensors have rank 2 to 5 here");
  cuuint32_t element_strides[kRank];
  for (int i = 0; i < kRank; ++i) element_strides[i] = 1;
  CUtensorMap map;
  const CUresult r = tensor_map_encoder(caller)(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kRank, const_cast<void*>(base),
                                                dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string(caller) + ": cuTensorMapEncodeTiled failed (CUresult " +
                             std::to_string(int(r)) + ")");
  return map;
}

// ---- host: the device check -----------------------------------------------------------

/// The kernels exist only as sm_90a code: a build without it (GPT_HAVE_SM90A, set by
/// kernels/cuda/CMakeLists.txt when GPT_CUDA_ARCHS has 90a), and any device that is not
/// compute capability 9.x, are refused with std::invalid_argument naming the caller,
/// before a launch could trap.
inline void require_hopper(const char* caller) {
#ifndef GPT_HAVE_SM90A
  throw std::invalid_argument(std::string(caller) +
                              ": this build has no sm_90a code (add 90a to CMAKE_CUDA_ARCHITECTURES)");
#else
  int device = 0, major = 0, minor = 0;
  GPT_CUDA_CHECK(cudaGetDevice(&device));
  GPT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  GPT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9)
    throw std::invalid_argument(std::string(caller) + ": needs a Hopper GPU (compute capability 9.x); device " +
                                std::to_string(device) + " is " + std::to_string(major) + "." +
                                std::to_string(minor));
#endif
}

}  // namespace gpt::cuda::hopper
