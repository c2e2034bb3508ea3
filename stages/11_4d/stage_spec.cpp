// Stage 11's keys and limits; see stage_spec.h.
#include "stages/11_4d/stage_spec.h"

#include <string>

#include "common/error.h"
#include "common/recompute.h"
#include "stages/06_tensor_parallel/tp_config.h"
#include "stages/07_pipeline_gpipe/pipeline_config.h"
#include "stages/07_pipeline_gpipe/pipeline_executor.h"
#include "stages/09_pipeline_interleaved/schedules.h"
#include "stages/10_context_parallel/context_split.h"

namespace gpt {

void check_4d(const Config& cfg, const MeshShape& shape) {
  check_tensor_parallel(cfg);
  check_context_parallel(cfg);
  check_pipeline(cfg, shape.pp, cfg.grad_accum(shape.dp));
  const std::string schedule_name = configured_schedule(cfg);
  const PipeSchedule first_rank =  // every rank's schedule splits its backwards, or none does
      pipeline_schedule(schedule_name, shape.pp, 0, cfg.grad_accum(shape.dp), cfg.virtual_stages);
  require(!(parse_recompute(cfg.activation_checkpointing) == Recompute::Full && splits_backward(first_rank)),
          "activation_checkpointing=full with schedule=" + schedule_name + ": its weight halves run after other "
              "passes, when the recomputed activations are gone; use another schedule, or selective or none");
}

StageSpec stage_11_spec() {
  StageSpec spec{"11_4d"};
  spec.tp = true, spec.pp = true, spec.cp = true, spec.virtual_stages = true, spec.zero_key = true;
  spec.schedule_key = true, spec.activation_checkpointing_key = true;
  spec.checks = check_4d;
  return spec;
}

}  // namespace gpt
