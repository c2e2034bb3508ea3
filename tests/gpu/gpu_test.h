// What every GPU test program shares: CUDA error checks, the host-side conversions
// between float and the two bf16 types, and a device buffer filled from floats. Their
// main() is gpu_main.cpp's (the library gpt_gpu_catch_main): Catch2's runner, or
// "skipped" (exit 77) on a machine without a CUDA device.
//
// bf16 rounding on the host is the CPU reference's own (kernels/cpu/bf16.h, to nearest
// even), so inputs rounded here are bit for bit what the reference sees. Two bf16 types
// carry the same 16 bits: the kernels' __nv_bfloat16 and the ops API's gpt::bf16.
#pragma once
#include <catch2/catch.hpp>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bf16.h"
#include "common/device_array.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::gpu_test {

inline void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// x stored as element type E (float, __nv_bfloat16 or gpt::bf16; bf16 rounds to nearest even).
template <class E>
E to_elem(float x);
template <>
inline float to_elem<float>(float x) {
  return x;
}
template <>
inline __nv_bfloat16 to_elem<__nv_bfloat16>(float x) {
  __nv_bfloat16_raw raw;
  raw.x = gpt::cpu::bf16_bits(x);
  return __nv_bfloat16(raw);
}
template <>
inline gpt::bf16 to_elem<gpt::bf16>(float x) {
  return gpt::bf16{gpt::cpu::bf16_bits(x)};
}
inline float to_float(float x) { return x; }
inline float to_float(__nv_bfloat16 x) { return gpt::cpu::bf16_to_float(__nv_bfloat16_raw(x).x); }
inline float to_float(gpt::bf16 x) { return gpt::cpu::bf16_to_float(x.bits); }

// n elements of E in GPU memory (gpt::DeviceArray: zero-filled, freed on scope exit),
// moved to and from the host as floats, rounded to E on the way in. At least one element
// is allocated, so p is never null: a test passes null on purpose, not by accident.
template <class E>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t count) : array(gpt::Device::CUDA, count > 0 ? count : 1), p(array.data()), n(count) {}
  void upload(const std::vector<float>& host) {
    if (host.size() != n) throw std::logic_error("upload: size mismatch");
    std::vector<E> tmp(n);
    for (size_t i = 0; i < n; ++i) tmp[i] = to_elem<E>(host[i]);
    array.copy_from_host(tmp.data(), n);
  }
  std::vector<float> download() const {
    std::vector<E> tmp(n);
    array.copy_to_host(tmp.data(), n);
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = to_float(tmp[i]);
    return host;
  }
  gpt::DeviceArray<E> array;
  E* p;
  size_t n;
};

}  // namespace gpt::gpu_test
