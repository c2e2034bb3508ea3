// The device a run computes on, and how `device=auto` picks one.
#pragma once
#include <string>

#include "common/error.h"

namespace gpt {

enum class Device { CPU, CUDA };

inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

// Number of usable CUDA GPUs: 0 when the build has no CUDA or no GPU is present.
int cuda_device_count();

// Whether this build has CUDA kernels for every op (false until they land).
bool cuda_kernels_available();

// Resolves the config's "auto" | "cpu" | "cuda" to a device, or fails with the reason.
Device resolve_device(const std::string& requested);

// Every op without a kernel for the device refuses it, naming the op.
inline void require_cpu(Device d, const char* op) {
  if (d != Device::CPU)
    fail(std::string("device=cuda: op '") + op +
         "' has no CUDA kernel in this build yet (the CUDA kernels land with the "
         "stage-01-on-GPU issue); use device=cpu");
}

}  // namespace gpt
