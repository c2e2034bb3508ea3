/// @file
/// A Communicator that counts what passes through another: calls and payload bytes per
/// collective, so a stage can print its communication per step next to the formula.
///
/// Payload bytes of one call: all_reduce the buffer (count elements); reduce_scatter its
/// input (size() * count); all_gather its output (size() * count); broadcast the buffer;
/// send, recv and sendrecv what they send plus what they receive. These are the sizes of
/// the tensors a technique exchanges; the bytes a ring moves on the wire follow from them
/// (an all-reduce of n bytes sends 2 (p-1)/p n per rank).
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "common/comm.h"

namespace gpt {

enum class CommOp { AllReduce, ReduceScatter, AllGather, Broadcast, PointToPoint, kCount };
const char* comm_op_name(CommOp op);

struct CommTally {
  std::array<int64_t, size_t(CommOp::kCount)> calls{}, bytes{};
  CommTally operator-(const CommTally& o) const;
  std::string table() const;  ///< one line per operation used: calls and bytes
};

class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}
  const CommTally& tally() const { return tally_; }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* backend() const override { return inner_.backend(); }
  void all_reduce(void* buf, size_t count, DType t) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType t) override;
  void all_gather(const void* send, void* recv, size_t count, DType t) override;
  void broadcast(void* buf, size_t count, DType t, int root) override;
  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType t) override;
  void barrier() override { inner_.barrier(); }
  Request isend(const void* buf, size_t count, DType t, int dest, int tag) override;
  Request irecv(void* buf, size_t count, DType t, int source, int tag) override;
  void wait(Request& request) override { inner_.wait(request); }
  std::unique_ptr<Communicator> split(int color, int key) override { return inner_.split(color, key); }
  void abort(int code) override { inner_.abort(code); }

 private:
  void count(CommOp op, size_t elements, DType t);
  Communicator& inner_;
  CommTally tally_;
};

}  // namespace gpt
