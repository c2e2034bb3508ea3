// Counting what crosses a communicator; see comm_counter.h.
#include "common/comm_counter.h"

#include <cstdio>

namespace gpt {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::AllReduce: return "all_reduce";
    case CommOp::ReduceScatter: return "reduce_scatter";
    case CommOp::AllGather: return "all_gather";
    case CommOp::Broadcast: return "broadcast";
    case CommOp::PointToPoint: return "point_to_point";
    default: return "?";
  }
}

CommTally CommTally::operator-(const CommTally& o) const {
  CommTally d;
  for (size_t i = 0; i < calls.size(); ++i) d.calls[i] = calls[i] - o.calls[i], d.bytes[i] = bytes[i] - o.bytes[i];
  return d;
}

CommTally& CommTally::operator+=(const CommTally& o) {
  for (size_t i = 0; i < calls.size(); ++i) calls[i] += o.calls[i], bytes[i] += o.bytes[i];
  return *this;
}

std::string CommTally::table() const {
  std::string s;
  char line[160];
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i] == 0) continue;
    std::snprintf(line, sizeof line, "  %-15s %6lld calls %14lld bytes\n", comm_op_name(CommOp(i)),
                  static_cast<long long>(calls[i]), static_cast<long long>(bytes[i]));
    s += line;
  }
  return s;
}

std::string comm_table(const CommTally& counted, const CommTally& formula) {
  std::string s;
  char line[200];
  for (size_t i = 0; i < counted.calls.size(); ++i) {
    if (counted.calls[i] == 0 && formula.calls[i] == 0) continue;
    std::snprintf(line, sizeof line, "  %-15s %6lld | %6lld calls  %14lld | %14lld bytes\n", comm_op_name(CommOp(i)),
                  static_cast<long long>(counted.calls[i]), static_cast<long long>(formula.calls[i]),
                  static_cast<long long>(counted.bytes[i]), static_cast<long long>(formula.bytes[i]));
    s += line;
  }
  return s;
}

CountingCommunicator::CountingCommunicator(Communicator& inner)
    : inner_(inner), shared_(std::make_shared<SharedTally>()) {}

CountingCommunicator::CountingCommunicator(std::unique_ptr<Communicator> owned, std::shared_ptr<SharedTally> shared)
    : owned_(std::move(owned)), inner_(*owned_), shared_(std::move(shared)) {}

CommTally CountingCommunicator::tally() const {
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->tally;
}

std::unique_ptr<Communicator> CountingCommunicator::split(int color, int key) {
  return std::unique_ptr<Communicator>(new CountingCommunicator(inner_.split(color, key), shared_));
}

void CountingCommunicator::count(CommOp op, size_t elements, DType t) {
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  shared_->tally.calls[size_t(op)] += 1;
  shared_->tally.bytes[size_t(op)] += int64_t(elements * dtype_size(t));
}

void CountingCommunicator::all_reduce(void* buf, size_t count, DType t) {
  this->count(CommOp::AllReduce, count, t);
  inner_.all_reduce(buf, count, t);
}
void CountingCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType t) {
  this->count(CommOp::ReduceScatter, count * size_t(size()), t);
  inner_.reduce_scatter(send, recv, count, t);
}
void CountingCommunicator::all_gather(const void* send, void* recv, size_t count, DType t) {
  this->count(CommOp::AllGather, count * size_t(size()), t);
  inner_.all_gather(send, recv, count, t);
}
void CountingCommunicator::broadcast(void* buf, size_t count, DType t, int root) {
  this->count(CommOp::Broadcast, count, t);
  inner_.broadcast(buf, count, t, root);
}
void CountingCommunicator::sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count,
                                    int source, DType t) {
  this->count(CommOp::PointToPoint, send_count + recv_count, t);
  inner_.sendrecv(send, send_count, dest, recv, recv_count, source, t);
}
Request CountingCommunicator::isend(const void* buf, size_t count, DType t, int dest, int tag) {
  this->count(CommOp::PointToPoint, count, t);
  return inner_.isend(buf, count, t, dest, tag);
}
Request CountingCommunicator::irecv(void* buf, size_t count, DType t, int source, int tag) {
  this->count(CommOp::PointToPoint, count, t);
  return inner_.irecv(buf, count, t, source, tag);
}

}  // namespace gpt
