/// @file
/// The device a run computes on, and how `device=auto` picks one.
#pragma once
#include <array>
#include <optional>
#include <string>

#include "common/error.h"

namespace gpt {

/// Where a run computes: CPU runs the kernels of kernels/cpu/ on host memory; CUDA runs
/// those of kernels/cuda/ on the thread's current GPU (current_gpu()).
enum class Device { CPU, CUDA };

/// "cpu" or "cuda", as the config's `device` key spells it.
inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

/// Number of usable CUDA GPUs: 0 when the build has no CUDA or no GPU is present.
int cuda_device_count();

/// The GPU this host thread computes on (CUDA's current device is per host thread), or
/// -1 without CUDA. A thread that works for a rank (stage 02's communication thread,
/// ZeRO-3's prefetch) is started by the rank's main thread and must first call
/// use_gpu(the main thread's current_gpu()): otherwise its copies and kernels go to GPU 0.
int current_gpu();
/// Makes `gpu` this thread's current device (-1: nothing to do).
void use_gpu(int gpu);

/// Resolves the config's "auto" | "cpu" | "cuda" to a device, or fails with the reason.
/// auto picks the GPU when this build has CUDA and a GPU is visible.
Device resolve_device(const std::string& requested);

/// "cpu", or "cuda (NVIDIA H100 80GB HBM3, sm_90)" for the current GPU.
std::string device_description(Device d);

// Defined in common/precision.h.
enum class Precision;
/// The dense peak rate of the current GPU for the precision's matmuls (bf16 tensor
/// cores; fp32 without tensor cores), in FLOP/s, from its datasheet; empty for the CPU
/// and for GPUs not in the table (then no MFU is reported).
std::optional<double> device_peak_flops(Device d, Precision p);

/// The current GPU's UUID (unique across machines: ranks sharing a GPU report the same),
/// all zeros for the CPU or when CUDA cannot say.
std::array<unsigned char, 16> device_uuid(Device d);

}  // namespace gpt
