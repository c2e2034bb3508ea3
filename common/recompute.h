/// @file
/// Activation checkpointing modes (the config key `activation_checkpointing`; the model's
/// side is at the top of common/gpt2.cpp). A micro-batch between its forward and its
/// backward keeps, for each block it ran, one of (values a token at tp = 1):
/// ```
///   none       every activation the backward reads        16 C values a row (+ statistics)
///   selective  all but ln1, ln2 and fch_gelu, which the   10 C values a row
///              backward rebuilds from kept tensors: two
///              layernorms and a GELU, a few elementwise
///              passes per block
///   full       only the block's output; the backward runs    1 C a row
///              the block's whole forward again (about a
///              third more compute)
/// ```
#pragma once
#include <string>

#include "common/error.h"

namespace gpt {

/// What a micro-batch keeps of a block's activations; see the table above.
enum class Recompute { None, Selective, Full };

/// The mode the config value s names ("none", "selective" or "full"); anything else is a
/// UserError naming the key.
inline Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::None;
  if (s == "selective") return Recompute::Selective;
  if (s == "full") return Recompute::Full;
  fail("activation_checkpointing: '" + s + "' is not a mode (expected none, selective or full)");
}
/// The config's spelling of r: "none", "selective" or "full".
inline const char* recompute_name(Recompute r) {
  return r == Recompute::None ? "none" : r == Recompute::Selective ? "selective" : "full";
}

}  // namespace gpt
