// Pipeline schedules as data (stages 07-09): for each rank, the ordered list of what it
// does in one training step: the forward or backward of micro-batch i on its model
// chunk c, and the messages around them. A schedule is a pure function of (p, rank, m)
// (and v, the chunks per rank, for the interleaved schedule of stage 09), so it can be
// printed, tested and simulated without a model; one executor runs any of them.
//
// The pipeline: p ranks hold consecutive ranges of layers (stages); micro-batch i's
// activation goes rank 0 -> 1 -> ... -> p-1 in forward, its gradient back in backward.
//
//   GPipe (Huang et al. 2019):  all m forwards, then all m backwards. Rank r keeps the
//       activations of all m micro-batches until their backward: m in flight.
//   1F1B (Narayanan et al. 2021, PipeDream-Flush): rank r runs min(p - r - 1, m)
//       warm-up forwards, then alternates one forward and one backward, then drains the
//       backwards. A micro-batch's backward starts as soon as its gradient can arrive,
//       so rank r holds at most min(p - r, m) micro-batches' activations.
//
// Both keep every rank idle for the same bubble: with forward time tF and backward tB,
// a step lasts (m + p - 1)(tF + tB) of which each rank computes m (tF + tB), so
//
//   bubble = (p - 1) / (m + p - 1)
//
// 1F1B's gain is memory, not time. Backwards run in micro-batch order 0, 1, ..., m-1 in
// both, so gradients accumulate in the order of the non-pipelined run (its bits).
//
// Messages: every send is non-blocking and every receive is posted before the compute
// that precedes its use would block on it, so no order of arrival can deadlock; each
// message's tag names its micro-batch, chunk and direction (message_tag).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

enum class PipeOp { Forward, Backward, SendActivation, RecvActivation, SendGradient, RecvGradient };
const char* pipe_op_name(PipeOp op);

struct PipeAction {
  PipeOp op;
  int micro = 0;  // micro-batch
  int chunk = 0;  // model chunk on this rank (0 unless interleaved)
  bool operator==(const PipeAction& o) const { return op == o.op && micro == o.micro && chunk == o.chunk; }
};
using PipeSchedule = std::vector<PipeAction>;

// The actions of `rank` of p for m micro-batches. A UserError for p < 1 or m < 1.
PipeSchedule gpipe_schedule(int p, int rank, int m);
PipeSchedule one_f_one_b_schedule(int p, int rank, int m);

// The tag of the message carrying micro-batch `micro`'s activation (forward) or
// gradient (backward) into chunk `chunk`: distinct for every (micro, chunk, direction).
int pipe_message_tag(bool gradient, int micro, int chunk, int chunks);

// Runs the schedules of all p ranks on a model of the machine: a forward takes tF, a
// backward tB, messages arrive at once (sends never block; a receive waits for its send).
struct PipeSimulation {
  bool deadlock = false;
  std::string stuck;               // with deadlock: what each blocked rank waits for
  double makespan = 0;             // time from the first action to the last
  std::vector<double> bubble;      // per rank: idle share of the makespan
  std::vector<int> max_in_flight;  // per rank: most micro-batches forwarded, not yet backwarded
  std::string timeline;            // one row per rank: F3, B3 in time slots of min(tF, tB)
};
PipeSimulation simulate_pipeline(const std::vector<PipeSchedule>& ranks, double tF, double tB);

// The theory: (p - 1) / (m + p - 1).
double pipeline_bubble(int p, int m);

}  // namespace gpt
