/// @file
/// exp(x) for float, written so the compiler can vectorise loops that call it (the C
/// library's expf is an opaque call that keeps a loop scalar). Method:
/// ```
///   x = n ln2 + r,  n = round(x / ln2),  |r| <= ln2/2
///   (the rounding adds and subtracts 1.5 * 2^23: between 2^23 and 2^24 a float's ulp is
///   1, so the addition rounds to an integer, with no call that would keep a loop scalar)
///   exp(x) = 2^n * exp(r),  exp(r) by its Taylor polynomial to degree 7 (Horner)
/// ```
/// The truncation error r^8/8! <= 5.2e-9 (|r| <= ln2/2) is below float's half-ulp (6e-8), so the result
/// is within about 2 ulp of the true value; 2^n is built directly in the exponent bits.
/// Inputs are clamped to the range where the result is a normal float.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace gpt::cpu {

/// exp(x) by the method above, within about 2 ulp; x is clamped to [-87, 88] first, so
/// the result is never 0 nor infinite. NaN gives NaN.
inline float exp_fast(float input) {
  // NaN takes the path of 0, then is given back; the selects compile to vector blends.
  const bool nan = input != input;
  float x = nan ? 0.0f : input;
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float shifted = x * 1.44269504f + kRound;   // in [2^23, 2^24): an integer
  const float n = shifted - kRound;                  // round(x / ln2), exactly
  // r = x - n*ln2 in two parts (ln2 = hi + lo), so r keeps full precision.
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // n as an integer: the low bits of `shifted` (both floats share the binade of kRound).
  const int32_t n_int = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound);
  const int32_t bits = (n_int + 127) * (1 << 23);
  const float result = p * std::bit_cast<float>(bits);
  return nan ? input : result;
}

/// The accurate library exp for double (the ground truth), the fast one for float.
inline float exp_t(float x) { return exp_fast(x); }
inline double exp_t(double x) { return std::exp(x); }  ///< std::exp, for the fp64 ground truth

}  // namespace gpt::cpu
