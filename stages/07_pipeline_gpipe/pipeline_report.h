// What a pipeline run measures about itself: the bubble (the idle share of a step) per
// rank against the theory, and the micro-batches each rank keeps in flight.
//
// The bubble of rank r over a step:  1 - (time r computes) / (the step's makespan),
// the makespan being the time from a common start (a barrier) until the last rank of the
// pipeline has run its schedule. Theory, with equal stages (whatever the forward and
// backward times): (p - 1) / (m + p - 1) for GPipe and 1F1B.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/gpt2.h"
#include "common/memory.h"
#include "stages/07_pipeline_gpipe/schedule.h"

namespace gpt {

class BubbleMeter {
 public:
  explicit BubbleMeter(Communicator& pp) : pp_(pp) {}
  void start();                 // collective over pp: a barrier, then the clock
  void stop(double busy_s);     // collective over pp: the step's makespan
  // Per rank, the bubble over the steps measured (all but the first when there are
  // several: it pays for first touches), and the theory for the pipeline's mean costs
  // (each rank's `mine`, averaged over pp), as a line; collective over pp.
  using Theory = std::function<double(const PipeCosts&)>;
  std::string report(const Theory& theory, const PipeCosts& mine);  // "" when no step ran

 private:
  Communicator& pp_;
  double start_s_ = 0;
  std::vector<double> busy_s_, makespan_s_;  // per step
};

// One line about this rank's activations: the micro-batches it held in flight at most
// (with several chunks, the (micro-batch, chunk) pairs: "chunk activations"), counted by
// the executor, against the schedule's bound, and the activation bytes of
// its model chunks (one before stage 09), plus `shared_bytes` of activation buffers the
// chunks share (stage 11's recompute working set).
template <class A>
std::string in_flight_line(int world_rank, int pp_rank, int pp, int expected, int measured,
                           const std::vector<const GPT2<A>*>& chunks, const MemoryLedger& mem,
                           size_t shared_bytes = 0);

// Prints every rank's `line` from the world's rank 0, in rank order (collective).
void print_from_every_rank(Communicator& world, const std::string& line);

}  // namespace gpt
