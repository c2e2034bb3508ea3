/// @file
/// Weights that are not numbers. One NaN or infinity among a model's weights or an
/// optimizer's moments makes every later loss NaN, and an evaluation of it meaningless
/// (a NaN loss compares false with everything: the "likeliest" completion is then the
/// first). So files are checked where they are read: a checkpoint's tensors, an llm.c
/// model file's.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/error.h"

namespace gpt {

/// x with all its digits (%.17g): -1e-300 must not print as -0.000000.
inline std::string number_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}

/// The index of the first of values[0..n) that is NaN or infinite, or n when all are finite.
template <class T>  // float or double
int64_t first_not_finite(const T* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i])) return i;
  return n;
}

/// A UserError naming `what` (a tensor and its file), the first of values[0..n) that
/// is NaN or infinite, its index and `why_here` (what the file may come from), unless all are finite.
template <class T>  // float or double
void require_finite(const T* values, int64_t n, const std::string& what, const std::string& why_here) {
  if (const int64_t i = first_not_finite(values, n); i < n)
    fail(what + " holds " + (std::isnan(values[i]) ? "NaN" : "an infinity") + " at element " + std::to_string(i) +
         " of " + std::to_string(n) + ": no model trains or evaluates from values that are not numbers (" +
         why_here + ")");
}

/// A UserError when `value`, a result computed from a model's weights (`what`: "step 12:
/// the validation loss"), is NaN or infinite, saying what it means (`meaning`).
inline void require_finite_result(double value, const std::string& what, const std::string& meaning) {
  if (!std::isfinite(value)) fail(what + " is " + number_text(value) + ": " + meaning);
}

/// A UserError naming `what` (an adam_v tensor and its file) and the first negative
/// value: second moments are running means of squares, and the update divides by their
/// square root.
template <class T>  // float or double
void require_not_negative(const T* values, int64_t n, const std::string& what) {
  for (int64_t i = 0; i < n; ++i)
    if (values[i] < 0)
      fail(what + " holds " + number_text(double(values[i])) + " at element " + std::to_string(i) + " of " +
           std::to_string(n) + ": second moments are means of squares, never negative (the update takes their root)");
}

}  // namespace gpt
