// What a pipeline run needs from its config, checked before anything is built, and the
// partition of the layers it prints.
#pragma once
#include <string>

#include "common/config.h"

namespace gpt {

// UserErrors naming the key: n_layer below pp x virtual_stages (every virtual stage runs
// at least one layer); zero above 1 (ZeRO-2 and -3 reduce or gather every micro-batch's
// gradients or weights as its backward ends; a pipeline interleaves the micro-batches of
// a step, so they would communicate m times a step instead of once: refused, as
// DeepSpeed refuses them with pipelines); fewer micro-batches than a schedule can run.
void check_pipeline(const Config& cfg, int pp, int micro_batches);

// One line per pipeline stage: its layers, and what else it holds.
std::string stage_table(const ModelConfig& model, int pp, int virtual_stages = 1);

}  // namespace gpt
