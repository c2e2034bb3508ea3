/// @file
/// A checkpoint's weights into one whole model, as the tools that run a checkpoint on one
/// device (eval_choices, sample) need them. Checkpoints are whole tensors by name
/// (docs/checkpoints.md), so a checkpoint of any stage in any layout loads here.
#pragma once
#include <string>

#include "common/checkpoint.h"
#include "common/gpt2.h"

namespace gpt {

/// Reads the weights of `checkpoint` (a step_N directory) into `model`, whose shape must be
/// the checkpoint's (checkpoint_model): read in the model's master type (an fp64 file is
/// rounded for fp32 and bf16, an fp32 file widened for fp64), staged through the host for a
/// GPU, rounded to bf16 in bf16 mode (GPT2::set_params). Returns the checkpoint's state
/// (its step, its sampling counter). A damaged checkpoint is a UserError naming it.
template <class A>
CheckpointState load_checkpoint_weights(GPT2<A>& model, const std::string& checkpoint);

}  // namespace gpt
