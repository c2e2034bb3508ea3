// What a pipeline run needs from its config, checked before anything is built, and the
// partition of the layers it prints.
#pragma once
#include <string>

#include "common/config.h"
#include "common/gpt2_layout.h"

namespace gpt {

// UserErrors naming the key: chunks without a pipeline (virtual_stages > 1 at pp = 1),
// n_layer below pp x virtual_stages (every virtual stage runs at least one layer), no
// micro-batch at all (m < 1), or more micro-batches than the message tags can name
// (2 m v - 1 <= kMaxTag).
void check_pipeline(const Config& cfg, int pp, int micro_batches);

// The layers pipeline stage `stage` of `stages` (a virtual stage, with chunks) runs:
// n_layer split as evenly as possible, the first n_layer mod stages stages taking one
// more (the last stage also runs the head).
LayerRange stage_layers(int n_layer, int stages, int stage);

// One line per pipeline stage: its layers, and what else it holds.
std::string stage_table(const ModelConfig& model, int pp, int virtual_stages = 1);

}  // namespace gpt
