// Every pipeline schedule of stages 07-09 by the name the `schedule` key gives it, with
// its theory, for the trainer and the pipeline_schedule tool:
//
//   name          stage  chunks v  bubble (equal tF, tB, tW)       most held by rank r
//   gpipe         07     1         (p-1) / (m + p - 1)              m
//   1f1b          08     1         (p-1) / (m + p - 1)              min(p - r, m)
//   interleaved   09     >= 1      (p-1) / (v m + p - 1), m >= p    min(v m, (v-1) g0 + p - r) chunks
//   zb-h1         09     1         (p-1) / (3 m + p - 1), m >= p    min(p, m)
//
// (see each schedule's header for the derivations and the m < p cases).
#pragma once
#include <string>
#include <vector>

#include "common/config.h"
#include "stages/07_pipeline_gpipe/schedule.h"

namespace gpt {

// The names `schedule` accepts, in stage order.
const std::vector<std::string>& pipeline_schedule_names();

// The schedule a run of stages 09 and 11 follows: its `schedule` key, or interleaved when
// the key is unset (in stages 07 and 08 the stage is the schedule).
std::string configured_schedule(const Config& cfg);

// Refuses (a UserError naming the key) an unknown schedule, v < 1, and v > 1 for a
// schedule that has one chunk per rank: what every function below checks first, and what
// the trainers check before a run starts.
void check_pipeline_schedule(const std::string& name, int v);

// The actions of `rank` of p (v chunks each) for m micro-batches under schedule `name`.
// UserErrors name the key: those of check_pipeline_schedule, and p or m < 1.
PipeSchedule pipeline_schedule(const std::string& name, int p, int rank, int m, int v);

// The theory: the bubble on the machine of `costs` (tW is the weight-gradient part of
// a backward; only zb-h1 splits it off, and its formula holds for any costs), and
// the most (micro, chunk) activations rank r holds until its backward completes.
double pipeline_theory_bubble(const std::string& name, int p, int m, int v, const PipeCosts& costs);
int pipeline_theory_in_flight(const std::string& name, int p, int rank, int m, int v);

}  // namespace gpt
