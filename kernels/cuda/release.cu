// release_kernel_memory(): the device memory the ops keep between calls, given back.
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/scratch.h"

namespace gpt::cuda {

void release_kernel_memory() {
  ScratchBuffer::release_all();
  release_cublas();
}

}  // namespace gpt::cuda
