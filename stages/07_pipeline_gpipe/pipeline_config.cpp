// Pipeline config checks and the partition table; see pipeline_config.h.
#include "stages/07_pipeline_gpipe/pipeline_config.h"

#include <algorithm>
#include <string>

#include "common/comm.h"
#include "common/error.h"

namespace gpt {

LayerRange stage_layers(int n_layer, int stages, int stage) {
  invariant(stages >= 1 && stage >= 0 && stage < stages && n_layer >= stages,
            "stage_layers: stage " + std::to_string(stage) + " of " + std::to_string(stages) + " over " +
                std::to_string(n_layer) + " layers");
  const int base = n_layer / stages, extra = n_layer % stages;
  const int begin = stage * base + std::min(stage, extra);
  return {begin, begin + base + (stage < extra ? 1 : 0)};
}

void check_pipeline(const Config& cfg, int pp, int micro_batches) {
  const int v = cfg.virtual_stages;
  // First: the other checks' remedies (more layers, fewer micro-batches) would not help.
  require(v == 1 || pp > 1, "virtual_stages=" + std::to_string(v) +
                                ": model chunks interleave across pipeline ranks; with pp=1 use virtual_stages=1");
  require(cfg.model.n_layer >= int64_t(pp) * v,
          "n_layer=" + std::to_string(cfg.model.n_layer) + " is less than pp=" + std::to_string(pp) +
              (v > 1 ? " x virtual_stages=" + std::to_string(v) : "") +
              ": every pipeline stage needs at least one layer");
  require(micro_batches >= 1, "batch_size=" + std::to_string(cfg.batch_size) +
                                  " gives no micro-batch per data-parallel rank (micro_batch_size x dp is larger)");
  // Every (micro-batch, chunk, direction) has a tag of its own (pipe_message_tag), and
  // tags stop at kMaxTag.
  if (2 * int64_t(micro_batches) * v - 1 > kMaxTag) {
    std::string what = std::to_string(micro_batches) + " micro-batches per data-parallel rank";
    if (v > 1) what += " x virtual_stages=" + std::to_string(v);
    fail("batch_size=" + std::to_string(cfg.batch_size) + " makes " + what +
         ", more than the pipeline's message tags can name (2 per micro-batch and chunk, at most " +
         std::to_string(kMaxTag + 1) + "): raise micro_batch_size or lower batch_size");
  }
}

std::string stage_table(const ModelConfig& model, int pp, int virtual_stages) {
  const int stages = pp * virtual_stages;
  std::string out = "pipeline stages (" + std::to_string(model.n_layer) + " layers over " + std::to_string(stages) +
                    (virtual_stages > 1 ? " virtual stages):\n" : " stages):\n");
  for (int s = 0; s < stages; ++s) {
    const LayerRange r = stage_layers(model.n_layer, stages, s);
    // The pipeline rank (the position along pp), not the job's rank: with tp or dp > 1
    // several ranks hold each stage (the mesh, common/mesh.h).
    out += "  stage " + std::to_string(s) + " (pipeline rank " + std::to_string(s % pp) +
           (virtual_stages > 1 ? ", chunk " + std::to_string(s / pp) : "") + "): layers " + std::to_string(r.begin) +
           ".." + std::to_string(r.end - 1);
    if (s == 0) out += " + embeddings (wte, wpe)";
    if (s == stages - 1) out += " + ln_f and the tied head (wte)";
    out += "\n";
  }
  return out;
}

}  // namespace gpt
