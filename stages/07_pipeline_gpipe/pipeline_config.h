// What a pipeline run needs from its config, checked before anything is built, and the
// partition of the layers it prints.
#pragma once
#include <string>

#include "common/config.h"

namespace gpt {

// UserErrors naming the key: n_layer below pp x virtual_stages (every virtual stage runs
// at least one layer); zero above 1; fewer micro-batches than a schedule can run.
// ZeRO-2 and -3 are refused. They reduce each micro-batch's gradients into the shards as
// its backward finishes a unit, so the tied wte's two halves would have to be summed
// between the first and the last stage inside every backward; there the last stage would
// wait for the first, which waits for the gradient the last has not sent yet (see
// tied_embedding.h). ZeRO-3's prefetch also expects passes in model order, which a
// schedule interleaves. DeepSpeed refuses the same combinations.
void check_pipeline(const Config& cfg, int pp, int micro_batches);

// One line per pipeline stage: its layers, and what else it holds.
std::string stage_table(const ModelConfig& model, int pp, int virtual_stages = 1);

}  // namespace gpt
