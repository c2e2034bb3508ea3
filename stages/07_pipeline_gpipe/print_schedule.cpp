// Prints a pipeline schedule of schedule.h as a text timeline of all ranks, with each
// rank's bubble and most micro-batches in flight, next to the theory.
//
//   pipeline_schedule [--schedule gpipe|1f1b] [--pp P] [--micro M] [--tf F] [--tb B]
//
// e.g. build/bin/pipeline_schedule --schedule 1f1b --pp 4 --micro 8
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "stages/07_pipeline_gpipe/schedule.h"

using namespace gpt;

int main(int argc, char** argv) {
  return run_main("pipeline_schedule", [&] {
    std::string name = "gpipe";
    int p = 4, m = 8;
    double tF = 1, tB = 2;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      require(i + 1 < argc, "option " + a + " needs a value");
      const std::string v = argv[++i];
      if (a == "--schedule") name = v;
      else if (a == "--pp") p = std::atoi(v.c_str());
      else if (a == "--micro") m = std::atoi(v.c_str());
      else if (a == "--tf") tF = std::atof(v.c_str());
      else if (a == "--tb") tB = std::atof(v.c_str());
      else fail("unknown option " + a + " (--schedule, --pp, --micro, --tf, --tb)");
    }
    require(name == "gpipe" || name == "1f1b", "--schedule " + name + ": must be gpipe or 1f1b");
    require(tF > 0 && tB > 0, "--tf and --tb must be positive");
    std::vector<PipeSchedule> ranks;
    for (int r = 0; r < p; ++r) ranks.push_back(name == "gpipe" ? gpipe_schedule(p, r, m) : one_f_one_b_schedule(p, r, m));
    const PipeSimulation sim = simulate_pipeline(ranks, tF, tB);
    if (sim.deadlock) fail("the schedule deadlocks: " + sim.stuck);
    std::printf("%s, pp %d, %d micro-batches, forward %.3g, backward %.3g (F<i>: forward of micro-batch i)\n",
                name.c_str(), p, m, tF, tB);
    std::printf("%s", sim.timeline.c_str());
    for (int r = 0; r < p; ++r)
      std::printf("rank %d: bubble %.3f (theory (p-1)/(m+p-1) = %.3f), at most %d micro-batches in flight\n", r,
                  sim.bubble[size_t(r)], pipeline_bubble(p, m), sim.max_in_flight[size_t(r)]);
    return 0;
  });
}
