// Prints a pipeline schedule of stages 07-09 as a text timeline of all ranks on the
// simulated machine, with each rank's bubble and most activations in flight next to
// the theory (schedules.h).
//
//   pipeline_schedule [--schedule gpipe|1f1b|interleaved|zb-h1] [--pp P] [--micro M]
//                     [--virtual V] [--tf F] [--tb B] [--tw W]
//
// Costs are a rank's whole share of the model: forward tF, input gradient tB, weight
// gradient tW (a plain backward takes tB + tW; a chunk of v takes 1/v of each).
// e.g. build/bin/pipeline_schedule --schedule interleaved --pp 4 --micro 8 --virtual 2
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "common/cli.h"
#include "common/error.h"
#include "stages/09_pipeline_interleaved/schedules.h"

using namespace gpt;

namespace {

constexpr const char* kUsage =
    "usage: pipeline_schedule [--schedule gpipe|1f1b|interleaved|zb-h1] [--pp P] [--micro M]\n"
    "                         [--virtual V] [--tf F] [--tb B] [--tw W]\n"
    "Prints the schedule as a text timeline of all ranks (P <= 64, M <= 1024, V <= 16: a\n"
    "timeline one can read), with each rank's bubble and activations in flight.\n";

// The whole of `text` as an integer in [lo, hi], or an error naming the option.
int parse_int(const std::string& option, const std::string& text, int lo, int hi) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  require(ec == std::errc() && end == text.data() + text.size() && value >= lo && value <= hi,
          option + " " + text + ": expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return value;
}

// The whole of `text` as a finite number, or an error naming the option.
double parse_real(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  require(!text.empty() && end == text.c_str() + text.size() && std::isfinite(value),
          option + " " + text + ": expected a number");
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main("pipeline_schedule", [&] {
    if (asks_for_help(argc, argv)) {
      std::printf("%s", kUsage);
      return 0;
    }
    std::string name = "gpipe";
    int p = 4, m = 8, v = 1;
    // PipeCosts' own machine (a backward twice a forward), its backward split in two equal
    // halves so that ZB-H1 has a weight half to defer; a plain Backward costs tB + tW = 2.
    PipeCosts costs{1, 1, 1};
    std::set<std::string> given;  // an option given twice is a mistake, whichever value was meant
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const bool known = a == "--schedule" || a == "--pp" || a == "--micro" || a == "--virtual" || a == "--tf" ||
                         a == "--tb" || a == "--tw";
      if (!known) fail("unknown option " + a + " (--schedule, --pp, --micro, --virtual, --tf, --tb, --tw, --help)");
      require(given.insert(a).second, "option " + a + " is given twice");
      require(i + 1 < argc, "option " + a + " needs a value");
      const std::string value = argv[++i];
      if (a == "--schedule") name = value;
      else if (a == "--pp") p = parse_int(a, value, 1, 64);
      else if (a == "--micro") m = parse_int(a, value, 1, 1024);
      else if (a == "--virtual") v = parse_int(a, value, 1, 16);
      else if (a == "--tf") costs.forward = parse_real(a, value);
      else if (a == "--tb") costs.backward_input = parse_real(a, value);
      else costs.backward_weight = parse_real(a, value);  // --tw
    }
    require(costs.forward > 0 && costs.backward_input > 0 && costs.backward_weight >= 0,
            "--tf and --tb must be positive, --tw not negative");
    // Only the costs' ratios matter; a bound keeps a schedule's sums of them finite.
    require(costs.forward <= 1e12 && costs.backward_input <= 1e12 && costs.backward_weight <= 1e12,
            "--tf, --tb and --tw must be at most 1e12 (relative costs: only their ratios matter)");
    std::vector<PipeSchedule> ranks;
    for (int r = 0; r < p; ++r) ranks.push_back(pipeline_schedule(name, p, r, m, v));
    const PipeSimulation sim = simulate_pipeline(ranks, costs, v);
    if (sim.deadlock) fail("the schedule deadlocks: " + sim.stuck);
    if (!sim.error.empty()) fail("the schedule is wrong: " + sim.error);
    std::printf("%s, pp %d, %d micro-batches, %d chunk%s per rank; forward %.3g, backward %.3g + %.3g (input + "
                "weights)\n(F3: forward of micro-batch 3, B3: its backward (input gradient only where W3 follows), "
                "W3: its weight gradient%s; dashes continue an action)\n",
                name.c_str(), p, m, v, v == 1 ? "" : "s", costs.forward, costs.backward_input, costs.backward_weight,
                v > 1 ? "; a, b, ...: the rank's chunk" : "");
    std::printf("%s", sim.timeline.c_str());
    const double theory = pipeline_theory_bubble(name, p, m, v, costs);
    if (name == "zb-h1" && costs.backward_weight > std::min(costs.forward, costs.backward_input))
      std::printf("(zb-h1's theory assumes tW <= min(tF, tB); a longer W cannot hide in one idle slot)\n");
    for (int r = 0; r < p; ++r)
      std::printf("rank %d: bubble %.3f (theory %.3f), at most %d %s in flight (theory %d)\n", r,
                  sim.bubble[size_t(r)], theory, sim.max_in_flight[size_t(r)], v > 1 ? "chunk activations" : "micro-batches",
                  pipeline_theory_in_flight(name, p, r, m, v));
    return 0;
  });
}
