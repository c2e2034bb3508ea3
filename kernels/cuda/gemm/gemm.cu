// The GEMM ladder's front door (gemm.h): names of the versions, what each can take on
// the current device, and gemm(), which checks the arguments once for every version
// and hands them to the chosen one.
//
// Who can take what. v1, v2, v3 and cuBLASLt take every valid call. The tensor-core
// versions move operands in 16-byte pieces (cp.async for v4, TMA for v5), so they need
//   - bf16 inputs (Tin = __nv_bfloat16; their files instantiate nothing else),
//   - A, B, C (and gelu_out and bias, when given) 16-byte aligned,
//   - lda, ldb, ldc multiples of 8 elements (so every row starts 16-byte aligned),
//   - v4: compute capability 8.0 or newer (mma.sync on bf16, cp.async);
//     v5: compute capability 9.x (wgmma and TMA; the sm_90a code runs on 9.0).
// The device's capability is queried once per device and cached.
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm.h"

namespace gpt::cuda {

const char* gemm_version_name(GemmVersion v) {
  switch (v) {
    case GemmVersion::Cublas: return "cublas";
    case GemmVersion::V1: return "v1";
    case GemmVersion::V2: return "v2";
    case GemmVersion::V3: return "v3";
    case GemmVersion::V4: return "v4";
    case GemmVersion::V5: return "v5";
  }
  return "unknown";
}

// ---- the device's compute capability ------------------------------------------------------

namespace {
constexpr int kMaxCachedDevices = 64;
// 10 * major + minor per device; 0 = not asked yet. Lock-free: two threads asking at
// once both query and store the same value.
std::atomic<int> g_capability[kMaxCachedDevices];
}  // namespace

// The current device's compute capability as 10 * major + minor, or -1 if there is no
// usable device. Throws nothing; a failed query's error is cleared so that it does not
// surface later in an unrelated GPT_CUDA_CHECK_LAUNCH (cudaGetLastError).
int current_capability() noexcept {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  if (device < kMaxCachedDevices) {
    const int cached = g_capability[device].load(std::memory_order_relaxed);
    if (cached != 0) return cached;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  const int capability = 10 * major + minor;
  if (device < kMaxCachedDevices) g_capability[device].store(capability, std::memory_order_relaxed);
  return capability;
}

namespace {

// Why the tensor-core version v (V4 or V5) cannot take args here, or "" if it can.
template <class Tin, class Tout>
std::string tensor_core_refusal(GemmVersion v, const GemmArgs<Tin, Tout>& a) {
  if (!std::is_same_v<Tin, __nv_bfloat16>) return "it takes bf16 inputs only";
  const int cc = current_capability();
  if (v == GemmVersion::V4 && cc < 80) return "it needs compute capability 8.0 or newer (this device: " + std::to_string(cc) + ")";
  if (v == GemmVersion::V5 && cc / 10 != 9) return "it needs compute capability 9.x (this device: " + std::to_string(cc) + ")";
  // A wider C is v3's, as gemm_v4 itself would refuse it.
  if (v == GemmVersion::V4 && a.N > kGemmV4MaxN)
    return "N = " + std::to_string(a.N) + " is wider than v4's grid holds (" + std::to_string(kGemmV4MaxN) + ")";
#ifndef GPT_HAVE_SM90A
  // Built without sm_90a (e.g. CMAKE_CUDA_ARCHITECTURES=90): the kernel body is a trap.
  if (v == GemmVersion::V5) return "this build has no sm_90a code (add 90a to CMAKE_CUDA_ARCHITECTURES)";
#endif
  if (!aligned16(a.A) || !aligned16(a.B) || !aligned16(a.C)) return "A, B and C must be 16-byte aligned";
  if (a.gelu_out && !aligned16(a.gelu_out)) return "gelu_out must be 16-byte aligned";
  if (a.bias && !aligned16(a.bias)) return "bias must be 16-byte aligned";
  if (a.lda % 8 || a.ldb % 8 || a.ldc % 8)
    return "lda, ldb and ldc must be multiples of 8 (got " + std::to_string(a.lda) + ", " + std::to_string(a.ldb) +
           ", " + std::to_string(a.ldc) + ")";
  return "";
}

[[noreturn]] void invalid(const std::string& what) { throw std::invalid_argument("gemm: " + what); }

// Shapes, strides, pointers and flags: everything no version can take.
template <class Tin, class Tout>
void validate(const GemmArgs<Tin, Tout>& a) {
  if (a.M < 1) invalid("M = " + std::to_string(a.M) + " must be at least 1");
  if (a.N < 1) invalid("N = " + std::to_string(a.N) + " must be at least 1");
  if (a.K < 1) invalid("K = " + std::to_string(a.K) + " must be at least 1");
  if (!a.A) invalid("A is null");
  if (!a.B) invalid("B is null");
  if (!a.C) invalid("C is null");
  // ld is the stride between stored rows, so it is at least a stored row's length.
  const int a_row = a.trans_a ? a.M : a.K, b_row = a.trans_b ? a.K : a.N;
  if (a.lda < a_row)
    invalid("lda = " + std::to_string(a.lda) + " is less than the length of A's stored rows, " +
            std::to_string(a_row) + (a.trans_a ? " (M: A is stored K x M)" : " (K: A is stored M x K)"));
  if (a.ldb < b_row)
    invalid("ldb = " + std::to_string(a.ldb) + " is less than the length of B's stored rows, " +
            std::to_string(b_row) + (a.trans_b ? " (K: B is stored N x K)" : " (N: B is stored K x N)"));
  if (a.ldc < a.N)
    invalid("ldc = " + std::to_string(a.ldc) + " is less than N = " + std::to_string(a.N) + " (C is M x N)");
  if (a.gelu_out && a.accumulate)
    invalid("gelu_out with accumulate: GELU needs the whole pre-activation, which accumulation spreads over calls");
}

}  // namespace

template <class Tin, class Tout>
bool gemm_version_supports(GemmVersion v, const GemmArgs<Tin, Tout>& args) {
  switch (v) {
    case GemmVersion::Cublas:
    case GemmVersion::V1:
    case GemmVersion::V2:
    case GemmVersion::V3: return true;
    case GemmVersion::V4:
    case GemmVersion::V5: return tensor_core_refusal(v, args).empty();
  }
  return false;
}

template <class Tin, class Tout>
void gemm(GemmVersion v, const GemmArgs<Tin, Tout>& args, cudaStream_t stream) {
  validate(args);
  switch (v) {
    case GemmVersion::Cublas: return gemm_cublas(args, stream);
    case GemmVersion::V1: return gemm_v1(args, stream);
    case GemmVersion::V2: return gemm_v2(args, stream);
    case GemmVersion::V3: return gemm_v3(args, stream);
    case GemmVersion::V4:
    case GemmVersion::V5: break;
    default: invalid("unknown version " + std::to_string(int(v)));
  }
  const std::string refusal = tensor_core_refusal(v, args);
  if (!refusal.empty()) invalid(std::string("version ") + gemm_version_name(v) + " cannot take this call: " + refusal);
  // v4 and v5 exist for bf16 inputs only (their files instantiate no others): the
  // float instantiation of this function must not name them, or it would not link.
  if constexpr (std::is_same_v<Tin, __nv_bfloat16>) {
    if (v == GemmVersion::V4) return gemm_v4(args, stream);
    return gemm_v5(args, stream);
  }
}

template bool gemm_version_supports<float, float>(GemmVersion, const GemmArgs<float, float>&);
template bool gemm_version_supports<__nv_bfloat16, __nv_bfloat16>(GemmVersion,
                                                                  const GemmArgs<__nv_bfloat16, __nv_bfloat16>&);
template bool gemm_version_supports<__nv_bfloat16, float>(GemmVersion, const GemmArgs<__nv_bfloat16, float>&);

template void gemm<float, float>(GemmVersion, const GemmArgs<float, float>&, cudaStream_t);
template void gemm<__nv_bfloat16, __nv_bfloat16>(GemmVersion, const GemmArgs<__nv_bfloat16, __nv_bfloat16>&,
                                                 cudaStream_t);
template void gemm<__nv_bfloat16, float>(GemmVersion, const GemmArgs<__nv_bfloat16, float>&, cudaStream_t);

}  // namespace gpt::cuda
