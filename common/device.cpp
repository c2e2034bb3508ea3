// Device detection and the choice behind `device=auto`.
#include "common/device.h"

#include "common/precision.h"

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

int current_gpu() {
#ifdef GPT_HAVE_CUDA
  int dev = -1;
  if (cuda_device_count() == 0 || cudaGetDevice(&dev) != cudaSuccess) return -1;
  return dev;
#else
  return -1;
#endif
}

void use_gpu(int gpu) {
  if (gpu < 0) return;
#ifdef GPT_HAVE_CUDA
  const cudaError_t err = cudaSetDevice(gpu);
  if (err != cudaSuccess) fail("cudaSetDevice(" + std::to_string(gpu) + ") failed: " + cudaGetErrorString(err));
#endif
}

Device resolve_device(const std::string& requested) {
  if (requested == "cpu") return Device::CPU;
  if (requested == "auto")
    return cuda_device_count() > 0 ? Device::CUDA : Device::CPU;
  if (requested != "cuda") fail("device: '" + requested + "' is not a device (auto, cpu or cuda)");
#ifndef GPT_HAVE_CUDA
  fail("device=cuda: this build has no CUDA (configure with a CUDA toolkit and GPT_CUDA=AUTO or ON)");
#endif
  if (cuda_device_count() == 0) fail("device=cuda: no CUDA GPU is visible on this machine");
  return Device::CUDA;
}

std::string device_description(Device d) {
  if (d == Device::CPU) return "cpu";
#ifdef GPT_HAVE_CUDA
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    return std::string("cuda (") + prop.name + ", sm_" + std::to_string(prop.major) +
           std::to_string(prop.minor) + ")";
#endif
  return "cuda";
}

std::array<unsigned char, 16> device_uuid(Device d) {
  std::array<unsigned char, 16> uuid{};
#ifdef GPT_HAVE_CUDA
  int dev = 0;
  cudaDeviceProp prop{};
  if (d == Device::CUDA && cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    for (size_t i = 0; i < uuid.size(); ++i) uuid[i] = static_cast<unsigned char>(prop.uuid.bytes[i]);
#else
  (void)d;
#endif
  return uuid;
}

std::optional<double> device_peak_flops(Device d, Precision p) {
  if (d == Device::CPU) return std::nullopt;
#ifdef GPT_HAVE_CUDA
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
    return std::nullopt;
  const std::string name = prop.name;
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  // Dense (no sparsity) peaks from NVIDIA's datasheets, in TFLOP/s: {bf16 tensor, fp32}.
  struct Peak {
    double bf16, fp32;
  };
  std::optional<Peak> peak;
  if (has("H100") || has("H200") || has("H800"))  // GH200's name contains "H200"
    peak = has("PCIe") ? Peak{756, 51} : has("NVL") ? Peak{835, 60} : Peak{989, 67};  // PCIe, NVL, SXM
  else if (has("A100"))
    peak = Peak{312, 19.5};
  else if (has("L40S"))
    peak = Peak{362, 91.6};
  if (!peak) return std::nullopt;
  return (p == Precision::BF16 ? peak->bf16 : peak->fp32) * 1e12;
#else
  (void)p;
  return std::nullopt;
#endif
}

}  // namespace gpt
