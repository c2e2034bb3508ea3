/// @file
/// 16-byte vector loads and stores: how the memory-bound kernels (elementwise, AdamW,
/// embedding, layernorm, cross-entropy) move their bytes.
///
/// A kernel that reads and writes a few numbers per element and does little arithmetic
/// runs at the speed of memory, so what matters is how the bytes move. Every thread
/// moves 16 bytes per array with one 128-bit load or store: a "pack" of K = 4 floats or
/// 8 bf16, the widest access a thread can make.
///
/// ```
///   thread i  ->  elements [K i, K i + K)          (K = 16 bytes / element size)
///   warp      ->  32 consecutive packs = 512 contiguous bytes per array (coalesced)
/// ```
///
/// Compared with one element per thread, a 128-bit access issues 4x (fp32) or 8x (bf16)
/// fewer load instructions for the same bytes and keeps more bytes in flight per thread,
/// which is what hides DRAM latency.
///
/// 128-bit accesses need 16-byte aligned addresses. cudaMalloc returns 256-byte aligned
/// buffers, but callers pass views into larger buffers, so alignment is checked on the
/// host at run time and handed to the kernel as a flag (`vec`): an unaligned call, and
/// the last partial pack of a size that is not a multiple of K, go element by element
/// (the scalar tail). Values are converted to fp32 as they are loaded and rounded to the
/// storage type (bf16: to nearest even) once, as they are stored.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"

namespace gpt::cuda {

// ---- device side: packs ------------------------------------------------------------------

/// 16 bytes of T, moved by one 128-bit load or store.
template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);  ///< elements per pack: 4 floats or 8 bf16
  T v[kSize];  ///< the elements, in memory order
};
template <class T>
inline constexpr int kPack = Pack<T>::kSize;  ///< 4 for float, 8 for bf16

/// One 128-bit load of the pack at p, which must be 16-byte aligned.
template <class T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {  // p: 16-byte aligned
  Pack<T> pack;
  *reinterpret_cast<int4*>(&pack) = *reinterpret_cast<const int4*>(p);
  return pack;
}
/// One 128-bit store of pack at p, which must be 16-byte aligned.
template <class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& pack) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&pack);
}

/// x[k] = p[i0 + k] in fp32, k < K; elements at or past n read as 0. With vec (p is
/// 16-byte aligned, i0 a multiple of K, K a multiple of the pack) whole packs are loaded.
template <int K, class T>
__device__ __forceinline__ void load_floats(float (&x)[K], const T* p, size_t i0, size_t n, bool vec) {
  constexpr int P = kPack<T>;
  static_assert(K % P == 0, "K must be a whole number of packs");
  if (vec && i0 + K <= n) {
#pragma unroll
    for (int q = 0; q < K / P; ++q) {
      const Pack<T> pack = load_pack(p + i0 + q * P);
#pragma unroll
      for (int k = 0; k < P; ++k) x[q * P + k] = to_float(pack.v[k]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) x[k] = i0 + k < n ? to_float(p[i0 + k]) : 0.0f;
  }
}

/// p[i0 + k] = x[k] (rounded to T), k < K and i0 + k < n; whole packs when vec.
template <int K, class T>
__device__ __forceinline__ void store_floats(T* p, const float (&x)[K], size_t i0, size_t n, bool vec) {
  constexpr int P = kPack<T>;
  static_assert(K % P == 0, "K must be a whole number of packs");
  if (vec && i0 + K <= n) {
#pragma unroll
    for (int q = 0; q < K / P; ++q) {
      Pack<T> pack;
#pragma unroll
      for (int k = 0; k < P; ++k) pack.v[k] = from_float<T>(x[q * P + k]);
      store_pack(p + i0 + q * P, pack);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (i0 + k < n) p[i0 + k] = from_float<T>(x[k]);
  }
}

/// The first of the K elements this thread owns in a one-dimensional grid.
template <int K>
__device__ __forceinline__ size_t first_element() {
  return (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * K;
}

// ---- host side: the checks every launcher makes ------------------------------------------

/// Throws std::invalid_argument "fn: arg is null".
inline void require_pointer(const void* p, const char* fn, const char* arg) {
  if (!p) throw std::invalid_argument(std::string(fn) + ": " + arg + " is null");
}

}  // namespace gpt::cuda
