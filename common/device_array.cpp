// Device memory: host memory through new/delete-like calls, GPU memory through the
// CUDA runtime (only in builds with GPT_HAVE_CUDA).
#include "common/device_array.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "common/host_memory.h"
#include "common/memory.h"
#include "kernels/cpu/cpu_ops.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpt {
namespace {

#ifdef GPT_HAVE_CUDA
void cuda_ok(cudaError_t err, const char* what, size_t bytes) {
  if (err != cudaSuccess)
    fail(std::string(what) + " of " + std::to_string(bytes) + " bytes failed: " +
         cudaGetErrorString(err));
}
cudaMemcpyKind copy_kind(Device to, Device from) {
  if (to == Device::CUDA) return from == Device::CUDA ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  return from == Device::CUDA ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}
#endif

#ifndef GPT_HAVE_CUDA
void no_cuda() { fail("device=cuda: this build has no CUDA"); }
#endif

// An allocation of `bytes` on `memory` ("host", "GPU") refused: how much, for what kind,
// why (`why` follows the kind), what this process holds by kind, and what to change.
[[noreturn]] void out_of_memory(const std::string& memory, size_t bytes, const std::string& why,
                                const std::string& spread_over) {
  fail("out of " + memory + " memory: allocating " + format_bytes(double(bytes)) + " more for " +
       kMemKindNames[size_t(MemScope::current())] + why + "; this process holds " +
       MemoryTracker::global().held_now() +
       ". Shrink the run (micro_batch_size, seq_len, n_layer, n_embd), recompute activations "
       "(activation_checkpointing, stage 11), or spread it over more " + spread_over);
}

}  // namespace

void* device_alloc(Device d, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (d == Device::CPU) {
    check_host_allocation(bytes);  // a clear error, not the kernel's killer, when the machine is full
    // 64-byte alignment: whole cache lines, and the AVX-512 GEMM's aligned loads.
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    // Refused with room to spare by the check above's measure: a limit on the address
    // space (ulimit -v), or memory the check could not see.
    if (!p) out_of_memory("host", bytes, " was refused (a limit such as ulimit -v?)", "ranks");
    std::memset(p, 0, bytes);
    return p;
  }
#ifdef GPT_HAVE_CUDA
  // Stream-ordered (on the legacy default stream, where the kernels run): unlike
  // cudaMalloc and cudaFree, neither waits for the whole device. A free that waited for
  // every stream would wait for a collective of another thread that waits for a peer,
  // which may be waiting for this thread: a hang across ranks.
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, bytes, cudaStreamLegacy);
  if (err == cudaErrorMemoryAllocation) {
    // As the host's check says it (host_memory.h): what was asked for, what is left, what
    // this process holds by kind, and what to change.
    size_t free_bytes = 0, total_bytes = 0;
    cudaGetLastError();  // clear it, so that the query below can answer
    const bool known = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
    if (!known) cudaGetLastError();  // nor may its failure linger for the next launch's check
    out_of_memory("GPU", bytes,
                  ", but " + (known ? format_bytes(double(free_bytes)) + " of the GPU's " +
                                          format_bytes(double(total_bytes)) +
                                          " is free (other processes, ranks sharing the GPU included)"
                                    : std::string("the GPU has no more")),
                  "GPUs");
  }
  cuda_ok(err, "cudaMallocAsync", bytes);
  cuda_ok(cudaMemsetAsync(p, 0, bytes, cudaStreamLegacy), "cudaMemsetAsync", bytes);
  return p;
#else
  no_cuda();
  return nullptr;
#endif
}

void device_free(Device d, void* p) {
  if (!p) return;
  if (d == Device::CPU) return std::free(p);
#ifdef GPT_HAVE_CUDA
  cudaFreeAsync(p, cudaStreamLegacy);  // in a destructor: an error here cannot be reported usefully
#endif
}

void device_zero(Device d, void* p, size_t bytes) {
  if (bytes == 0) return;
  if (d == Device::CPU) return cpu::zero_bytes(p, bytes);  // on the OpenMP threads
#ifdef GPT_HAVE_CUDA
  cuda_ok(cudaMemsetAsync(p, 0, bytes), "cudaMemsetAsync", bytes);
#else
  no_cuda();
#endif
}

void device_synchronize(Device d) {
  if (d == Device::CPU) return;
#ifdef GPT_HAVE_CUDA
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) fail(std::string("a GPU kernel failed: ") + cudaGetErrorString(err));
#else
  no_cuda();
#endif
}

void device_copy(Device to, void* dst, Device from, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (to == Device::CPU && from == Device::CPU) return void(std::memmove(dst, src, bytes));
#ifdef GPT_HAVE_CUDA
  cuda_ok(cudaMemcpy(dst, src, bytes, copy_kind(to, from)), "cudaMemcpy", bytes);
#else
  no_cuda();
#endif
}

void device_copy_2d(Device d, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                    size_t rows) {
  if (row_bytes == 0 || rows == 0) return;
  if (d == Device::CPU) {
    for (size_t r = 0; r < rows; ++r)
      std::memmove(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
    return;
  }
#ifdef GPT_HAVE_CUDA
  cuda_ok(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice), "cudaMemcpy2D",
          row_bytes * rows);
#else
  no_cuda();
#endif
}

}  // namespace gpt
