// The local backend: a world of exactly one rank, used when the build has no MPI or the
// process was not started by a launcher (and comm=auto). With one rank every collective
// is trivial: the sum over one buffer is that buffer, the one chunk of a reduce-scatter
// or all-gather is the whole of it, a broadcast from rank 0 to rank 0 moves nothing,
// and a send to oneself is a copy. Keeping this a real backend lets every stage run
// unchanged as a single process, with no MPI start-up at all.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/comm.h"
#include "common/comm_internal.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpt {
namespace {

using comm_detail::check_rank;

class LocalComm final : public Communicator {
 public:
  explicit LocalComm(Device device) : device_(device) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "local"; }

  void all_reduce(void*, size_t, DType) override {}

  void reduce_scatter(const void* send, void* recv, size_t count, DType t) override {
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

  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<LocalComm>(device_); }

  void abort(int code) override {
    std::fflush(nullptr);
    std::_Exit(code);
  }

 private:
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
};

}  // namespace

std::unique_ptr<Communicator> comm_detail::make_local_world(const CommOptions& options) {
  return std::make_unique<LocalComm>(options.device);
}

}  // namespace gpt
