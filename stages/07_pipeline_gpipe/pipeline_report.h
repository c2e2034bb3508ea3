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
#include "common/comm_counter.h"
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
// the executor, against the schedule's bound, the activation bytes of its model chunks
// (one before stage 09), plus `shared_bytes` of activation buffers the chunks share
// (stage 11's recompute working set) and once the block pool they share (common/
// block_pool.h), its activation slots (with several chunks, each chunk's too, and the
// pool's sets: "6 slots: 4 + 2 by chunk, blocks' activations in 4 shared sets"), and the
// peak memory in all.
template <class A>
std::string in_flight_line(int world_rank, int pp_rank, int pp, int expected, int measured,
                           const std::vector<const GPT2<A>*>& chunks, const MemoryLedger& mem,
                           size_t shared_bytes = 0);

// The line under it: the rank's peaks by kind in bytes (each rank holds its own layers,
// the ends wte as well), the weights, gradients, optimizer state and activations beside
// `formula` (LocalZero::memory_formula, summed over the rank's chunks, with_activations; a
// kind the formula leaves at 0 has no closed form there and shows "-"), then buffers (and
// eval, once the run has evaluated).
std::string memory_line(const MemoryLedger& mem, const MemoryLedger& formula);

// `formula` with the activations of the rank's `chunks` set: stage 06's activation_memory
// of each chunk's part (its layers, ends, slots, recompute mode and split backward), and
// once the working set its chunks share when they recompute into one (stage 11) and the
// block pool they share (block_pool_memory).
template <class A>
MemoryLedger with_activations(MemoryLedger formula, const std::vector<const GPT2<A>*>& chunks);

// Prints every rank's `line` (its first 1023 characters) from the world's rank 0, in rank order
// (collective).
void print_from_every_rank(Communicator& world, const std::string& line);

// One step's pipeline traffic on rank `rank` of p, as a CountingCommunicator around the
// executor's pp communicator counts it. Chunk c of this rank is virtual stage s = c p + rank
// of v p. For each of m micro-batches, at each such s:
//     s > 0        the activation received, its gradient sent back:    2 messages
//     s < v p - 1  the activation sent on, its gradient received:      2 messages
// each of `message` elements (B T C, or B T C / tp rows under sequence parallelism) of
// the activations' type; an isend and an irecv count theirs. Then, on the first and the
// last rank, wte's gradient (wte_count elements of the gradients' type) all-reduced
// between the two by stage 02's ring (ring_all_reduce_traffic, group of 2). A middle
// rank moves 4 m v messages: v times what GPipe and 1F1B send, the price of the
// interleaved schedule's smaller bubble; the schedule's order changes none of it.
CommTally pipeline_traffic(int p, int v, int m, int rank, size_t message, DType activations, size_t wte_count,
                           DType gradients);

// Collective over world: prints, from world rank 0, that rank's `counted` traffic of step
// `step` beside `formula` as a table headed "KIND communication", then one line per rank,
// its calls and bytes over all operations, counted | formula (the pipeline's end ranks and
// middle ones differ, and so do their layers and what ZeRO moves of them).
void print_traffic_by_rank(Communicator& world, const char* kind, int64_t step, const CommTally& counted,
                           const CommTally& formula);

// The passes that model chunk `chunk` runs in a step of `schedule`, in its order: a
// forward, or a backward (each half of a split backward is a backward pass of its own,
// acquiring the chunk's weights again). What ZeRO-3 gathers depends on it
// (LocalZero::step_traffic).
std::vector<Pass> chunk_passes(const PipeSchedule& schedule, int chunk);

}  // namespace gpt
