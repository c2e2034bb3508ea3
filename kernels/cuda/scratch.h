/// @file
/// Scratch device memory for the kernels that need a temporary buffer (partial sums of
/// a deterministic reduction, the sorted tokens of the embedding backward, the naive
/// attention's probabilities). Each user owns one ScratchBuffer, a device buffer that only
/// grows.
///
/// Every op is queued on the default stream, so a reuse is always ordered after the
/// previous user. Growing frees the old buffer, which queued kernels may still read: it
/// synchronises first. No destructor frees it: a static destructor could run after the
/// CUDA runtime has shut down, and the driver reclaims the memory at exit. A program that
/// wants every allocation returned before it ends (a test under compute-sanitizer's leak
/// check) calls release_kernel_memory() (cuda_ops.h), which frees every ScratchBuffer
/// through release_all(). One host thread.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "kernels/cuda/common.cuh"

namespace gpt::cuda {

/// One user's device buffer that only grows (see above); not thread-safe.
class ScratchBuffer {
 public:
  ScratchBuffer() { all().push_back(this); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  /// At least `bytes` bytes of device memory (256-byte aligned, as cudaMalloc's).
  void* bytes(size_t bytes) {
    if (bytes > capacity_) {
      if (ptr_) {
        GPT_CUDA_CHECK(cudaDeviceSynchronize());  // queued work may still use the old one
        GPT_CUDA_CHECK(cudaFree(ptr_));
        ptr_ = nullptr;
        capacity_ = 0;
      }
      GPT_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
      capacity_ = bytes;
    }
    return ptr_;
  }
  /// At least n elements of T.
  template <class T>
  T* as(size_t n) {
    return static_cast<T*>(bytes(n * sizeof(T)));
  }

  /// Frees every ScratchBuffer's memory after the queued work; the next use allocates again.
  static void release_all() {
    GPT_CUDA_CHECK(cudaDeviceSynchronize());
    for (ScratchBuffer* s : all()) {
      if (s->ptr_) GPT_CUDA_CHECK(cudaFree(s->ptr_));
      s->ptr_ = nullptr;
      s->capacity_ = 0;
    }
  }

 private:
  // Every ScratchBuffer of the program (they are namespace-scope objects that live until exit).
  static std::vector<ScratchBuffer*>& all() {
    static std::vector<ScratchBuffer*> buffers;
    return buffers;
  }
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace gpt::cuda
