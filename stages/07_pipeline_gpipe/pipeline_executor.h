// The pipeline executor: runs one rank's schedule (schedule.h) for one training step on
// the model chunks the rank holds. It is the same for every schedule of stages 07-09:
// a schedule decides the order, the executor only does what each action says.
//
//   RecvActivation i   post a receive of micro-batch i's input into the chunk's slot
//   Forward i          wait for that input, run the chunk's layers (the first virtual
//                      stage embeds the tokens; the last computes the loss)
//   SendActivation i   post a send of the chunk's output to the next virtual stage
//   RecvGradient i     post a receive of the gradient of the chunk's output
//   Backward i         wait for it, run the chunk's backward (the last stage starts from
//                      the loss), accumulating the weight gradients
//   SendGradient i     post a send of the gradient of the chunk's input to the stage before
//   BackwardInput i    the backward's input half only (zero-bubble schedules): the
//                      gradient to send; the activations stay for the weight half
//   BackwardWeight i   the weight half: the weight gradients, accumulated; then the
//                      micro-batch leaves the slot
//
// Virtual stage s = c p + r is chunk c of rank r (p ranks, v chunks each; v = 1 in
// stages 07 and 08): its input comes from virtual stage s - 1, on rank r - 1 (rank p - 1,
// chunk c - 1, for r = 0), its output goes to s + 1.
//
// Memory: micro-batch i keeps its activations in slot i mod S of its chunk, S the most
// micro-batches the schedule ever has in flight on that chunk (forwarded, not yet
// backwarded). Forwards and backwards both run in micro-batch order, so the micro-batches
// in flight are consecutive and slot i mod S is free when micro-batch i starts. The
// executor counts the micro-batches in flight and checks that no slot is taken twice.
//
// Why no order of arrival can deadlock: every message is non-blocking (isend/irecv) and
// a rank blocks only in a wait for the input of the action it is about to run. Sends are
// completed before their buffer is written again (the forward or backward of the next
// micro-batch in the slot, or a receive into it) and at the end of the step. MPI moves
// a message larger than its eager limit only once the receive is posted, so a blocking
// send to a neighbour that is itself blocked sending to us would hang; posted
// non-blocking requests progress together instead.
//
// Two test hooks, read from the environment once: GPT_TEST_PIPE_JITTER_MS=N sleeps a
// pseudo-random 0..N ms before each action (the order of arrival changes, the bits must
// not), and says so on stderr; GPT_TEST_PIPE_STALL_RANK=r makes pipeline rank r stop answering at its third
// action (the others must fail within comm_timeout_s, naming the peer).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "common/comm.h"
#include "common/data.h"
#include "common/driver.h"
#include "common/gpt2.h"
#include "stages/07_pipeline_gpipe/schedule.h"

namespace gpt {

// The most micro-batches chunk `chunk` has in flight under `schedule` (from its forward
// to its Backward or BackwardWeight); with kAllChunks, the most all the rank's chunks have
// together (a shared block pool's sets, common/block_pool.h).
constexpr int kAllChunks = -1;
int max_in_flight(const PipeSchedule& schedule, int chunk);
// Whether the schedule splits backwards into input and weight halves (the model must be
// made with ModelSlice::split_backward).
bool splits_backward(const PipeSchedule& schedule);

// A: the storage of the chunks' activations (float, or bf16 in bf16 mode): the messages
// between stages are A too.
template <class A>
class PipelineExecutor {
 public:
  // The tokens and targets of micro-batch `micro` (B x T each, host memory).
  using Batch = std::function<void(int micro, int32_t* inputs, int32_t* targets)>;
  // Called before micro-batch `micro`'s backward (its weight half, when split) on chunk
  // `chunk` (a store decides there whether this backward ends its accumulation).
  using BeforeBackward = std::function<void(int chunk, int micro)>;

  // chunks[c] is virtual stage c p + r of this rank r of the pipeline group `pp`, made
  // with in_flight slots enough for the schedules it will run.
  PipelineExecutor(std::vector<GPT2<A>*> chunks, Communicator& pp);

  // Runs this rank's `schedule` for m micro-batches; backward scales each micro-batch's
  // mean loss by loss_scale. Returns the micro-batches' losses where this rank holds the
  // last virtual stage (in micro-batch order), else an empty vector.
  std::vector<double> run(const PipeSchedule& schedule, int m, const Batch& batch, float loss_scale,
                          const BeforeBackward& before_backward = {});

  // The mean loss of one batch (forward only, through every stage), on every rank of
  // the pipeline group.
  double evaluate(const int32_t* inputs, const int32_t* targets);

  // The most micro-batches (of all chunks: (micro-batch, chunk) pairs) in flight on this
  // rank in the steps run so far, and the time it spent computing (forward and backward)
  // in the last step, in seconds.
  int measured_in_flight() const { return peak_in_flight_; }
  double last_busy_s() const { return busy_s_; }
  // The mean time of a forward, a backward's input half (or a whole backward) and its
  // weight half on this rank, in seconds, over the steps run so far: the costs to put in
  // a schedule's theory.
  PipeCosts measured_costs() const;
  // Elements of one message between stages, an activation or its gradient: the chunks'
  // rows (B T, or B T / tp under sequence parallelism) x C.
  size_t message_size() const;

 private:
  struct Peer {
    int rank, chunk;
  };
  Peer previous(int chunk) const;  // where the chunk's input comes from
  Peer next(int chunk) const;      // where its output goes
  int slot(int chunk, int micro) const { return micro % chunks_[size_t(chunk)]->in_flight(); }
  void wait_sends(int chunk, int slot, bool gradient);

  std::vector<GPT2<A>*> chunks_;
  Communicator& pp_;
  int p_, rank_, v_;
  int peak_in_flight_ = 0;
  double busy_s_ = 0;
  struct OpTime {
    double seconds = 0;
    long count = 0;
  };
  OpTime op_time_[kPipeOps] = {};  // by PipeOp
  double timed(PipeOp op, std::chrono::steady_clock::time_point start);  // records and returns the seconds since start
  // Posted receives, by (chunk, micro); sends not yet completed, by (chunk, slot, gradient).
  std::map<std::pair<int, int>, Request> recv_activation_, recv_gradient_;
  std::map<std::tuple<int, int, bool>, std::vector<Request>> sends_;
  std::vector<std::vector<int>> slot_owner_;  // per chunk and slot: the micro-batch in it, or -1
  int jitter_ms_ = 0, stall_rank_ = -1;         // the test hooks (top of this file)
  uint64_t jitter_state_ = 0;
  void test_hooks(size_t action);
};

// The validation loss through the pipeline: as validation_loss (common/driver.h) does it
// for a whole model, each batch through pipeline.evaluate; on every rank. With `part`
// (context parallelism) each rank evaluates its part of the sequences and the part's
// mean loss is averaged over part->group.
template <class A>
double pipeline_validation_loss(PipelineExecutor<A>& pipeline, const DataLoader& val, int batches, int batch_size,
                                Communicator& dp, const SequencePart* part = nullptr);

}  // namespace gpt
