// Device detection and the choice behind `device=auto`.
#include "common/device.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpt {

int cuda_device_count() {
#ifdef GPT_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;  // no driver or no GPU
  return count;
#else
  return 0;
#endif
}

bool cuda_kernels_available() { return false; }  // true once kernels/cuda/ lands

Device resolve_device(const std::string& requested) {
  if (requested == "cpu") return Device::CPU;
  if (requested == "auto")
    return cuda_device_count() > 0 && cuda_kernels_available() ? Device::CUDA : Device::CPU;
  if (requested != "cuda") fail("device: '" + requested + "' is not a device (auto, cpu or cuda)");
#ifndef GPT_HAVE_CUDA
  fail("device=cuda: this build has no CUDA (configure with a CUDA toolkit and GPT_CUDA=AUTO or ON)");
#endif
  if (cuda_device_count() == 0) fail("device=cuda: no CUDA GPU is visible on this machine");
  if (!cuda_kernels_available())
    fail("device=cuda: the CUDA kernels of stage 01 are not implemented yet; use device=cpu");
  return Device::CUDA;
}

}  // namespace gpt
