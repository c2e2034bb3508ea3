/// @file
/// Device-side helpers every CUDA kernel of the project shares: error checks, the
/// fp32 <-> storage-type conversions, the GELU formula and warp reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/bf16.h"

namespace gpt::cuda {

// ---- host side: storage types ---------------------------------------------------------

/// Host code names bf16 storage gpt::bf16 (common/bf16.h, no CUDA headers needed);
/// kernels use CUDA's __nv_bfloat16, the same 16 bits. device_ptr() converts a host API
/// pointer into the kernels' type: float stays float.
template <class A>
struct DeviceTypeOf {
  using type = A;  ///< every type but gpt::bf16 is its own kernel type
};
/// gpt::bf16 storage is CUDA's __nv_bfloat16 in kernels.
template <>
struct DeviceTypeOf<gpt::bf16> {
  using type = __nv_bfloat16;  ///< the same 16 bits, CUDA's type
};
/// The kernels' type for host storage type A.
template <class A>
using DeviceType = typename DeviceTypeOf<A>::type;
static_assert(sizeof(__nv_bfloat16) == sizeof(gpt::bf16), "bf16 layouts differ");

/// p as a pointer to the kernels' type (a reinterpret_cast; the bits are the same).
template <class A>
DeviceType<A>* device_ptr(A* p) { return reinterpret_cast<DeviceType<A>*>(p); }
/// p as a pointer to the kernels' type, const (a reinterpret_cast; the bits are the same).
template <class A>
const DeviceType<A>* device_ptr(const A* p) { return reinterpret_cast<const DeviceType<A>*>(p); }

// ---- host side: errors ------------------------------------------------------------

/// A failed CUDA call is a bug or a broken device, not bad input: it throws with the call
/// and its place, and the program's top level reports it (exit status 1).
inline void check(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what +
                             ": " + cudaGetErrorString(err));
}
/// Runs a CUDA runtime call and throws std::runtime_error naming it and this place if it fails.
#define GPT_CUDA_CHECK(call) ::gpt::cuda::check((call), #call, __FILE__, __LINE__)
/// A launch returns nothing: a bad configuration (too many threads, too much shared
/// memory) is reported by the next cudaGetLastError.
#define GPT_CUDA_CHECK_LAUNCH() ::gpt::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/// n / d rounded up (n >= 0, d > 0): the blocks of d threads that cover n items.
inline unsigned ceil_div(long n, long d) { return unsigned((n + d - 1) / d); }

/// Whether p is 16-byte aligned, as a 128-bit access (and cp.async.cg, ldmatrix, TMA) needs.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
/// Whether every pointer is 16-byte aligned: the `vec` flag a launcher passes.
template <class... P>
bool all_aligned16(const P*... p) {
  return (aligned16(p) && ...);
}

// ---- device side: conversions -------------------------------------------------------

/// All computation is fp32; tensors are float or bf16 in memory.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }  ///< exact

/// fp32 to storage type T (float or __nv_bfloat16).
template <class T>
__device__ __forceinline__ T from_float(float x);
/// To float: x unchanged.
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
/// To bf16: rounded to nearest, ties to even.
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);  // round to nearest even, as the CPU's bf16_round
}

/// Backward ops accumulate into input gradients (kernels/ops.h): x += delta, in fp32.
template <class T>
__device__ __forceinline__ void add_to(T* x, float delta) {
  *x = from_float<T>(to_float(*x) + delta);
}

// ---- device side: math --------------------------------------------------------------

/// GELU, tanh form (as GPT-2 and kernels/cpu/elementwise.cpp):
/// ```
///   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
///   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
/// ```
__device__ __forceinline__ float gelu(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
/// gelu'(x), the derivative above.
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  const float th = tanhf(u);
  return 0.5f * (1.0f + th) +
         0.5f * x * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

// ---- device side: warp reductions ------------------------------------------------------

constexpr unsigned kFullMask = 0xffffffffu;  ///< all 32 lanes of a warp take part in a shuffle

/// Butterfly reductions: after log2(32) = 5 exchanges every lane holds the result.
/// The order of the additions is fixed, so the result is the same run to run.
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}
/// The sum of x over the warp's 32 lanes, in every lane.
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

}  // namespace gpt::cuda
