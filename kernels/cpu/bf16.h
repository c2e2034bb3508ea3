/// @file
/// bf16 (bfloat16): the top 16 bits of an IEEE fp32 — 8 exponent bits, 7 mantissa bits.
/// Rounding fp32 to bf16, to nearest with ties to even, works on the bit pattern:
/// add 0x7FFF plus the lowest kept bit, then clear the low 16 bits. A carry out of the
/// mantissa correctly bumps the exponent (up to infinity for the largest values).
/// NaN is kept a (quiet) NaN instead of being rounded.
#pragma once
#include <cstdint>
#include <cstring>

#include "common/bf16.h"

namespace gpt::cpu {

/// The bf16 bit pattern of x rounded to nearest, ties to even; a NaN stays a quiet NaN
/// of the same sign.
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return uint16_t((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// The fp32 value of the bf16 bits b (exact: the low 16 bits are zero).
inline float bf16_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

/// x rounded to the nearest bf16 value (ties to even), as an fp32.
inline float bf16_round(float x) { return bf16_to_float(bf16_bits(x)); }

/// An operand's value in arithmetic type T: itself, or a stored bf16 widened (exactly),
/// for kernels that read fp32 or bf16 storage alike.
template <class T>
inline T widen(T x) {
  return x;
}
/// The fp32 value of a stored bf16 (exact).
inline float widen(bf16 x) { return bf16_to_float(x.bits); }

}  // namespace gpt::cpu
