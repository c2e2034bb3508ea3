/// @file
/// ```
/// Precision modes (docs/architecture.md: bf16 mode under "One training step", rule 8).
///  fp32: every buffer fp32 — the mode equivalence between stages is proven in.
///  bf16: the weights' compute copy, the activations and the activation gradients are
///        bf16 (stored as bf16 in every stage; the tests also emulate it, rounding fp32
///        buffers to bf16 after every op, ties to even: the same values); matmuls
///        accumulate in fp32; parameter gradients, the fp32 master weights and the AdamW
///        moments stay fp32.
///  fp64: every buffer double, on the CPU only, in stage 01: the ground truth the
///        equivalence tests derive their tolerances from (docs/architecture.md, rule 8).
/// ```
#pragma once
#include <string>

#include "common/error.h"

namespace gpt {

/// A precision mode: FP32, BF16 or FP64, as listed above.
enum class Precision { FP32, BF16, FP64 };

/// The mode the config value s names ("fp32", "bf16" or "fp64"); anything else is a UserError.
inline Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::FP32;
  if (s == "bf16") return Precision::BF16;
  if (s == "fp64") return Precision::FP64;
  fail("precision: '" + s + "' is not a precision (expected fp32, bf16 or fp64)");
}
/// The config's spelling of p: "fp32", "bf16" or "fp64".
inline const char* precision_name(Precision p) {
  return p == Precision::FP32 ? "fp32" : p == Precision::BF16 ? "bf16" : "fp64";
}

}  // namespace gpt
