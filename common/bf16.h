/// @file
/// bf16 as a storage type for host code: 16 bits, the top half of an IEEE fp32.
/// It is layout-compatible with CUDA's __nv_bfloat16 (kernels/cuda/ reinterpret it), so
/// host code can own, copy and checkpoint bf16 buffers without CUDA headers. Host code
/// never computes in bf16: it converts (kernels/cpu/bf16.h rounds to nearest even).
///
/// GradOf<A> is the type gradients of parameters are kept in when weights and
/// activations are stored as A: fp32 for bf16 storage (docs/architecture.md, bf16 mode),
/// A otherwise.
#pragma once
#include <cstdint>
#include <type_traits>

namespace gpt {

/// A bf16 value as host code keeps it: the bit pattern only, no arithmetic (convert with
/// kernels/cpu/bf16.h; device code reinterprets it as __nv_bfloat16).
struct bf16 {
  uint16_t bits;  ///< the top 16 bits of the fp32 value: sign, 8 exponent bits, 7 mantissa bits
};
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "bf16 must match __nv_bfloat16");

/// The type parameter gradients are kept in for storage type A: float when A is bf16,
/// A itself otherwise (float, or double in the fp64 runs).
template <class A>
using GradOf = std::conditional_t<std::is_same_v<A, bf16>, float, A>;

}  // namespace gpt
