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
#include <memory>
#include <mutex>
#include <string>

#include "common/comm.h"

namespace gpt {

/// The kinds of call a CountingCommunicator tallies; PointToPoint covers send, recv,
/// isend, irecv and sendrecv. kCount is the number of kinds, not a kind.
enum class CommOp { AllReduce, ReduceScatter, AllGather, Broadcast, PointToPoint, kCount };
/// The name printed for op: "all_reduce", "reduce_scatter", "all_gather", "broadcast",
/// "point_to_point" ("?" for anything else).
const char* comm_op_name(CommOp op);

/// Calls and payload bytes per CommOp, indexed by size_t(op), counted since the
/// communicator was made; subtract two tallies for the traffic between them.
struct CommTally {
  /// calls[op]: how many calls of that kind this rank made.
  std::array<int64_t, size_t(CommOp::kCount)> calls{}, bytes{};  ///< bytes[op]: their payload (top of file)
  CommTally operator-(const CommTally& o) const;  ///< element-wise difference, e.g. after minus before a step
  CommTally& operator+=(const CommTally& o);      ///< element-wise sum, e.g. of a formula's parts
  bool operator==(const CommTally& o) const = default;  ///< the same calls and bytes of every kind
  std::string table() const;  ///< one line per operation used: calls and bytes
};

/// A stage's measured traffic beside the formula it should match: one line per operation
/// either uses, "  NAME  counted | formula calls  counted | formula bytes".
std::string comm_table(const CommTally& counted, const CommTally& formula);

/// Wraps another communicator: every call is forwarded to it, and each collective or
/// message is first added to tally(). The counts are of this rank's calls only. A split
/// of it is wrapped too and counts into the same tally, so a technique that gives a
/// thread a communicator of its own (ZeRO-2's reductions, ZeRO-3's prefetches) is counted
/// whole; calls from several threads at once are counted under a lock.
class CountingCommunicator : public Communicator {
 public:
  /// Counts what passes through `inner`, which must outlive this wrapper.
  explicit CountingCommunicator(Communicator& inner);
  /// Everything counted since construction, by this communicator and its splits.
  CommTally tally() const;

  int rank() const override { return inner_.rank(); }  ///< the inner communicator's rank
  int size() const override { return inner_.size(); }  ///< the inner communicator's size
  const char* backend() const override { return inner_.backend(); }  ///< the inner communicator's backend
  /// Counts one AllReduce of count elements, then forwards.
  void all_reduce(void* buf, size_t count, DType t) override;
  /// Counts one ReduceScatter of size() * count elements (the input), then forwards.
  void reduce_scatter(const void* send, void* recv, size_t count, DType t) override;
  /// Counts one AllGather of size() * count elements (the output), then forwards.
  void all_gather(const void* send, void* recv, size_t count, DType t) override;
  /// Counts one Broadcast of count elements, then forwards.
  void broadcast(void* buf, size_t count, DType t, int root) override;
  /// Counts one PointToPoint of send_count + recv_count elements, then forwards.
  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType t) override;
  void barrier() override { inner_.barrier(); }  ///< forwarded, not counted
  /// Counts one PointToPoint of count elements when posted, then forwards.
  Request isend(const void* buf, size_t count, DType t, int dest, int tag) override;
  /// Counts one PointToPoint of count elements when posted, then forwards.
  Request irecv(void* buf, size_t count, DType t, int source, int tag) override;
  void wait(Request& request) override { inner_.wait(request); }  ///< forwarded, not counted
  /// The inner communicator's sub-group, wrapped: its traffic is added to this tally.
  std::unique_ptr<Communicator> split(int color, int key) override;
  void abort(int code) override { inner_.abort(code); }  ///< forwarded to the inner communicator
  double timeout_s() const override { return inner_.timeout_s(); }  ///< the inner communicator's
  void set_timeout_s(double seconds) override { inner_.set_timeout_s(seconds); }  ///< forwarded

 private:
  struct SharedTally {  // one per counting communicator and its splits
    std::mutex mutex;
    CommTally tally;
  };
  CountingCommunicator(std::unique_ptr<Communicator> owned, std::shared_ptr<SharedTally> shared);
  void count(CommOp op, size_t elements, DType t);
  std::unique_ptr<Communicator> owned_;  // a split's inner communicator; empty for the first
  Communicator& inner_;
  std::shared_ptr<SharedTally> shared_;
};

}  // namespace gpt
