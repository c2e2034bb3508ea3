// The local backend: a world of exactly one rank, used when the build has no MPI or the
// process was not started by a launcher (and comm=auto). With one rank every collective
// is trivial: the sum over one buffer is that buffer, the one chunk of a reduce-scatter
// or all-gather is the whole of it, a broadcast from rank 0 to rank 0 moves nothing,
// and a send to oneself is a copy. Point-to-point messages to oneself are kept in a
// queue per tag until the matching receive takes them (in order), so isend before irecv
// and irecv before isend both work; a receive still unmatched when it is waited for can
// never be matched (no other rank exists) and fails at once. Keeping this a real backend lets every stage run
// unchanged as a single process, with no MPI start-up at all.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <map>
#include <mutex>
#include <vector>

#include "common/comm.h"
#include "common/comm_internal.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpt {
namespace {

using comm_detail::check_rank;
using comm_detail::check_summable;
using comm_detail::check_tag;

class LocalComm final : public Communicator {
 public:
  LocalComm(Device device, double timeout_s) : device_(device), timeout_s_(timeout_s) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "local"; }

  void all_reduce(void*, size_t, DType t) override { check_summable(t, "all_reduce"); }

  void reduce_scatter(const void* send, void* recv, size_t count, DType t) override {
    check_summable(t, "reduce_scatter");
    copy(recv, send, count * dtype_size(t));
  }

  void all_gather(const void* send, void* recv, size_t count, DType t) override {
    copy(recv, send, count * dtype_size(t));
  }

  void broadcast(void*, size_t, DType, int root) override { check_rank(root, 1, "broadcast", "root"); }

  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType t) override {
    check_rank(dest, 1, "sendrecv", "destination");
    check_rank(source, 1, "sendrecv", "source");
    if (send_count != recv_count)
      fail("sendrecv: rank 0 sends " + std::to_string(send_count) + " elements to itself but receives " +
           std::to_string(recv_count));
    copy(recv, send, send_count * dtype_size(t));
  }

  void barrier() override {}

  Request isend(const void* buf, size_t count, DType t, int dest, int tag) override {
    check_rank(dest, 1, "isend", "destination");
    check_tag(tag, "isend");
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t bytes = count * dtype_size(t);
    std::vector<std::byte> message(bytes);
    copy(message.data(), buf, bytes);  // buffered: the send completes at once
    auto waiting = receives_.find(tag);
    if (waiting != receives_.end() && !waiting->second.empty()) {
      deliver(*waiting->second.front(), message);
      waiting->second.pop_front();
    } else {
      sends_[tag].push_back(std::move(message));
    }
    return Request(std::make_unique<LocalRequest>());  // nothing left to wait for
  }

  Request irecv(void* buf, size_t count, DType t, int source, int tag) override {
    check_rank(source, 1, "irecv", "source");
    check_tag(tag, "irecv");
    std::lock_guard<std::mutex> lock(mutex_);
    auto req = std::make_unique<LocalRequest>();
    req->receive = true, req->buf = buf, req->bytes = count * dtype_size(t), req->tag = tag;
    // A receive dropped without a wait is withdrawn, so no later send writes into it.
    req->on_destroy = [this](LocalRequest* r) {
      std::lock_guard<std::mutex> guard(mutex_);
      withdraw(r);
    };
    auto queued = sends_.find(tag);
    if (queued != sends_.end() && !queued->second.empty()) {
      deliver(*req, queued->second.front());
      queued->second.pop_front();
    } else {
      receives_[tag].push_back(req.get());
    }
    return Request(std::move(req));
  }

  void wait(Request& request) override {
    std::unique_ptr<Request::State> state = request.release();
    auto* req = dynamic_cast<LocalRequest*>(state.get());
    if (req == nullptr) internal_error("wait: the request is empty or was posted on another communicator");
    std::lock_guard<std::mutex> lock(mutex_);
    if (req->error.empty() && req->receive && !req->done) {
      withdraw(req);
      fail("recv from rank 0 (tag " + std::to_string(req->tag) + ") on rank 0: no matching send was posted, and "
           "in a world of one rank none can come");
    }
    if (!req->error.empty()) fail(req->error);
  }

  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<LocalComm>(device_, timeout_s_);
  }
  // One process waits for no peer: the timeout is kept only to be read back.
  double timeout_s() const override { return timeout_s_; }
  void set_timeout_s(double seconds) override { timeout_s_ = seconds; }

  void abort(int code) override {
    std::fflush(nullptr);
    std::_Exit(code);
  }

 private:
  struct LocalRequest : Request::State {
    bool receive = false, done = false;
    void* buf = nullptr;
    size_t bytes = 0;
    int tag = 0;
    std::string error;
    std::function<void(LocalRequest*)> on_destroy;
    ~LocalRequest() override {
      if (on_destroy) on_destroy(this);
    }
  };

  // Copies a message into a posted receive (a size mismatch is the receive's error).
  void deliver(LocalRequest& req, const std::vector<std::byte>& message) {
    req.done = true;
    if (message.size() != req.bytes) {
      req.error = "recv from rank 0 (tag " + std::to_string(req.tag) + ") on rank 0: expected " +
                  std::to_string(req.bytes) + " bytes, the message has " + std::to_string(message.size());
      return;
    }
    copy(req.buf, message.data(), message.size());
  }

  void withdraw(LocalRequest* req) {
    auto it = receives_.find(req->tag);
    if (it == receives_.end()) return;
    auto& q = it->second;
    for (auto p = q.begin(); p != q.end(); ++p)
      if (*p == req) {
        q.erase(p);
        return;
      }
  }

  // Copies between buffers of the communicator's device (in place is nothing to do).
  void copy(void* dst, const void* src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
#ifdef GPT_HAVE_CUDA
    if (device_ == Device::CUDA) {
      // Unified addressing tells the runtime where each pointer lives.
      const cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
      if (err != cudaSuccess) fail(std::string("local communicator: cudaMemcpy failed: ") + cudaGetErrorString(err));
      return;
    }
#endif
    std::memmove(dst, src, bytes);
  }

  Device device_;
  double timeout_s_;
  std::mutex mutex_;  // a communication thread may post while the main thread waits
  std::map<int, std::deque<std::vector<std::byte>>> sends_;  // by tag, in order
  std::map<int, std::deque<LocalRequest*>> receives_;       // posted, not yet matched
};

}  // namespace

std::unique_ptr<Communicator> comm_detail::make_local_world(const CommOptions& options) {
  return std::make_unique<LocalComm>(options.device, options.timeout_s);
}

}  // namespace gpt
