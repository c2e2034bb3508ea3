/// @file
/// The Communicator: every byte that crosses between ranks goes through this interface
/// (docs/architecture.md, rule 5), so a stage reads the same whether it runs on MPI or
/// NCCL.
///
/// Collectives over the ranks of one group (a communicator), in the usual meanings
/// (MPI standard ch. 6; NCCL's collectives are the same operations):
/// ```
///   all_reduce      every rank ends with the elementwise sum of all ranks' buffers
///   reduce_scatter  the sum, but rank r keeps only chunk r (count elements) of it
///   all_gather      every rank contributes count elements; all end with the concatenation
///   broadcast       root's buffer is copied to every rank
///   sendrecv        one send and one receive together, so a ring step cannot deadlock
///   send/recv       point to point with a tag: a message from `send(dest, tag)` is taken
///                   by the `recv(source, tag)` that names the same pair and tag; between
///                   one pair with one tag, messages arrive in the order they were sent
///   isend/irecv     the same, non-blocking: they post the message and return a Request
///                   at once; `wait` completes it (a receive's buffer holds the message
///                   only after its wait; a send's buffer must not change before it).
///                   Post receives early and wait late to overlap messages with work;
///                   several requests in flight progress together, so posting every
///                   message of a step and then waiting on all of them cannot deadlock,
///                   however large the messages (MPI's eager limit does not matter).
/// ```
/// Buffers are on the device the communicator was made for: CPU memory for MPI; for
/// NCCL, GPU memory. Every backend accepts host buffers too (NCCL hands them, and its
/// tagged point-to-point messages, to an MPI communicator of the same ranks), and the MPI
/// backend accepts GPU buffers by staging them through host memory (so several ranks can
/// share one GPU).
///
/// Failure: a peer that stops answering is not waited on forever; after `timeout_s`
/// seconds an operation fails with an error naming the peer it was waiting for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/bf16.h"
#include "common/device.h"

namespace gpt {

/// BF16: uint16_t storage of bfloat16 values. Byte: raw bytes, for messages that are not
/// numbers (reductions refuse it).
enum class DType { F32, F64, BF16, Byte };

/// Bytes of one element of type t: 8, 4, 2, or 1 for Byte.
inline size_t dtype_size(DType t) {
  return t == DType::F64 ? 8 : t == DType::F32 ? 4 : t == DType::BF16 ? 2 : 1;
}
/// Lower-case name of t for messages: "f64", "f32", "bf16" or "byte".
inline const char* dtype_name(DType t) {
  return t == DType::F64 ? "f64" : t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "byte";
}

/// The DType of C++ element type T, for templated code that sends T buffers. Defined only
/// for float, double and bf16; code that uses it with any other T does not build.
template <class T>
constexpr DType dtype_of();
/// float travels as DType::F32.
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
/// double travels as DType::F64.
template <>
constexpr DType dtype_of<double>() { return DType::F64; }
/// bf16 travels as DType::BF16.
template <>
constexpr DType dtype_of<bf16>() { return DType::BF16; }

/// A posted isend or irecv, completed by Communicator::wait (which leaves it empty).
/// Movable, not copyable. Destroying a request that was never waited for withdraws a
/// receive (MPI cancels it; one whose message is already arriving completes instead, so
/// its buffer may still be written) and abandons a send (it may still be delivered while
/// its buffer lives): wait for every request you post. Only a failing job leaves any.
class Request {
 public:
  /// What a backend keeps of one posted message; each backend derives its own and casts
  /// back in its wait. Destroying it withdraws or abandons the message (see above).
  struct State {
    virtual ~State() = default;
  };
  Request() = default;  ///< an empty request: nothing posted, pending() is false
  /// Takes ownership of a backend's state for a message just posted.
  explicit Request(std::unique_ptr<State> state) : state_(std::move(state)) {}
  bool pending() const { return state_ != nullptr; }  ///< posted and not yet waited for
  State* state() const { return state_.get(); }  ///< the backend's state, still owned here; nullptr when empty
  /// Hands the state to the caller and leaves the request empty (what a backend's wait does).
  std::unique_ptr<State> release() { return std::move(state_); }

 private:
  std::unique_ptr<State> state_;
};

/// Tags of point-to-point messages are in [0, kMaxTag] (MPI guarantees tags up to 32767;
/// the three above kMaxTag are the communicators' own: sendrecv's, and the roll call's
/// note and answer).
constexpr int kMaxTag = 32764;

/// A group of ranks and the operations between them (see the top of this file), with
/// MPI, NCCL and local (one process) backends. The collectives and barrier() are
/// collective: every rank of the group must call them, in the same order, with the same
/// count, type and root. Use each communicator from one thread at a time.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  ///< this process's index in the group, 0..size()-1
  virtual int size() const = 0;  ///< number of ranks in the group, at least 1
  virtual const char* backend() const = 0;  ///< "mpi", "nccl" or "local" (one process)

  /// Sums the count elements of buf over all ranks, in place; every rank ends with the sum.
  /// Fails for DType::Byte.
  virtual void all_reduce(void* buf, size_t count, DType t) = 0;
  /// send holds size()*count elements; recv receives this rank's chunk of count.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType t) = 0;
  /// send holds count elements; recv receives size()*count, rank r's at r*count.
  virtual void all_gather(const void* send, void* recv, size_t count, DType t) = 0;
  /// Copies root's count elements of buf into buf on every other rank.
  virtual void broadcast(void* buf, size_t count, DType t, int root) = 0;
  /// Sends send_count elements to `dest` and receives recv_count from `source`, together.
  virtual void sendrecv(const void* send, size_t send_count, int dest, void* recv,
                        size_t recv_count, int source, DType t) = 0;
  /// Returns on each rank once every rank has entered it (subject to the timeout).
  virtual void barrier() = 0;

  /// Point to point (see the top of this file). count elements of type t; dest and
  /// source are ranks of this communicator, tag in [0, kMaxTag]. Each fails after the
  /// timeout with a message naming the operation, this rank, the peer and the tag.
  virtual Request isend(const void* buf, size_t count, DType t, int dest, int tag) = 0;
  /// Posts a receive of count elements from `source` with `tag` into buf and returns at
  /// once; buf holds the message only after wait().
  virtual Request irecv(void* buf, size_t count, DType t, int source, int tag) = 0;
  /// Blocks until the request's message is sent or received, leaving the request empty.
  /// Fails on an empty request or one posted on another communicator, and on a receive
  /// whose message has a different number of elements.
  virtual void wait(Request& request) = 0;
  /// wait() on each request in turn, leaving them empty; when one fails, the rest are left
  /// to their destructors (withdrawn or abandoned, as Request says).
  void wait_all(std::vector<Request>& requests) {
    for (Request& r : requests) wait(r);
  }
  /// Blocking send: isend() then wait().
  void send(const void* buf, size_t count, DType t, int dest, int tag) {
    Request r = isend(buf, count, t, dest, tag);
    wait(r);
  }
  /// Blocking receive: irecv() then wait().
  void recv(void* buf, size_t count, DType t, int source, int tag) {
    Request r = irecv(buf, count, t, source, tag);
    wait(r);
  }

  /// A sub-group: ranks with the same color, ordered by key (MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  /// How long an operation waits for a silent peer before it fails (seconds); a
  /// sub-group made by split() starts with its parent's.
  virtual double timeout_s() const = 0;
  /// Sets that wait (seconds, > 0); see LongerTimeout for a phase that needs more.
  virtual void set_timeout_s(double seconds) = 0;

  /// Ends every rank of the job (used after an unrecoverable error on one rank).
  virtual void abort(int code) = 0;
};

/// Raises a communicator's timeout to at least `seconds` for as long as it lives, then
/// restores it: for a phase in which ranks wait on one rank's disk work (a checkpoint
/// save: rank 0 writes, fsyncs and reads back what others only wait for), which a
/// timeout sized for compute would report as a lost peer.
class LongerTimeout {
 public:
  /// comm's timeout becomes max(its own, seconds) until the destructor puts it back.
  LongerTimeout(Communicator& comm, double seconds) : comm_(comm), before_(comm.timeout_s()) {
    if (seconds > before_) comm_.set_timeout_s(seconds);
  }
  ~LongerTimeout() { comm_.set_timeout_s(before_); }
  LongerTimeout(const LongerTimeout&) = delete;
  LongerTimeout& operator=(const LongerTimeout&) = delete;

 private:
  Communicator& comm_;
  double before_;
};

/// Why comm=nccl cannot run on CPU buffers, and what to use: make_world's refusal, and
/// the configuration's check (validate) for stages that build no communicator.
inline constexpr char kNcclNeedsGpu[] =
    "NCCL moves GPU buffers and the device is the CPU; use comm=mpi (or auto) with device=cpu";

/// How make_world builds the world communicator.
struct CommOptions {
  std::string backend = "auto";  ///< auto | mpi | nccl
  Device device = Device::CPU;   ///< where the buffers live; NCCL needs Device::CUDA
  double timeout_s = 60.0;       ///< a peer silent this long is reported lost
  /// False on a rank that has refused its command line before joining (stage_main). If any
  /// rank is not ready, every rank gets the plain MPI world, with no device compared and no
  /// GPU set up: only for the ranks to compare their refusals, which the device may be.
  bool ready = true;
};

/// The world communicator of this process. With MPI absent from the build, or a job
/// not started by mpirun, the world is this process alone (size 1). Call once.
std::unique_ptr<Communicator> make_world(int* argc, char*** argv, const CommOptions& options);
/// make_world's checks of `options` that need no other rank (the backend's name, the
/// timeout, NCCL in this build and on this device): a UserError naming the key. A
/// launcher's ranks run them before joining, to compare their refusals (stage_main).
void check_comm_options(const CommOptions& options);

/// Collective: every rank of `world` must run on the same kind of device. Each stage's
/// collectives, and make_world's own, differ by device, so `device=auto` on nodes of which
/// some have a GPU and some none would leave the ranks waiting in calls that never match;
/// this refuses it instead, on every rank, naming the ranks on each device. make_world
/// calls it for every MPI world.
void agree_on_device(Communicator& world, Device device);

/// Element-wise sum of a and b into out (used by the hand-written ring of stage 02
/// and the MPI backend's bf16 reduction).
void sum_into(void* out, const void* a, const void* b, size_t count, DType t);

}  // namespace gpt
