// What a pipeline run needs from its config, checked before anything is built, and the
// partition of the layers it prints.
#pragma once
#include <string>

#include "common/config.h"

namespace gpt {

// UserErrors naming the key: n_layer below pp x virtual_stages (every virtual stage runs
// at least one layer); zero=3; fewer micro-batches than a schedule can run.
// ZeRO-2 runs: it reduces each micro-batch's gradients as its backward finishes a unit,
// except the tied wte's, which the first and the last stage first sum once a step
// (tied_embedding.h). ZeRO-3 is refused: its store gathers each unit with a prefetch that
// expects the passes in model order (forward 0..L, backward L..0, one pass after the
// other), and a schedule interleaves forwards and backwards of different micro-batches.
void check_pipeline(const Config& cfg, int pp, int micro_batches);

// One line per pipeline stage: its layers, and what else it holds.
std::string stage_table(const ModelConfig& model, int pp, int virtual_stages = 1);

}  // namespace gpt
