// The one main of the GPU test programs: Catch2's runner, unless no CUDA device is
// visible, in which case the program prints why and exits 77 (CTest: skipped).
// Catch2's implementation is compiled once, in tests/catch_session.cpp.
#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/cuda_ops.h"
#include "tests/catch_session.h"

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("no CUDA device (%s): skipped\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount reports 0");
    return 77;  // CTest: SKIP_RETURN_CODE
  }
  const int failed = gpt::test::run_catch_session(argc, argv);
  // Every allocation returned, so that compute-sanitizer's leak check reports only real leaks.
  gpt::cuda::release_kernel_memory();
  return failed;
}
