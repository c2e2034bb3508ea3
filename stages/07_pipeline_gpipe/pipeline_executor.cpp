// The pipeline executor; see pipeline_executor.h.
#include "stages/07_pipeline_gpipe/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <unistd.h>

#include "common/device_array.h"
#include "common/error.h"
#include "common/trace.h"

namespace gpt {

int max_in_flight(const PipeSchedule& schedule, int chunk) {
  int now = 0, most = 0;
  for (const PipeAction& a : schedule) {
    if (chunk != kAllChunks && a.chunk != chunk) continue;
    if (a.op == PipeOp::Forward) most = std::max(most, ++now);
    if (a.op == PipeOp::Backward || a.op == PipeOp::BackwardWeight) --now;  // its activations are freed
  }
  return std::max(most, 1);
}

bool splits_backward(const PipeSchedule& schedule) {
  for (const PipeAction& a : schedule)
    if (a.op == PipeOp::BackwardInput || a.op == PipeOp::BackwardWeight) return true;
  return false;
}

template <class A>
PipelineExecutor<A>::PipelineExecutor(std::vector<GPT2<A>*> chunks, Communicator& pp)
    : chunks_(std::move(chunks)), pp_(pp), p_(pp.size()), rank_(pp.rank()), v_(int(chunks_.size())) {
  invariant(v_ >= 1, "PipelineExecutor: no model chunk");
  for (GPT2<A>* c : chunks_) slot_owner_.emplace_back(size_t(c->in_flight()), -1);
  if (const char* j = std::getenv("GPT_TEST_PIPE_JITTER_MS")) jitter_ms_ = std::atoi(j);
  // Said, so that a test can tell the delays were applied (a run without them computes
  // the same bits and would pass the comparison it is meant to stress).
  if (jitter_ms_ > 0)
    std::fprintf(stderr, "process %ld, pipeline rank %d: test hook GPT_TEST_PIPE_JITTER_MS: each action waits 0-%d ms "
                 "at random\n", long(getpid()), rank_, jitter_ms_);
  if (const char* r = std::getenv("GPT_TEST_PIPE_STALL_RANK")) stall_rank_ = std::atoi(r);
  jitter_state_ = 0x9E3779B97F4A7C15ull * uint64_t(rank_ + 1);
}

template <class A>
void PipelineExecutor<A>::test_hooks(size_t action) {
  if (rank_ == stall_rank_ && action == 2)
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // a rank that stops answering
  if (jitter_ms_ > 0) {
    jitter_state_ = jitter_state_ * 6364136223846793005ull + 1442695040888963407ull;  // an LCG: any spread will do
    const int ms = int((jitter_state_ >> 33) % uint64_t(jitter_ms_ + 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
}

template <class A>
typename PipelineExecutor<A>::Peer PipelineExecutor<A>::previous(int chunk) const {
  return rank_ == 0 ? Peer{p_ - 1, chunk - 1} : Peer{rank_ - 1, chunk};
}
template <class A>
typename PipelineExecutor<A>::Peer PipelineExecutor<A>::next(int chunk) const {
  return rank_ == p_ - 1 ? Peer{0, chunk + 1} : Peer{rank_ + 1, chunk};
}

template <class A>
size_t PipelineExecutor<A>::message_size() const {
  const GPT2<A>& m = *chunks_.front();
  return size_t(m.rows()) * size_t(m.model().n_embd);
}

template <class A>
void PipelineExecutor<A>::wait_sends(int chunk, int slot, bool gradient) {
  auto it = sends_.find({chunk, slot, gradient});
  if (it == sends_.end()) return;
  Span span("wait_send", "comm");
  pp_.wait_all(it->second);
  sends_.erase(it);
}

template <class A>
double PipelineExecutor<A>::timed(PipeOp op, std::chrono::steady_clock::time_point start) {
  // On the GPU the op's kernels were only queued: its time ends when they have run.
  device_synchronize(chunks_.front()->device());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  OpTime& t = op_time_[int(op)];
  t.seconds += s, ++t.count;
  return s;
}

template <class A>
PipeCosts PipelineExecutor<A>::measured_costs() const {
  auto mean = [&](PipeOp op) {
    const OpTime& t = op_time_[int(op)];
    return t.count > 0 ? t.seconds / double(t.count) : 0.0;
  };
  PipeCosts c;
  c.forward = mean(PipeOp::Forward);
  // A whole backward counts as its input half: only split schedules defer a weight half.
  c.backward_input = op_time_[int(PipeOp::Backward)].count > 0 ? mean(PipeOp::Backward) : mean(PipeOp::BackwardInput);
  c.backward_weight = mean(PipeOp::BackwardWeight);
  return c;
}

template <class A>
std::vector<double> PipelineExecutor<A>::run(const PipeSchedule& schedule, int m, const Batch& batch,
                                             float loss_scale, const BeforeBackward& before_backward) {
  using clock = std::chrono::steady_clock;
  const DType type = dtype_of<A>();  // of the activations and their gradients
  const GPT2<A>& first = *chunks_.front();
  const size_t tokens = size_t(first.batch()) * size_t(first.seq_len()), n = message_size();
  std::vector<int32_t> inputs(tokens), targets(tokens);
  std::vector<double> losses;
  std::vector<int> in_flight(size_t(v_), 0);  // per chunk
  int in_flight_now = 0;                       // all chunks
  busy_s_ = 0;
  for (size_t k = 0; k < schedule.size(); ++k) {
    const PipeAction& a = schedule[k];
    test_hooks(k);
    invariant(a.chunk >= 0 && a.chunk < v_ && a.micro >= 0 && a.micro < m,
              std::string("pipeline schedule: ") + pipe_op_name(a.op) + " of micro-batch " + std::to_string(a.micro) +
                  " on chunk " + std::to_string(a.chunk) + " is outside " + std::to_string(m) + " x " +
                  std::to_string(v_));
    GPT2<A>& model = *chunks_[size_t(a.chunk)];
    const int micro_slot = slot(a.chunk, a.micro);
    int& owner = slot_owner_[size_t(a.chunk)][size_t(micro_slot)];
    const int tag_activation = pipe_message_tag(false, a.micro, a.chunk, v_);
    const int tag_gradient = pipe_message_tag(true, a.micro, a.chunk, v_);
    switch (a.op) {
      case PipeOp::RecvActivation: {
        invariant(owner == -1, "pipeline: micro-batch " + std::to_string(a.micro) + " needs slot " +
                                   std::to_string(micro_slot) + " of chunk " + std::to_string(a.chunk) +
                                   ", still held by micro-batch " + std::to_string(owner));
        const Peer from = previous(a.chunk);
        recv_activation_[{a.chunk, a.micro}] =
            pp_.irecv(model.stage_input(micro_slot), n, type, from.rank, tag_activation);
        break;
      }
      case PipeOp::Forward: {
        invariant(owner == -1, "pipeline: micro-batch " + std::to_string(a.micro) + " needs slot " +
                                   std::to_string(micro_slot) + " of chunk " + std::to_string(a.chunk) +
                                   ", still held by micro-batch " + std::to_string(owner));
        if (!model.first_stage()) {
          auto it = recv_activation_.find({a.chunk, a.micro});
          invariant(it != recv_activation_.end(), "pipeline: forward of micro-batch " + std::to_string(a.micro) +
                                                      " before its activation was received");
          Span span("recv_activation", "comm");
          pp_.wait(it->second);
          recv_activation_.erase(it);
        }
        // The forward overwrites the output the slot's last send read (with a block pool it
        // writes a set just taken, which a backward gave back after its own wait).
        wait_sends(a.chunk, micro_slot, false);
        if (model.first_stage() || model.last_stage()) batch(a.micro, inputs.data(), targets.data());
        const auto t0 = clock::now();
        const double loss = model.forward_micro(micro_slot, inputs.data(), targets.data());
        busy_s_ += timed(PipeOp::Forward, t0);
        if (model.last_stage()) losses.push_back(loss);
        owner = a.micro;
        ++in_flight[size_t(a.chunk)];
        ++in_flight_now;
        peak_in_flight_ = std::max(peak_in_flight_, in_flight_now);
        break;
      }
      case PipeOp::SendActivation: {
        const Peer to = next(a.chunk);
        sends_[{a.chunk, micro_slot, false}].push_back(
            pp_.isend(model.stage_output(micro_slot), n, type, to.rank,
                      pipe_message_tag(false, a.micro, to.chunk, v_)));
        break;
      }
      case PipeOp::RecvGradient: {
        wait_sends(a.chunk, micro_slot, true);  // the receive overwrites the gradient the last send read
        const Peer from = next(a.chunk);
        recv_gradient_[{a.chunk, a.micro}] = pp_.irecv(model.output_grad(micro_slot), n, type, from.rank, tag_gradient);
        break;
      }
      case PipeOp::Backward:
      case PipeOp::BackwardInput: {
        invariant(owner == a.micro, "pipeline: backward of micro-batch " + std::to_string(a.micro) +
                                        " without its forward on chunk " + std::to_string(a.chunk));
        if (!model.last_stage()) {
          auto it = recv_gradient_.find({a.chunk, a.micro});
          invariant(it != recv_gradient_.end(), "pipeline: backward of micro-batch " + std::to_string(a.micro) +
                                                    " before its gradient was received");
          Span span("recv_gradient", "comm");
          pp_.wait(it->second);
          recv_gradient_.erase(it);
        }
        // The last stage writes the gradient of its input where the previous backward's
        // was sent from (no receive waited for that send).
        wait_sends(a.chunk, micro_slot, true);
        // A backward gives the slot's blocks back to a shared pool (ModelSlice::block_pool),
        // where another chunk's forward may write them: the send of the output they hold,
        // long received (its gradient came back), is done first. Without a pool the wait
        // only finds that send done; it stays unconditional, so no schedule can skip it.
        if (a.op == PipeOp::Backward) wait_sends(a.chunk, micro_slot, false);
        const auto t0 = clock::now();
        if (a.op == PipeOp::Backward) {
          if (before_backward) before_backward(a.chunk, a.micro);
          model.backward_micro(micro_slot, loss_scale);
        } else {
          model.backward_input_micro(micro_slot, loss_scale);  // the weight gradients come with BackwardWeight
        }
        busy_s_ += timed(a.op, t0);
        if (a.op == PipeOp::Backward) {
          owner = -1;
          --in_flight[size_t(a.chunk)];
          --in_flight_now;
        }
        break;
      }
      case PipeOp::BackwardWeight: {
        invariant(owner == a.micro, "pipeline: weight gradients of micro-batch " + std::to_string(a.micro) +
                                        " without its forward on chunk " + std::to_string(a.chunk));
        if (before_backward) before_backward(a.chunk, a.micro);  // the stores see the gradients done here
        wait_sends(a.chunk, micro_slot, false);  // as for Backward: the slot's blocks go back to the pool
        const auto t0 = clock::now();
        model.backward_weight_micro(micro_slot);
        busy_s_ += timed(PipeOp::BackwardWeight, t0);
        owner = -1;
        --in_flight[size_t(a.chunk)];
        --in_flight_now;
        break;
      }
      case PipeOp::SendGradient: {
        const Peer to = previous(a.chunk);
        sends_[{a.chunk, micro_slot, true}].push_back(
            pp_.isend(model.output_grad(micro_slot), n, type, to.rank, pipe_message_tag(true, a.micro, to.chunk, v_)));
        break;
      }
      default:
        invariant(false, std::string("pipeline: the executor does not run ") + pipe_op_name(a.op) + " actions");
    }
  }
  invariant(recv_activation_.empty() && recv_gradient_.empty(), "pipeline: a received message was never used");
  for (int c = 0; c < v_; ++c)
    invariant(in_flight[size_t(c)] == 0, "pipeline: chunk " + std::to_string(c) + " ended the step with " +
                                             std::to_string(in_flight[size_t(c)]) + " micro-batches not backwarded");
  {
    Span span("wait_sends", "comm");
    for (auto& [key, requests] : sends_) pp_.wait_all(requests);
    sends_.clear();
  }
  return losses;
}

template <class A>
double PipelineExecutor<A>::evaluate(const int32_t* inputs, const int32_t* targets) {
  // Forward only, one stage after another: each virtual stage waits for its input.
  const size_t n = message_size();
  double loss = 0;
  for (int c = 0; c < v_; ++c) {
    GPT2<A>& model = *chunks_[size_t(c)];
    if (!model.first_stage()) {
      const Peer from = previous(c);
      pp_.recv(model.stage_input(0), n, dtype_of<A>(), from.rank, pipe_message_tag(false, 0, c, v_));
    }
    const double l = model.forward_micro(0, inputs, targets, /*for_backward=*/false);
    if (model.last_stage()) loss = l;
    else {
      const Peer to = next(c);
      pp_.send(model.stage_output(0), n, dtype_of<A>(), to.rank, pipe_message_tag(false, 0, to.chunk, v_));
    }
    model.release_blocks(0);  // no backward follows; the send is done
  }
  pp_.all_reduce(&loss, 1, DType::F64);  // the last stage's loss plus zeros: exact on every rank
  return loss;
}

template <class A>
double pipeline_validation_loss(PipelineExecutor<A>& pipeline, const DataLoader& val, int batches, int batch_size,
                                Communicator& dp, const SequencePart* part) {
  const EvaluateBatch evaluate = [&](const int32_t* inputs, const int32_t* targets) {
    return pipeline.evaluate(inputs, targets);
  };
  return validation_loss(evaluate, val, batches, batch_size, dp, part);
}

template class PipelineExecutor<float>;
template class PipelineExecutor<bf16>;
template double pipeline_validation_loss(PipelineExecutor<float>&, const DataLoader&, int, int, Communicator&,
                                         const SequencePart*);
template double pipeline_validation_loss(PipelineExecutor<bf16>&, const DataLoader&, int, int, Communicator&,
                                         const SequencePart*);

}  // namespace gpt
