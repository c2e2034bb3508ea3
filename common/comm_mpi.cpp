// The MPI backend of the Communicator.
//
// Every operation is posted as a non-blocking MPI call (MPI_Iallreduce,
// MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast, MPI_Isend + MPI_Irecv,
// MPI_Ibarrier) and then completed by our own wait loop (poll_until_done) instead of a blocking call.
// That loop is the reason for the design:
//   * it polls MPI_Test, first yielding the core and then sleeping for a time that
//     doubles up to a fraction of a millisecond, so that when ranks outnumber cores
//     (a laptop, `--oversubscribe`) a waiting rank does not burn the core the rank it
//     waits for needs; MPI's own blocking calls spin;
//   * it gives up after `timeout_s` seconds with an error naming the operation, this
//     rank and the rank(s) it waited for, so a lost or hung peer ends the job with a
//     reason instead of hanging it forever;
//   * while it waits, it answers the roll calls of ranks that gave up (roll_call below):
//     a rank that timed out waiting for a neighbour learns which rank is really silent,
//     not only which one it was waiting for (in a pipeline, rank 0 waits for rank 1,
//     which waits for a hung rank 3).
//
// Thread level: MPI_THREAD_MULTIPLE is requested because stage 02 communicates on a
// thread of its own while the main thread computes. If the library provides only
// MPI_THREAD_SERIALIZED, every MPI call here takes a process-wide lock, which makes
// the communicators safe to use from several threads (each communicator still from one
// thread at a time); below that, only the main thread may use them (a warning says so).
//
// Errors: communicators use MPI_ERRORS_RETURN, and an error code becomes a gpt::fail
// message made with MPI_Error_string. After a timeout or an MPI error, and when the
// last communicator is destroyed by an exception on its way out, MPI_Finalize is not
// called: it waits for every rank, and a rank that gave up should instead exit so that
// mpirun sees the failure and ends the others.
//
// GPU buffers (device=cuda: several ranks sharing a GPU, or the NCCL backend's tagged
// point-to-point messages, which it hands to MPI): MPI here is not CUDA-aware,
// so a buffer in GPU memory is copied into pinned host memory, communicated, and copied
// back. Callers hand in buffers whose producing kernels have finished.
#ifdef GPT_HAVE_MPI

#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/comm.h"
#include "common/comm_internal.h"
#include "common/launcher.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpt {
namespace {

using namespace comm_detail;

// The bf16 sum as an MPI reduction operator: inout[i] = in[i] + inout[i], rounded.
void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  sum_into(inout, in, inout, size_t(*len), DType::BF16);
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

// MPI_Init_thread waits for every rank of the job to start (the launcher's exchange of
// addresses), with no timeout of its own: one rank that never comes (stopped, or its
// machine unreachable) would hold every other there for good. While it lives, a thread
// ends this process with status 2 once `timeout_s` (comm_timeout_s) has passed, naming
// the wait; the launcher then ends the job, as for any rank that exits with an error.
class InitWatchdog {
 public:
  explicit InitWatchdog(double timeout_s)
      : thread_([this, timeout_s] {
          std::unique_lock<std::mutex> lock(mutex_);
          // wait_until a deadline_after: a timeout beyond the clock's range waits as if forever.
          if (done_cv_.wait_until(lock, deadline_after(timeout_s), [this] { return done_; })) return;
          std::fprintf(stderr, "%s%serror: rank %d: MPI_Init did not complete within %g s (comm_timeout_s): a rank "
                       "of the job has not started, or is stopped or unreachable\n", program_name(),
                       *program_name() ? ": " : "", launcher_rank(), timeout_s);
          std::fflush(stderr);
          std::_Exit(2);  // no destructor or atexit handler: they may wait on MPI too
        }) {}
  ~InitWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_one();
    thread_.join();
  }
  InitWatchdog(const InitWatchdog&) = delete;
  InitWatchdog& operator=(const InitWatchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;  // last: it starts once the members it reads exist
};

// MPI itself: initialised by the first make_mpi_world, finalised when the last
// communicator holding it is destroyed. Also owns the bf16 datatype and its sum.
class MpiRuntime {
 public:
  static std::shared_ptr<MpiRuntime> get(int* argc, char*** argv, double init_timeout_s) {
    static std::mutex mutex;
    static std::weak_ptr<MpiRuntime> current;
    std::lock_guard<std::mutex> lock(mutex);
    std::shared_ptr<MpiRuntime> rt = current.lock();
    if (!rt) {
      rt.reset(new MpiRuntime(argc, argv, init_timeout_s));
      current = rt;
    }
    return rt;
  }

  ~MpiRuntime() {
    if (broken_ || std::uncaught_exceptions() > 0) return;  // see the file header
    MPI_Op_free(&bf16_sum_);
    MPI_Type_free(&bf16_);
    if (owns_mpi_) MPI_Finalize();
  }

  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int thread_level() const { return thread_level_; }

  // Held around every MPI call when the library is not thread-multiple.
  std::unique_lock<std::mutex> guard() {
    return thread_level_ < MPI_THREAD_MULTIPLE ? std::unique_lock<std::mutex>(mutex_) : std::unique_lock<std::mutex>();
  }

  MPI_Datatype type(DType t) const {
    return t == DType::F32 ? MPI_FLOAT : t == DType::F64 ? MPI_DOUBLE : t == DType::BF16 ? bf16_ : MPI_BYTE;
  }
  MPI_Op sum(DType t) const { return t == DType::BF16 ? bf16_sum_ : MPI_SUM; }

  // After a timeout or an MPI error: MPI_Finalize must not be called (it would wait).
  void mark_broken() { broken_ = true; }
  bool broken() const { return broken_; }

  // The process's live communicators, so that a rank waiting on any of them answers the
  // roll calls taken on every one (MpiComm::answer_roll_calls): a rank is then silent
  // only when it waits on none, lost, hung or computing. A communicator is listed while
  // its MpiComm lives (one entry per MpiComm; several may share MPI_COMM_WORLD).
  void add_comm(MPI_Comm comm) {
    std::lock_guard<std::mutex> lock(comms_mutex_);
    comms_.push_back(comm);
  }
  void remove_comm(MPI_Comm comm) {
    std::lock_guard<std::mutex> lock(comms_mutex_);
    const auto it = std::find(comms_.begin(), comms_.end(), comm);
    if (it != comms_.end()) comms_.erase(it);
  }
  // Calls f(comm) for each listed communicator, holding the list: none is freed meanwhile.
  template <class F>
  void for_each_comm(F&& f) {
    std::lock_guard<std::mutex> lock(comms_mutex_);
    for (MPI_Comm comm : comms_) f(comm);
  }

  // A roll-call answer's text, kept for the rest of the process: the answer is sent and
  // never waited for, so its buffer must outlive the call. Answers are few (a roll call
  // follows a timeout, which ends the job), so nothing is ever freed.
  static constexpr int kAnswerChars = 120;
  const char* keep_answer(const std::string& text) {
    std::lock_guard<std::mutex> lock(answers_mutex_);  // its own: the caller may hold comms_mutex_ and mutex_
    std::array<char, kAnswerChars>& kept = answers_.emplace_back();
    kept.fill('\0');
    text.copy(kept.data(), kAnswerChars - 1);
    return kept.data();
  }

 private:
  MpiRuntime(int* argc, char*** argv, double init_timeout_s) {
    int finalized = 0, initialized = 0;
    MPI_Finalized(&finalized);
    if (finalized) fail("make_world: MPI was already finalised in this process; call make_world once");
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Query_thread(&thread_level_);  // someone else initialised MPI: leave it to them
    } else {
      const InitWatchdog watchdog(init_timeout_s);
      MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_);
      owns_mpi_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);

    // bf16 travels as an opaque 2-byte type; only its sum needs to know what it is.
    MPI_Type_contiguous(2, MPI_BYTE, &bf16_);
    MPI_Type_set_name(bf16_, "bf16");
    MPI_Type_commit(&bf16_);
    MPI_Op_create(&bf16_sum_op, /*commute=*/1, &bf16_sum_);

    if (thread_level_ < MPI_THREAD_MULTIPLE && world_rank_ == 0)
      std::fprintf(stderr, "warning: MPI provides %s, not MPI_THREAD_MULTIPLE: %s\n", thread_level_name(thread_level_),
                   thread_level_ == MPI_THREAD_SERIALIZED
                       ? "communicator calls are serialised by a lock"
                       : "use communicators from the main thread only (no communication thread)");
  }

  bool owns_mpi_ = false;
  std::atomic<bool> broken_{false};  // set by a thread that failed, read by all
  int thread_level_ = MPI_THREAD_SINGLE;
  int world_rank_ = 0;
  MPI_Datatype bf16_ = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  std::mutex mutex_;
  std::mutex comms_mutex_;  // guards comms_; taken before mutex_ (guard()) where both are
  std::vector<MPI_Comm> comms_;
  std::mutex answers_mutex_;  // guards answers_; taken last, after any other
  std::deque<std::array<char, kAnswerChars>> answers_;  // keep_answer's texts (a deque: they never move)
};

// One outstanding request of an operation, and whom it waits for.
struct Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  int peer = -1;         // world rank of the point-to-point peer; -1 for a collective
  bool receive = false;  // a receive waits for the peer's message; a send for it to be taken
  int tag = -1;          // the tag of a send or recv; -1 inside a collective
  MPI_Status status{};
};

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* x = static_cast<const std::byte*>(a);
  const auto* y = static_cast<const std::byte*>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

class MpiComm final : public Communicator {
 public:
  MpiComm(std::shared_ptr<MpiRuntime> rt, MPI_Comm comm, bool owned, Device device, double timeout_s)
      : rt_(std::move(rt)), comm_(comm), owned_(owned), device_(device), timeout_s_(timeout_s) {
    auto g = rt_->guard();
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    // The world ranks of this group's members, for error messages.
    MPI_Group group, world_group;
    check(MPI_Comm_group(comm_, &group), "MPI_Comm_group");
    check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
    std::vector<int> local(size_t(size_), 0);
    for (int i = 0; i < size_; ++i) local[size_t(i)] = i;
    world_ranks_.resize(size_t(size_));
    check(MPI_Group_translate_ranks(group, size_, local.data(), world_group, world_ranks_.data()),
          "MPI_Group_translate_ranks");
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    g = {};  // the list's lock is taken before the MPI one, never inside it
    rt_->add_comm(comm_);
  }

  ~MpiComm() override {
    rt_->remove_comm(comm_);
    if (owned_ && !rt_->broken()) {
      auto g = rt_->guard();
      MPI_Comm_free(&comm_);
    }
#ifdef GPT_HAVE_CUDA
    for (Pinned& p : pinned_)
      if (p.data) cudaFreeHost(p.data);
    for (Pinned& p : p2p_spares_) cudaFreeHost(p.data);
#endif
  }

  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }

  // A group of one rank (dp = 1, tp = 1, ...: the groups a layout leaves unsplit) sums and
  // gathers its own data: no MPI call, and on a GPU no copy through the host and back.

  void all_reduce(void* buf, size_t count, DType t) override {
    check_count(count, "all_reduce");
    check_summable(t, "all_reduce");
    if (size_ == 1) return;
    const size_t bytes = count * dtype_size(t);
    void* host = host_view(0, buf, bytes, true);
    Pending p;
    {
      auto g = rt_->guard();
      check(MPI_Iallreduce(MPI_IN_PLACE, host, int(count), rt_->type(t), rt_->sum(t), comm_, &p.request),
            "MPI_Iallreduce");
    }
    poll_until_done(&p, 1, "all_reduce");
    copy_back(buf, host, bytes);
  }

  void reduce_scatter(const void* send, void* recv, size_t count, DType t) override {
    check_count(count, "reduce_scatter");
    check_summable(t, "reduce_scatter");
    const size_t bytes = count * dtype_size(t);
    if (size_ == 1 && copied_alone(send, recv, bytes)) return;
    const void* host_send = host_view(0, send, bytes * size_t(size_), true);
    void* host_recv = host_view(1, recv, bytes, false);
    // MPI forbids overlapping buffers; the in-place form (recv = this rank's chunk of
    // send) and any other overlap go through a temporary.
    std::vector<std::byte> temp;
    void* target = host_recv;
    if (overlap(host_send, bytes * size_t(size_), host_recv, bytes)) {
      temp.resize(bytes);
      target = temp.data();
    }
    Pending p;
    {
      auto g = rt_->guard();
      check(MPI_Ireduce_scatter_block(host_send, target, int(count), rt_->type(t), rt_->sum(t), comm_, &p.request),
            "MPI_Ireduce_scatter_block");
    }
    poll_until_done(&p, 1, "reduce_scatter");
    if (target != host_recv) std::memcpy(host_recv, target, bytes);
    copy_back(recv, host_recv, bytes);
  }

  void all_gather(const void* send, void* recv, size_t count, DType t) override {
    check_count(count, "all_gather");
    const size_t bytes = count * dtype_size(t);
    if (size_ == 1 && copied_alone(send, recv, bytes)) return;
    const void* host_send = host_view(0, send, bytes, true);
    void* host_recv = host_view(1, recv, bytes * size_t(size_), false);
    // In place (send is already this rank's chunk of recv) is MPI_IN_PLACE; any other
    // overlap copies send aside first.
    std::vector<std::byte> temp;
    if (host_send == static_cast<std::byte*>(host_recv) + bytes * size_t(rank_) && bytes > 0) {
      host_send = MPI_IN_PLACE;
    } else if (overlap(host_send, bytes, host_recv, bytes * size_t(size_))) {
      temp.assign(static_cast<const std::byte*>(host_send), static_cast<const std::byte*>(host_send) + bytes);
      host_send = temp.data();
    }
    Pending p;
    {
      auto g = rt_->guard();
      check(MPI_Iallgather(host_send, int(count), rt_->type(t), host_recv, int(count), rt_->type(t), comm_,
                           &p.request),
            "MPI_Iallgather");
    }
    poll_until_done(&p, 1, "all_gather");
    copy_back(recv, host_recv, bytes * size_t(size_));
  }

  void broadcast(void* buf, size_t count, DType t, int root) override {
    check_count(count, "broadcast");
    check_rank(root, size_, "broadcast", "root");
    if (size_ == 1) return;
    const size_t bytes = count * dtype_size(t);
    void* host = host_view(0, buf, bytes, rank_ == root);
    Pending p;
    {
      auto g = rt_->guard();
      check(MPI_Ibcast(host, int(count), rt_->type(t), root, comm_, &p.request), "MPI_Ibcast");
    }
    poll_until_done(&p, 1, "broadcast");
    if (rank_ != root) copy_back(buf, host, bytes);
  }

  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType t) override {
    check_count(send_count, "sendrecv");
    check_count(recv_count, "sendrecv");
    check_rank(dest, size_, "sendrecv", "destination");
    check_rank(source, size_, "sendrecv", "source");
    const size_t send_bytes = send_count * dtype_size(t), recv_bytes = recv_count * dtype_size(t);
    const void* host_send = host_view(0, send, send_bytes, true);
    void* host_recv = host_view(1, recv, recv_bytes, false);
    std::vector<std::byte> temp;
    if (overlap(host_send, send_bytes, host_recv, recv_bytes)) {
      temp.assign(static_cast<const std::byte*>(host_send), static_cast<const std::byte*>(host_send) + send_bytes);
      host_send = temp.data();
    }
    // The receive is posted first so that the peer's message has somewhere to land.
    constexpr int kTag = kMaxTag + 1;  // above the users' tags; one sendrecv at a time: order suffices
    Pending p[2];
    p[0].peer = world_ranks_[size_t(source)];
    p[0].receive = true;
    p[1].peer = world_ranks_[size_t(dest)];
    {
      auto g = rt_->guard();
      check(MPI_Irecv(host_recv, int(recv_count), rt_->type(t), source, kTag, comm_, &p[0].request), "MPI_Irecv");
      check(MPI_Isend(host_send, int(send_count), rt_->type(t), dest, kTag, comm_, &p[1].request), "MPI_Isend");
    }
    poll_until_done(p, 2, "sendrecv");
    int received = 0;
    MPI_Get_count(&p[0].status, rt_->type(t), &received);
    if (size_t(received) != recv_count)
      fail(prefix() + "sendrecv expected " + std::to_string(recv_count) + " elements from rank " +
           std::to_string(p[0].peer) + " but received " + std::to_string(received));
    copy_back(recv, host_recv, recv_bytes);
  }

  void barrier() override {
    Pending p;
    {
      auto g = rt_->guard();
      check(MPI_Ibarrier(comm_, &p.request), "MPI_Ibarrier");
    }
    poll_until_done(&p, 1, "barrier");
  }

  Request isend(const void* buf, size_t count, DType t, int dest, int tag) override {
    return post(const_cast<void*>(buf), count, t, dest, tag, /*receive=*/false);
  }
  Request irecv(void* buf, size_t count, DType t, int source, int tag) override {
    return post(buf, count, t, source, tag, /*receive=*/true);
  }

  void wait(Request& request) override {
    std::unique_ptr<Request::State> state = request.release();
    auto* req = dynamic_cast<P2pRequest*>(state.get());
    if (req == nullptr || req->owner != this) internal_error(prefix() + "wait: the request is empty or was posted on another communicator");
    const char* op = req->p.receive ? "recv" : "send";
    poll_until_done(&req->p, 1, op);
    if (req->p.receive) {
      int received = 0;
      MPI_Get_count(&req->p.status, rt_->type(req->type), &received);
      if (size_t(received) != req->count)
        fail(prefix() + "recv from rank " + std::to_string(req->p.peer) + " (tag " + std::to_string(req->p.tag) +
             ") expected " + std::to_string(req->count) + " elements but received " + std::to_string(received));
      copy_back(req->user, req->host, req->count * dtype_size(req->type));
    }
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    if (color < 0) fail("split: color must be >= 0, not " + std::to_string(color));
    // MPI_Comm_split blocks with no timeout; a barrier with one first turns a lost peer
    // into an error instead of a hang.
    barrier();
    MPI_Comm sub = MPI_COMM_NULL;
    {
      auto g = rt_->guard();
      check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    }
    return std::make_unique<MpiComm>(rt_, sub, true, device_, timeout_s_);
  }
  // This rank's place among the ranks of its node, the ranks that share its memory.
  void node_local(int* local_rank, int* local_size) {
    barrier();  // MPI_Comm_split_type blocks with no timeout, as MPI_Comm_split does
    auto g = rt_->guard();
    int rank = 0;
    check(MPI_Comm_rank(comm_, &rank), "MPI_Comm_rank");
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    const int rank_code = MPI_Comm_rank(node, local_rank);
    const int size_code = MPI_Comm_size(node, local_size);
    MPI_Comm_free(&node);
    check(rank_code, "MPI_Comm_rank (node)");
    check(size_code, "MPI_Comm_size (node)");
  }
  double timeout_s() const override { return timeout_s_; }
  void set_timeout_s(double seconds) override { timeout_s_ = seconds; }

  void abort(int code) override {
    std::fflush(nullptr);
    // mpirun forwards a rank's output from a pipe, on its own time, while MPI_Abort reaches
    // it by another path and makes it end every rank: the error line a rank printed just
    // before was seen lost (only Open MPI's abort notice came out). A moment first lets the
    // line through; this is the error path alone.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    MPI_Abort(comm_, code);
  }

 private:
  // A posted isend or irecv. GPU buffers travel through a pinned host buffer of the
  // request's own (several may be in flight, unlike the collectives' two slots), taken
  // from the communicator's spares and handed back when the request ends.
  struct P2pRequest : Request::State {
    MpiComm* owner = nullptr;
    Pending p;
    void* user = nullptr;  // the caller's buffer
    void* host = nullptr;  // what MPI reads or writes: user, or the pinned copy
    bool pinned = false;
    size_t bytes = 0;  // of the pinned copy (it may be larger than the message)
    size_t count = 0;
    DType type = DType::Byte;
    ~P2pRequest() override {
      bool live = false;  // whether MPI may still read or write `host`
      if (p.request != MPI_REQUEST_NULL && !owner->rt_->broken()) {
        // Never waited for: a receive is withdrawn (a cancel that finds its message
        // already arriving fails, and the receive completes), a send abandoned.
        auto g = owner->rt_->guard();
        if (p.receive) MPI_Cancel(&p.request);
        int done = 0;
        MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Request_free(&p.request);
        live = !done;
      }
      live = live || p.request != MPI_REQUEST_NULL;  // a broken runtime frees nothing
#ifdef GPT_HAVE_CUDA
      // A pinned copy MPI may still use is left allocated (only on the way out of a failed
      // job): reusing or freeing it would let MPI write into memory handed out again.
      if (pinned && !live) owner->release_pinned({host, bytes});
#else
      (void)live;
#endif
    }
  };

  Request post(void* buf, size_t count, DType t, int peer, int tag, bool receive) {
    const char* op = receive ? "irecv" : "isend";
    check_count(count, op);
    check_rank(peer, size_, op, receive ? "source" : "destination");
    check_tag(tag, op);
    auto req = std::make_unique<P2pRequest>();
    req->owner = this, req->user = buf, req->host = buf, req->count = count, req->type = t;
    req->p.peer = world_ranks_[size_t(peer)], req->p.receive = receive, req->p.tag = tag;
    const size_t bytes = count * dtype_size(t);
#ifdef GPT_HAVE_CUDA
    if (bytes > 0 && on_gpu(buf)) {
      const Pinned pin = take_pinned(bytes);
      req->host = pin.data, req->bytes = pin.bytes, req->pinned = true;
      if (!receive) cuda_check(cudaMemcpy(req->host, buf, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    }
#endif
    (void)bytes;
    auto g = rt_->guard();
    if (receive)
      check(MPI_Irecv(req->host, int(count), rt_->type(t), peer, tag, comm_, &req->p.request), "MPI_Irecv");
    else
      check(MPI_Isend(req->host, int(count), rt_->type(t), peer, tag, comm_, &req->p.request), "MPI_Isend");
    return Request(std::move(req));
  }

  std::string prefix() const { return "rank " + std::to_string(rt_->world_rank()) + ": "; }

  void check(int code, const char* call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(code, text, &length);
    rt_->mark_broken();
    fail(prefix() + call + " failed: " + std::string(text, size_t(std::max(length, 0))));
  }

  // Completes the n requests of `op`, or fails after timeout_s naming whom it waited for.
  void poll_until_done(Pending* p, int n, const char* op) {
    using clock = std::chrono::steady_clock;
    // Yield the core for the first stretch (a short operation completes within it at
    // full speed), then sleep, doubling the nap up to kMaxNap.
    constexpr auto kYieldFor = std::chrono::microseconds(200);
    constexpr auto kMaxNap = std::chrono::microseconds(100);
    const auto start = clock::now();
    const auto deadline = deadline_after(timeout_s_);
    auto nap = std::chrono::microseconds(10);
    std::string waiting_in;  // describe_wait's, for the roll calls this wait answers
    for (;;) {
      bool done = true;
      {
        auto g = rt_->guard();
        for (int i = 0; i < n; ++i) {
          if (p[i].request == MPI_REQUEST_NULL) continue;  // completed earlier
          int flag = 0;
          check(MPI_Test(&p[i].request, &flag, &p[i].status), op);
          done = done && flag;
        }
      }
      if (done) return;
      const auto now = clock::now();
      if (now > deadline) timed_out(p, n, op);
      if (now - start < kYieldFor) {
        std::this_thread::yield();
      } else {
        // A wait this long may be part of a stall some rank reports: it is told where this
        // rank waits (said once a wait, when first needed).
        if (waiting_in.empty()) waiting_in = describe_wait(p, n, op);
        answer_roll_calls(waiting_in);
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, kMaxNap);
      }
    }
  }

  // Where a wait is, as a roll-call answer says it: "recv from rank 3 (tag 5)", "send to
  // rank 3 (tag 5)", "sendrecv from rank 3", or "all_reduce over ranks 0-3" (world ranks). Ranks waiting in the
  // same collective on the same group say the same words.
  std::string describe_wait(const Pending* p, int n, const char* op) const {
    for (int i = 0; i < n; ++i)
      if (p[i].request != MPI_REQUEST_NULL && p[i].peer >= 0)  // sendrecv's own tag is not the caller's: unsaid
        return std::string(op) + (p[i].receive ? " from rank " : " to rank ") + std::to_string(p[i].peer) +
               (p[i].tag >= 0 ? " (tag " + std::to_string(p[i].tag) + ")" : "");
    return std::string(op) + " over ranks " + format_ranks(world_ranks_);
  }

  [[noreturn]] void timed_out(Pending* p, int n, const char* op) {
    rt_->mark_broken();
    const std::string within = " within " + format_seconds(timeout_s_) + " s during " + op + ": peer lost?";
    // Name a receive first: a message that never came is the usual story.
    const Pending* first = nullptr;
    for (int i = 0; i < n; ++i)
      if (p[i].request != MPI_REQUEST_NULL && (!first || (p[i].receive && !first->receive))) first = &p[i];
    std::string message;
    if (first && first->tag >= 0 && first->receive)
      message = prefix() + op + " from rank " + std::to_string(first->peer) + " (tag " + std::to_string(first->tag) +
                "): no message within " + format_seconds(timeout_s_) +
                " s (peer lost, or it never sends with this tag)";
    else if (first && first->tag >= 0)
      message = prefix() + op + " to rank " + std::to_string(first->peer) + " (tag " + std::to_string(first->tag) +
                "): not received within " + format_seconds(timeout_s_) +
                " s (peer lost, or it never receives with this tag)";
    else if (first && first->peer >= 0 && first->receive)
      message = prefix() + "no message from rank " + std::to_string(first->peer) + within;
    else if (first && first->peer >= 0)
      message = prefix() + "rank " + std::to_string(first->peer) + " did not take our message" + within;
    else
      message = prefix() + op + " over ranks " + format_ranks(world_ranks_) + " did not complete within " +
                format_seconds(timeout_s_) + " s";
    // The peer waited for may itself be waiting for another: the roll call names the
    // silent ranks.
    const std::string roll = roll_call(op, first && first->peer >= 0 ? first : nullptr, describe_wait(p, n, op));
    // A rank that was only late may have come during the roll call's grace period: then
    // the operation is complete, and the roll call's verdict is not the story.
    bool completed = true;
    {
      auto g = rt_->guard();
      for (int i = 0; i < n; ++i) {
        if (p[i].request == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&p[i].request, &flag, &p[i].status);
        completed = completed && flag;
      }
    }
    message += completed ? "; it completed during the roll call that followed: a rank was late, not lost (a longer "
                           "comm_timeout_s, or save_timeout_s around a save, would have waited for it)"
                         : roll;
    // Withdraw pending receives so MPI does not write into the caller's buffer later (a
    // receive whose message is already arriving cannot be cancelled: it completes).
    for (int i = 0; i < n; ++i)
      if (p[i].receive && p[i].request != MPI_REQUEST_NULL) {
        auto g = rt_->guard();
        MPI_Cancel(&p[i].request);
        int done = 0;
        MPI_Test(&p[i].request, &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Request_free(&p[i].request);
      }
    fail(message);
  }

  // The roll call's two messages, each with a tag of its own so that neither is taken
  // for the other: a note ("I timed out: who is alive?") and its answer ("alive").
  static constexpr int kRollCallTag = kMaxTag + 2;
  static constexpr int kRollAnswerTag = kMaxTag + 3;

  // A rank that timed out cannot tell from its own wait whom the job is waiting for: a
  // collective does not say which rank is missing, and the peer of a point-to-point
  // message may be waiting in turn for another. So it asks: it sends a note to every
  // other rank of the communicator and listens for their answers for a grace period (a
  // quarter of the timeout, within [0.25 s, 5 s]). Every rank waiting on any
  // communicator answers (answer_roll_calls): in its wait loop, or in its own roll call
  // when it timed out too. That is why this loop runs the whole grace period, answering,
  // even once everyone has answered it: a rank that times out a little later must not
  // take this one for lost. The ranks never heard from are the lost or hung ones, or
  // ranks busy outside communication (computing, writing); each answer says where its
  // rank waits, which names the calls that do not match when every rank answers.
  // `waited` is the point-to-point message waited for (nullptr for a collective), and
  // `waiting_in` describe_wait's words for this rank's own wait. Returns the end of the
  // error message.
  std::string roll_call(const char* op, const Pending* waited, const std::string& waiting_in) {
    static int note = 1;  // static: a send to a lost rank may outlive this call
    constexpr int kChars = MpiRuntime::kAnswerChars;
    const double grace_s = std::clamp(timeout_s_ / 4, 0.25, 5.0);
    // Each answer: where that rank waits. On the heap, and left there if a withdrawn
    // receive may still write into it (below).
    auto heard_storage = std::make_unique<std::vector<std::array<char, kChars>>>(static_cast<size_t>(size_));
    std::vector<std::array<char, kChars>>& heard = *heard_storage;
    std::vector<MPI_Request> answers(size_t(size_), MPI_REQUEST_NULL);
    {
      auto g = rt_->guard();
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        MPI_Irecv(heard[size_t(r)].data(), kChars, MPI_CHAR, r, kRollAnswerTag, comm_, &answers[size_t(r)]);
        MPI_Request send = MPI_REQUEST_NULL;
        if (MPI_Isend(&note, 1, MPI_INT, r, kRollCallTag, comm_, &send) == MPI_SUCCESS)
          MPI_Request_free(&send);  // never waited for: the job ends after this call
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                   std::chrono::duration<double>(grace_s));
    const std::string own_answer = waiting_in + " (timed out)";  // what this rank answers others meanwhile
    std::vector<int> silent;
    for (;;) {
      answer_roll_calls(own_answer);
      silent.clear();
      {
        auto g = rt_->guard();
        for (int r = 0; r < size_; ++r) {
          MPI_Request& q = answers[size_t(r)];
          if (q == MPI_REQUEST_NULL) continue;
          int flag = 0;
          MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
          if (!flag) silent.push_back(r);
        }
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<int> lost;
    bool answers_live = false;  // a withdrawn receive that may still write into `heard`
    for (int r : silent) {
      auto g = rt_->guard();
      MPI_Cancel(&answers[size_t(r)]);  // so MPI does not write into `heard` later
      int done = 0, cancelled = 0;
      MPI_Status status;
      MPI_Test(&answers[size_t(r)], &done, &status);
      if (done) MPI_Test_cancelled(&status, &cancelled);
      if (!done) MPI_Request_free(&answers[size_t(r)]);
      answers_live = answers_live || !done;
      if (!done || cancelled) lost.push_back(world_ranks_[size_t(r)]);  // else its answer came just now
    }
    if (answers_live) (void)heard_storage.release();  // left allocated: MPI may still fill it
    // Where a rank that answered waits ("barrier over ranks 0-2", with " (timed out)" when
    // it answered from its own roll call).
    const auto where = [&](int r) {
      const std::array<char, kChars>& text = heard[size_t(r)];
      return std::string(text.data(), strnlen(text.data(), kChars));
    };
    if (lost.empty() && waited) {
      const auto local = std::find(world_ranks_.begin(), world_ranks_.end(), waited->peer);
      const std::string peer_waits =
          local == world_ranks_.end() ? "another call" : where(int(local - world_ranks_.begin()));
      return "; roll call: every rank of the communicator answered, rank " + std::to_string(waited->peer) +
             " too: it is waiting in " + peer_waits + ", and has not " + (waited->receive ? "sent" : "received") +
             " this message (the ranks' calls do not match, or it waits first for a rank outside the "
             "communicator)";
    }
    if (lost.empty()) {
      // The ranks waiting somewhere else than this collective are the ones whose calls
      // differ: name them (the first four) and where they wait.
      std::string elsewhere;
      int named = 0, more = 0;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        // An answer is cut to kChars - 1 characters (keep_answer): compare it so.
        const std::string text = where(r);
        if (text == waiting_in.substr(0, kChars - 1) || text == own_answer.substr(0, kChars - 1)) continue;
        if (named == 4) {
          ++more;
          continue;
        }
        elsewhere += std::string(named++ ? "; " : ": ") + "rank " + std::to_string(world_ranks_[size_t(r)]) +
                     " waits in " + text;
      }
      if (more > 0) elsewhere += "; and " + std::to_string(more) + " more";
      // A rank waiting elsewhere never called this op (the calls do not match), or waits
      // first for a rank outside this communicator, lost or held up itself (a rank of
      // another group of a 2-D mesh): its answer says which of its waits it is in.
      return std::string(", yet every rank of the communicator answered a roll call: one of them never called ") +
             op + " (the ranks' calls do not match), or waits first for a rank outside the communicator" +
             elsewhere;
    }
    return std::string("; roll call: no message from ") + (lost.size() == 1 ? "rank " : "ranks ") +
           format_ranks(lost) + " within " + format_seconds(grace_s) +
           " s more: lost or hung, or busy outside communication";
  }

  // Answers every roll-call note waiting for this rank, on every communicator of the
  // process (a rank waiting on its tensor-parallel group is alive for its pipeline group's
  // roll call too), which tells each sender this rank is alive, and where it waits
  // (`waiting_in`: "all_reduce over ranks 0-3", say). A matched probe
  // (MPI_Improbe, then MPI_Mrecv of exactly that message), so that two threads waiting at
  // once never both try to receive the same note.
  void answer_roll_calls(const std::string& waiting_in) {
    const char* answer_text = nullptr;  // kept by the runtime once a note comes
    rt_->for_each_comm([&](MPI_Comm comm) {
      auto g = rt_->guard();
      for (;;) {
        int found = 0;
        MPI_Message message = MPI_MESSAGE_NULL;
        MPI_Status status;
        if (MPI_Improbe(MPI_ANY_SOURCE, kRollCallTag, comm, &found, &message, &status) != MPI_SUCCESS || !found)
          return;
        int note = 0;
        if (MPI_Mrecv(&note, 1, MPI_INT, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
        if (!answer_text) answer_text = rt_->keep_answer(waiting_in);
        MPI_Request answer = MPI_REQUEST_NULL;
        if (MPI_Isend(answer_text, MpiRuntime::kAnswerChars, MPI_CHAR, status.MPI_SOURCE, kRollAnswerTag, comm,
                      &answer) == MPI_SUCCESS)
          MPI_Request_free(&answer);
      }
    });
  }

  // --- staging of GPU buffers through pinned host memory ---
#ifdef GPT_HAVE_CUDA
  struct Pinned {
    void* data = nullptr;
    size_t bytes = 0;
  };

  bool on_gpu(const void* p) const { return device_ == Device::CUDA && on_gpu_memory(p); }

  void cuda_check(cudaError_t err, const char* what) {
    if (err != cudaSuccess) fail(prefix() + what + " failed while staging a GPU buffer: " + cudaGetErrorString(err));
  }

  // A pinned buffer of at least `bytes` for a point-to-point message: a spare when one is
  // large enough, else a new one. cudaMallocHost locks and maps the pages and synchronizes
  // the device, far dearer than the copy it serves, and a pipeline sends messages of one
  // size over and over: a few spares serve them all.
  Pinned take_pinned(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(spares_mutex_);
      for (size_t i = 0; i < p2p_spares_.size(); ++i)
        if (p2p_spares_[i].bytes >= bytes) {
          const Pinned pin = p2p_spares_[i];
          p2p_spares_.erase(p2p_spares_.begin() + std::ptrdiff_t(i));
          return pin;
        }
    }
    Pinned pin;
    cuda_check(cudaMallocHost(&pin.data, bytes), "cudaMallocHost");
    pin.bytes = bytes;
    return pin;
  }
  // A finished request's buffer, kept as a spare; beyond kMaxSpares the smallest is freed.
  void release_pinned(Pinned pin) {
    std::lock_guard<std::mutex> lock(spares_mutex_);
    p2p_spares_.push_back(pin);
    if (p2p_spares_.size() <= kMaxSpares) return;
    const auto smallest = std::min_element(p2p_spares_.begin(), p2p_spares_.end(),
                                           [](const Pinned& a, const Pinned& b) { return a.bytes < b.bytes; });
    cudaFreeHost(smallest->data);
    p2p_spares_.erase(smallest);
  }
#endif

  // A group of one's reduce-scatter or all-gather: recv = send. True when done here (the
  // same buffer, or two apart, copied where they live); false for a partial overlap, which
  // the general path's temporary handles.
  bool copied_alone(const void* send, void* recv, size_t bytes) {
    if (send == recv || bytes == 0) return true;
    if (overlap(send, bytes, recv, bytes)) return false;
#ifdef GPT_HAVE_CUDA
    if (on_gpu(send) || on_gpu(recv)) {
      cuda_check(cudaMemcpy(recv, send, bytes, cudaMemcpyDefault), "cudaMemcpy");
      return true;
    }
#endif
    std::memcpy(recv, send, bytes);
    return true;
  }

  // A host address with the contents of `p` (when copy_in): p itself for host memory,
  // else pinned staging buffer number `slot` (two per communicator: send and receive).
  void* host_view(int slot, const void* p, size_t bytes, bool copy_in) {
#ifdef GPT_HAVE_CUDA
    if (bytes > 0 && on_gpu(p)) {
      Pinned& pin = pinned_[slot];
      if (pin.bytes < bytes) {
        if (pin.data) cuda_check(cudaFreeHost(pin.data), "cudaFreeHost");
        pin = Pinned{};
        cuda_check(cudaMallocHost(&pin.data, bytes), "cudaMallocHost");
        pin.bytes = bytes;
      }
      if (copy_in) cuda_check(cudaMemcpy(pin.data, p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
      return pin.data;
    }
#else
    (void)slot;
    (void)bytes;
    (void)copy_in;
#endif
    return const_cast<void*>(p);
  }

  // Copies a staged result back to the GPU buffer it stands for (nothing for host memory).
  void copy_back(void* p, const void* host, size_t bytes) {
#ifdef GPT_HAVE_CUDA
    if (host != p && bytes > 0) cuda_check(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
#else
    (void)p;
    (void)host;
    (void)bytes;
#endif
  }

  std::shared_ptr<MpiRuntime> rt_;  // first member: destroyed last, after comm_ is freed
  MPI_Comm comm_;
  bool owned_;
  Device device_;
  double timeout_s_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;  // world rank of each member of this group
#ifdef GPT_HAVE_CUDA
  Pinned pinned_[2];
  // Point-to-point staging buffers no request holds now. Requests may end on another
  // thread than the one that posted them, so the list has a lock of its own.
  static constexpr size_t kMaxSpares = 8;
  std::mutex spares_mutex_;
  std::vector<Pinned> p2p_spares_;
#endif
};

}  // namespace

std::unique_ptr<Communicator> comm_detail::make_mpi_world(int* argc, char*** argv, const CommOptions& options) {
  std::shared_ptr<MpiRuntime> rt = MpiRuntime::get(argc, argv, options.timeout_s);
  return std::make_unique<MpiComm>(rt, MPI_COMM_WORLD, false, options.device, options.timeout_s);
}

void comm_detail::node_local_rank(Communicator& mpi, int* local_rank, int* local_size) {
  auto* c = dynamic_cast<MpiComm*>(&mpi);
  if (c == nullptr) fail(std::string("node_local_rank: needs an MPI communicator, not ") + mpi.backend());
  c->node_local(local_rank, local_size);
}

int comm_detail::mpi_world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace gpt

#endif  // GPT_HAVE_MPI
