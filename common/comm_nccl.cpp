// The NCCL backend of the Communicator: collectives on GPU buffers, run by NCCL's
// kernels over NVLink / PCIe / InfiniBand without passing through host memory.
//
// Bootstrap: NCCL ranks find each other through a 128-byte "unique id" that one rank
// creates (ncclGetUniqueId) and every other rank must receive before
// ncclCommInitRank. NCCL leaves that exchange to the application; here it is a
// broadcast over an MPI communicator of the same ranks, which this communicator keeps
// for what NCCL does not do: split (a sub-group gets its own MPI communicator, hence its
// own unique id), barrier and abort.
//
// Each operation is enqueued on this communicator's CUDA stream and then waited for by
// polling cudaStreamQuery and ncclCommGetAsyncError with a sleep, so that, as with the
// MPI backend, a lost peer becomes an error after timeout_s (ncclCommAbort frees the
// GPU kernels stuck waiting for it) rather than a hang.
//
// Streams. The kernels run on the legacy default stream; each communicator has a
// non-blocking stream of its own that, before each operation, waits for an event
// recorded on the default stream: the operation reads what the kernels queued before it
// wrote, and the host returns only when it is done, so the kernels after it see its
// result. A blocking stream would order the other way round too: every kernel would
// wait for every communicator's operation in flight, and with several host threads on
// several communicators (stage 02's communication thread, ZeRO-3's prefetch, the main
// thread's tp and pp) one rank's kernel could wait for a collective whose peer waits
// for the same rank's other collective, queued behind that kernel: a hang across ranks.
//
// Point to point (isend, irecv) goes through the MPI communicator of the same ranks: NCCL
// has no tags, and a pipeline schedule relies on them (a stage receives an activation and
// a gradient from the same peer in an order of its own), while MPI matches by tag. The
// MPI backend stages a GPU buffer through host memory. sendrecv, which both sides post
// alike, stays on NCCL.
//
// Host buffers (a loss, a norm, checkpoint shards, the layout exchange): NCCL reads only
// GPU memory, so an operation whose buffers are in host memory goes to the MPI
// communicator of the same ranks instead. Both sides of an operation pass the same kind
// of buffer (the callers are the same code on every rank), so the two never mix.
//
// NCCL needs one GPU per rank; several ranks sharing a GPU use the MPI backend.
#if defined(GPT_HAVE_NCCL) && defined(GPT_HAVE_MPI)

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <cstdio>
#include <thread>
#include <vector>

#include "common/comm.h"
#include "common/comm_internal.h"

namespace gpt {
namespace {

using namespace comm_detail;

ncclDataType_t nccl_type(DType t) {
  return t == DType::F32 ? ncclFloat32 : t == DType::F64 ? ncclFloat64 : t == DType::BF16 ? ncclBfloat16 : ncclUint8;
}

class NcclComm final : public Communicator {
 public:
  NcclComm(std::unique_ptr<Communicator> mpi, Device device, double timeout_s)
      : mpi_(std::move(mpi)), device_(device), timeout_s_(timeout_s) {
    world_rank_ = mpi_world_rank();
    // World ranks of the members, for error messages (exact as doubles).
    std::vector<double> mine{double(world_rank_)}, all(size_t(mpi_->size()));
    mpi_->all_gather(mine.data(), all.data(), 1, DType::F64);
    for (double r : all) world_ranks_.push_back(int(r));

    ncclUniqueId id{};
    if (mpi_->rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    // The id is opaque bytes; a broadcast moves bytes without looking at them, so it
    // travels as sizeof(id)/2 two-byte elements.
    static_assert(sizeof(ncclUniqueId) % 2 == 0);
    mpi_->broadcast(&id, sizeof(id) / 2, DType::BF16, 0);

    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    cuda_check(cudaEventCreateWithFlags(&kernels_done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    nccl_check(ncclCommInitRank(&comm_, mpi_->size(), id, mpi_->rank()), "ncclCommInitRank");
  }

  ~NcclComm() override {
    if (comm_ != nullptr) {
      if (broken_) {
        ncclCommAbort(comm_);
      } else {
        cudaStreamSynchronize(stream_);
        ncclCommDestroy(comm_);
      }
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (kernels_done_ != nullptr) cudaEventDestroy(kernels_done_);
  }

  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const char* backend() const override { return "nccl"; }

  void all_reduce(void* buf, size_t count, DType t) override {
    if (on_host(buf)) return mpi_->all_reduce(buf, count, t);
    check_summable(t, "all_reduce");
    if (count == 0) return;  // every rank passes the same count to a collective
    after_kernels();
    nccl_check(ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, comm_, stream_), "ncclAllReduce");
    wait("all_reduce");
  }

  void reduce_scatter(const void* send, void* recv, size_t count, DType t) override {
    if (on_host(send) && on_host(recv)) return mpi_->reduce_scatter(send, recv, count, t);
    check_summable(t, "reduce_scatter");
    if (count == 0) return;
    after_kernels();
    nccl_check(ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, comm_, stream_), "ncclReduceScatter");
    wait("reduce_scatter");
  }

  void all_gather(const void* send, void* recv, size_t count, DType t) override {
    if (on_host(send) && on_host(recv)) return mpi_->all_gather(send, recv, count, t);
    if (count == 0) return;
    after_kernels();
    nccl_check(ncclAllGather(send, recv, count, nccl_type(t), comm_, stream_), "ncclAllGather");
    wait("all_gather");
  }

  void broadcast(void* buf, size_t count, DType t, int root) override {
    if (on_host(buf)) return mpi_->broadcast(buf, count, t, root);
    check_rank(root, size(), "broadcast", "root");
    if (count == 0) return;
    after_kernels();
    nccl_check(ncclBroadcast(buf, buf, count, nccl_type(t), root, comm_, stream_), "ncclBroadcast");
    wait("broadcast");
  }

  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType t) override {
    if (on_host(send) && on_host(recv)) return mpi_->sendrecv(send, send_count, dest, recv, recv_count, source, t);
    check_rank(dest, size(), "sendrecv", "destination");
    check_rank(source, size(), "sendrecv", "source");
    // Inside one group the send and the receive progress together, so a ring of
    // sendrecvs cannot deadlock. An empty side is left out (its peer leaves it out too).
    after_kernels();
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    if (send_count > 0) nccl_check(ncclSend(send, send_count, nccl_type(t), dest, comm_, stream_), "ncclSend");
    if (recv_count > 0) nccl_check(ncclRecv(recv, recv_count, nccl_type(t), source, comm_, stream_), "ncclRecv");
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    wait("sendrecv", world_ranks_[size_t(source)], world_ranks_[size_t(dest)]);
  }

  void barrier() override {
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    mpi_->barrier();
  }

  // Tagged messages: MPI (the top of this file says why).
  Request isend(const void* buf, size_t count, DType t, int dest, int tag) override {
    return mpi_->isend(buf, count, t, dest, tag);
  }
  Request irecv(void* buf, size_t count, DType t, int source, int tag) override {
    return mpi_->irecv(buf, count, t, source, tag);
  }
  void wait(Request& request) override { mpi_->wait(request); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<NcclComm>(mpi_->split(color, key), device_, timeout_s_);
  }
  double timeout_s() const override { return timeout_s_; }
  void set_timeout_s(double seconds) override {  // its own waits, and those of the MPI beside it
    timeout_s_ = seconds;
    mpi_->set_timeout_s(seconds);
  }

  void abort(int code) override {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    mpi_->abort(code);
  }

 private:
  std::string prefix() const { return "rank " + std::to_string(world_rank_) + ": "; }

  // Host memory (null counts as host: an empty operation) goes to MPI.
  static bool on_host(const void* p) { return !on_gpu_memory(p); }

  void nccl_check(ncclResult_t r, const char* call) {
    if (r == ncclSuccess) return;
    broken_ = true;
    std::string detail = ncclGetErrorString(r);
    if (comm_ != nullptr) {
      const char* last = ncclGetLastError(comm_);
      if (last != nullptr && *last != '\0') detail += std::string(" (") + last + ")";
    }
    fail(prefix() + call + " failed: " + detail);
  }

  void cuda_check(cudaError_t err, const char* call) {
    if (err == cudaSuccess) return;
    broken_ = true;
    fail(prefix() + call + " failed: " + cudaGetErrorString(err));
  }

  // The next operation on stream_ waits for the kernels queued so far on the default stream.
  void after_kernels() {
    cuda_check(cudaEventRecord(kernels_done_, cudaStreamLegacy), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, kernels_done_, 0), "cudaStreamWaitEvent");
  }

  // Waits for the operation just enqueued; peers (world ranks) name whom a sendrecv
  // waited for.
  void wait(const char* op, int from = -1, int to = -1) {
    poll([&] { return cudaStreamQuery(stream_); }, op, [&] {
      const std::string within = " within " + format_seconds(timeout_s_) + " s during " + op + ": peer lost?";
      if (from >= 0)
        return prefix() + "no message from rank " + std::to_string(from) + " (or rank " + std::to_string(to) +
               " did not take ours)" + within;
      return prefix() + op + " over ranks " + format_ranks(world_ranks_) + " did not complete within " +
             format_seconds(timeout_s_) + " s: a rank is lost or never called " + op;
    });
  }

  // Polls query() until it reports success, or fails after timeout_s with on_timeout().
  template <class Query, class Message>
  void poll(Query query, const char* op, Message on_timeout) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto deadline = deadline_after(timeout_s_);
    auto nap = std::chrono::microseconds(5);
    for (;;) {
      const cudaError_t q = query();
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda_check(q, op);
      ncclResult_t state = ncclSuccess;
      nccl_check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      if (state != ncclSuccess && state != ncclInProgress) nccl_check(state, op);
      if (clock::now() > deadline) {
        broken_ = true;
        ncclCommAbort(comm_);  // frees the kernels still waiting for the lost peer
        comm_ = nullptr;
        fail(on_timeout());
      }
      if (clock::now() - start > std::chrono::microseconds(100)) {
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(200));
      } else {
        std::this_thread::yield();
      }
    }
  }

  std::unique_ptr<Communicator> mpi_;  // same ranks over MPI: bootstrap, split, barrier, p2p, host buffers
  Device device_;
  double timeout_s_;
  int world_rank_ = 0;
  std::vector<int> world_ranks_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t kernels_done_ = nullptr;  // recorded on the default stream before each operation
  bool broken_ = false;
};

}  // namespace

std::unique_ptr<Communicator> comm_detail::make_nccl_comm(std::unique_ptr<Communicator> mpi,
                                                          const CommOptions& options) {
  return std::make_unique<NcclComm>(std::move(mpi), options.device, options.timeout_s);
}

}  // namespace gpt

#endif  // GPT_HAVE_NCCL && GPT_HAVE_MPI
