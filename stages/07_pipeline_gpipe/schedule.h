// Pipeline schedules as data (stages 07-09): for each rank, the ordered list of what it
// does in one training step: the forward or backward of micro-batch i on its model
// chunk c, and the messages around them. A schedule is a pure function of (p, rank, m)
// (and v, the chunks per rank, for the interleaved schedule of stage 09), so it can be
// printed, tested and simulated without a model; one executor runs any of them.
//
// The pipeline: the model's layers are cut into p*v consecutive stages; rank r holds
// the v chunks r, r+p, r+2p, ... (global stage s = c*p + r for its local chunk c; v = 1
// outside stage 09). Micro-batch i's activation goes stage 0 -> 1 -> ... -> p*v-1, its
// gradient back; from rank p-1 the activation of chunk c wraps to rank 0's chunk c+1:
//
//   v = 2, p = 3:   rank 0: stages 0, 3   rank 1: stages 1, 4   rank 2: stages 2, 5
//                   forward 0 -> 1 -> 2 -> 3 -> 4 -> 5   (2 -> 3 is rank 2 -> rank 0)
//
// This file holds the common parts and stage 07's GPipe (Huang et al. 2019): all m
// forwards, then all m backwards; rank r keeps the activations of all m micro-batches
// until their backward. With a forward taking tF and a backward tB, a step lasts
// (m + p - 1)(tF + tB) of which each rank computes m (tF + tB), so
//
//   bubble = (p - 1) / (m + p - 1)
//
// Backwards run in micro-batch order 0, 1, ..., m-1, so gradients accumulate in the
// order of the non-pipelined run (its bits).
//
// Messages: every send is non-blocking and a receive waits only for its own message,
// so a schedule is free of deadlock exactly when the simulator below finishes it; each
// message's tag names its micro-batch, receiving chunk and direction (pipe_action_tag).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

// Backward computes both gradients of a chunk: of its input (sent back) and of its
// weights (accumulated). The zero-bubble schedule (stage 09) splits it in two:
// BackwardInput (the input's gradient, on the critical path) and, later,
// BackwardWeight (the weights' gradient, free to fill idle time).
enum class PipeOp {
  Forward,
  Backward,
  BackwardInput,
  BackwardWeight,
  SendActivation,
  RecvActivation,
  SendGradient,
  RecvGradient
};
constexpr int kPipeOps = int(PipeOp::RecvGradient) + 1;  // how many kinds of action there are
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
// The most micro-batches whose activations a rank holds at once under GPipe: all m, since
// every forward runs before the first backward.
inline int gpipe_max_in_flight(int m) { return m; }

// The tag of the message carrying micro-batch `micro`'s activation (forward) or
// gradient (backward) into chunk `chunk` of `chunks`: distinct for every (micro, chunk,
// direction).
int pipe_message_tag(bool gradient, int micro, int chunk, int chunks);

// The other end of a send or receive of `rank` (of p, v chunks each): the activation of
// stage s goes to stage s+1, the gradient of stage s's input to stage s-1.
struct PipePeer {
  int rank = 0;
  int chunk = 0;
};
PipePeer pipe_peer(const PipeAction& a, int p, int rank, int v);
// The tag both ends of a send or receive use: pipe_message_tag with the receiving
// chunk (so for v = 1, pipe_message_tag(gradient, micro, 0, 1)).
int pipe_action_tag(const PipeAction& a, int p, int rank, int v);

// Building blocks of the schedules of stages 07-09. check_pipeline_shape: a UserError
// for p < 1, m < 1 or v < 1. append_forward: micro-batch i's forward on local chunk c
// with its messages (receive the input unless c is stage 0, forward, send the output
// unless it is the last stage). append_backward: the same for its backward (op Backward,
// or BackwardInput when the weights' gradient comes later as BackwardWeight).
void check_pipeline_shape(int p, int rank, int m, int v = 1);
void append_forward(PipeSchedule& s, int p, int rank, int v, int micro, int chunk);
void append_backward(PipeSchedule& s, int p, int rank, int v, int micro, int chunk, PipeOp op = PipeOp::Backward);

// The machine the simulator models, as times of a whole rank's share of the model (one
// of its v chunks takes 1/v of them): a forward tF, the input-gradient half of a
// backward tB, its weight-gradient half tW. A plain Backward takes tB + tW.
struct PipeCosts {
  double forward = 1;
  double backward_input = 2;
  double backward_weight = 0;
};

// Runs the schedules of all p ranks (v chunks each) on that machine: messages arrive at
// once, sends never block, a receive waits for its send. It checks the data flow too:
// each (micro, chunk) is forwarded once after its input arrived, backwarded once after
// its forward and its output's gradient arrived, and nothing is sent before it is
// computed; the first violation is reported in `error`.
struct PipeSimulation {
  bool deadlock = false;
  std::string stuck;               // with deadlock: what each blocked rank waits for
  std::string error;               // a data-flow violation, empty if none
  double makespan = 0;             // time from the first action to the last
  std::vector<double> bubble;      // per rank: idle share of the makespan
  std::vector<int> max_in_flight;  // per rank: most (micro, chunk) forwarded, backward not complete
  std::string timeline;            // one row per rank: F3, B3, W3 (F3a, F3b: chunks) in time slots;
                                   // a one-line note instead where a row would be over 4096 slots
};
PipeSimulation simulate_pipeline(const std::vector<PipeSchedule>& ranks, const PipeCosts& costs, int v = 1);
// v = 1 and an unsplit backward: costs {tF, tB, 0}.
PipeSimulation simulate_pipeline(const std::vector<PipeSchedule>& ranks, double tF, double tB);

// The theory for GPipe and 1F1B: (p - 1) / (m + p - 1).
double pipeline_bubble(int p, int m);

}  // namespace gpt
