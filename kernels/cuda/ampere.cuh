/// @file
/// The sm_80 (Ampere) instructions the two mma.sync kernels are built from, GEMM v4
/// (kernels/cuda/gemm/v4_mma_sync.cu) and the attention v4 forward and backward
/// (kernels/cuda/attention/v4_mma_sync.cu), each wrapped once with what it does. They
/// also run on Hopper (sm_90), which keeps them beside its own wgmma (hopper.cuh).
///
/// ```
/// cp.async: a copy from global to shared memory that does not pass through registers
///   and does not stall the thread: copies are grouped (commit_group) and the thread
///   later waits until at most N of its groups are still in flight (wait_group N). The
///   copies of a group are visible to the other threads of the block only after the
///   __syncthreads() that follows the wait. A copy reads src_bytes (0 up to its size)
///   and zero-fills the rest, so a tile row past the matrix's edge becomes zeros without
///   a branch; its source address must still be a mapped one.
/// ldmatrix.x4: each of the warp's 32 lanes names the shared-memory address of one row
///   of 8 bf16 (16 bytes): lanes 0-7 the rows of matrix 0, 8-15 of matrix 1, and so on.
///   Lane t then holds, in register i, row t / 4 and columns 2 (t % 4) and 2 (t % 4) + 1
///   of matrix i: the layout of an mma fragment. .trans delivers the matrices transposed.
/// mma.sync.m16n8k16 (bf16 in, fp32 accumulate): the warp multiplies a 16 x 16 A (four
///   registers a lane) by a 16 x 8 B (two registers a lane) into a 16 x 8 fp32
///   accumulator (four floats a lane), in the fragment layouts of the PTX ISA.
/// ```
///
/// The "memory" clobbers keep the compiler from moving a shared-memory access across the
/// waits and barriers that make it valid: the asm reads and writes memory the compiler
/// cannot see.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace gpt::cuda::ampere {

/// The shared-memory address (a 32-bit offset in the shared window) of a generic pointer
/// into shared memory, as cp.async and ldmatrix take it.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

/// 16 bytes from global memory to shared memory, asynchronously; the bytes past
/// src_bytes (0..16) are zeros. .cg: cached in L2 only (the tile is reused from shared
/// memory, not from L1).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

/// 4 bytes (one fp32) the same way, src_bytes 0 or 4; .cg takes only 16-byte copies, .ca
/// (cached in L1 too) takes 4.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

/// Closes the group of this thread's cp.async copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/// Blocks until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

/// Four 8 x 8 bf16 matrices from shared memory into mma fragments (reg[i]: matrix i);
/// kTrans: each matrix transposed on the way.
template <bool kTrans = false>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&reg)[4], uint32_t address) {
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(reg[0]), "=r"(reg[1]), "=r"(reg[2]), "=r"(reg[3])
                 : "r"(address)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(reg[0]), "=r"(reg[1]), "=r"(reg[2]), "=r"(reg[3])
                 : "r"(address)
                 : "memory");
}

/// acc (16 x 8, fp32) += a (16 x 16, bf16) . b (16 x 8, bf16: b0 its rows 0-7, b1 8-15).
__device__ __forceinline__ void mma_m16n8k16(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace gpt::cuda::ampere
