// The schedules by name; see schedules.h.
#include "stages/09_pipeline_interleaved/schedules.h"

#include <algorithm>

#include "common/error.h"
#include "stages/08_pipeline_1f1b/schedule_1f1b.h"
#include "stages/09_pipeline_interleaved/schedule_interleaved.h"
#include "stages/09_pipeline_interleaved/schedule_zero_bubble.h"

namespace gpt {

const std::vector<std::string>& pipeline_schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved", "zb-h1"};
  return names;
}

std::string configured_schedule(const Config& cfg) { return cfg.schedule.empty() ? "interleaved" : cfg.schedule; }

void check_pipeline_schedule(const std::string& name, int v) {
  const auto& names = pipeline_schedule_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string allowed;
    for (const std::string& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
    fail("schedule=" + name + ": unknown pipeline schedule (one of " + allowed + ")");
  }
  require(v >= 1, "virtual_stages=" + std::to_string(v) + ": must be >= 1");
  require(name == "interleaved" || v == 1, "schedule=" + name + " runs one model chunk per rank (virtual_stages=" +
                                               std::to_string(v) + "; use schedule=interleaved for more)");
}

PipeSchedule pipeline_schedule(const std::string& name, int p, int rank, int m, int v) {
  check_pipeline_schedule(name, v);
  if (name == "gpipe") return gpipe_schedule(p, rank, m);
  if (name == "1f1b") return one_f_one_b_schedule(p, rank, m);
  if (name == "interleaved") return interleaved_schedule(p, rank, m, v);
  return zb_h1_schedule(p, rank, m);
}

double pipeline_theory_bubble(const std::string& name, int p, int m, int v, const PipeCosts& costs) {
  check_pipeline_schedule(name, v);
  if (name == "interleaved") return interleaved_bubble(p, m, v);
  if (name == "zb-h1") return zb_h1_bubble(p, m, costs);
  return pipeline_bubble(p, m);
}

int pipeline_theory_in_flight(const std::string& name, int p, int rank, int m, int v) {
  check_pipeline_schedule(name, v);
  if (name == "gpipe") return gpipe_max_in_flight(m);
  if (name == "1f1b") return one_f_one_b_max_in_flight(p, rank, m);
  if (name == "interleaved") return interleaved_max_in_flight(p, rank, m, v);
  return zb_h1_max_in_flight(p, m);
}

}  // namespace gpt
