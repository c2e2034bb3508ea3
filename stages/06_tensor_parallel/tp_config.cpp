// The config checks of tensor parallelism; see tp_config.h.
#include "stages/06_tensor_parallel/tp_config.h"

#include <string>

#include "common/error.h"

namespace gpt {

void check_tensor_parallel(const Config& cfg) {
  const int tp = cfg.tp, H = cfg.model.n_head;
  require(tp <= H, "tp=" + std::to_string(tp) + " is greater than n_head=" + std::to_string(H) +
                       ": a tensor-parallel rank holds at least one whole attention head");
  require(H % tp == 0, "tp=" + std::to_string(tp) + " does not divide n_head=" + std::to_string(H) +
                           ": each tensor-parallel rank holds n_head/tp whole heads");
  // The row split needs B*T to divide by tp; seq_len dividing makes it hold for every
  // micro-batch size (Megatron-LM's rule, which splits the sequence dimension itself).
  if (cfg.sequence_parallel)
    require(cfg.seq_len % tp == 0, "sequence_parallel=true: seq_len=" + std::to_string(cfg.seq_len) +
                                       " does not divide by tp=" + std::to_string(tp) +
                                       " (each rank keeps 1/tp of every micro-batch's rows)");
}

}  // namespace gpt
