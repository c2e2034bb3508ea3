/// @file
/// Scratch device memory for the kernels that need a temporary buffer (partial sums of
/// a deterministic reduction, the sorted tokens of the embedding backward, the naive
/// attention's probabilities). Each user owns one ScratchBuffer, a device buffer that only
/// grows.
///
/// Every op is queued on the default stream, so a reuse is always ordered after the
/// previous user. Growing frees the old buffer, which queued kernels may still read, in
/// stream order on that stream (cudaFreeAsync, cudaMallocAsync, as common/device_array.cpp
/// allocates): a cudaFree, or a cudaDeviceSynchronize before it, would wait for every
/// stream, a collective of another thread that waits for a peer included, which may be
/// waiting for this thread. No destructor frees it: a static destructor could run after the
/// CUDA runtime has shut down, and the driver reclaims the memory at exit. A program that
/// wants every allocation returned before it ends (a test under compute-sanitizer's leak
/// check) calls release_kernel_memory() (cuda_ops.h), which frees every ScratchBuffer
/// through release_all(). One host thread.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/common.cuh"

namespace gpt::cuda {

/// One user's device buffer that only grows (see above); not thread-safe.
class ScratchBuffer {
 public:
  ScratchBuffer() { all().push_back(this); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  /// At least `bytes` bytes of device memory, 256-byte aligned. The kernels' vector loads
  /// and stores need 16 bytes; cudaMalloc promises 256, but a pool's allocation
  /// (cudaMallocAsync) is documented with no alignment, so the buffer is rounded up here.
  void* bytes(size_t bytes) {
    if (bytes > capacity_) {
      if (raw_) {
        GPT_CUDA_CHECK(cudaFreeAsync(raw_, cudaStreamLegacy));  // after the queued work that uses it
        raw_ = nullptr;
        capacity_ = 0;
      }
      GPT_CUDA_CHECK(cudaMallocAsync(&raw_, bytes + kAlign - 1, cudaStreamLegacy));
      capacity_ = bytes;
    }
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw_) + kAlign - 1) / kAlign * kAlign);
  }
  /// At least n elements of T.
  template <class T>
  T* as(size_t n) {
    return static_cast<T*>(bytes(n * sizeof(T)));
  }

  /// Frees every ScratchBuffer's memory after the queued work; the next use allocates again.
  static void release_all() {
    for (ScratchBuffer* s : all()) {
      if (s->raw_) GPT_CUDA_CHECK(cudaFreeAsync(s->raw_, cudaStreamLegacy));
      s->raw_ = nullptr;
      s->capacity_ = 0;
    }
    GPT_CUDA_CHECK(cudaDeviceSynchronize());  // returned before the caller goes on
  }

 private:
  // Every ScratchBuffer of the program (they are namespace-scope objects that live until exit).
  static std::vector<ScratchBuffer*>& all() {
    static std::vector<ScratchBuffer*> buffers;
    return buffers;
  }
  static constexpr uintptr_t kAlign = 256;
  void* raw_ = nullptr;    // as allocated; bytes() hands out its first 256-byte boundary
  size_t capacity_ = 0;    // the bytes usable from that boundary
};

}  // namespace gpt::cuda
