// What a pipeline run needs from its config, checked before anything is built, and the
// partition of the layers it prints.
#pragma once
#include <string>

#include "common/config.h"

namespace gpt {

// UserErrors naming the key: n_layer below pp x virtual_stages (every virtual stage runs
// at least one layer); fewer micro-batches than a schedule can run, or more than the
// message tags can name (2 m v - 1 <= kMaxTag).
// Every ZeRO stage runs: 2 and 3 reduce each micro-batch's gradients as its backward
// finishes a unit, except the tied wte's, which the first and the last stage first sum
// once a step (tied_embedding.h); 3 gathers a unit whenever a pass acquires it, in
// whatever order the schedule runs the passes (stage 07's README).
void check_pipeline(const Config& cfg, int pp, int micro_batches);

// One line per pipeline stage: its layers, and what else it holds.
std::string stage_table(const ModelConfig& model, int pp, int virtual_stages = 1);

}  // namespace gpt
