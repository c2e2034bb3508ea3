// The one main of the GPU test programs: Catch2's runner, unless no CUDA device is
// visible, in which case the program prints why and exits 77 (CTest: skipped).
// Compiled once into gpt_gpu_catch_main, so that Catch2's implementation is not
// compiled again in every test program.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/cuda_ops.h"

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("no CUDA device (%s): skipped\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount reports 0");
    return 77;  // CTest: SKIP_RETURN_CODE
  }
  const int failed = Catch::Session().run(argc, argv);
  // Every allocation returned, so that compute-sanitizer's leak check reports only real leaks.
  gpt::cuda::release_kernel_memory();
  return failed;
}
