// GEMM through cuBLASLt: the baseline every hand-written version is measured against.
//
// Row-major onto column-major. cuBLAS reads matrices column-major; a row-major R x C
// matrix with row stride ld is, byte for byte, the column-major C x R matrix (its
// transpose) with leading dimension ld. So instead of C = op(A) op(B) (row-major M x N)
// we ask cuBLAS for its transpose, column-major N x M:
//
//   C^T = op(B)^T . op(A)^T        cuBLAS "A" := our B, cuBLAS "B" := our A,
//                                  cuBLAS (m, n, k) := (N, M, K)
//
// Our B stored row-major is, column-major, B^T: when !trans_b that is op(B)^T already
// (no transpose: stored as rows N, cols K, ld ldb); when trans_b we need B itself, a
// transpose of what cuBLAS sees (CUBLAS_OP_T; stored as rows K, cols N). Likewise our
// A. C and D are column-major N x M with ld ldc, which is C row-major: nothing moves.
//
// Precision. Compute type CUBLAS_COMPUTE_32F for every type combination: fp32
// products summed in fp32, with NO TF32 (CUBLAS_COMPUTE_32F_FAST_TF32 would round the
// fp32 inputs to 10-bit mantissas on tensor cores), so the fp32 baseline is an exact-
// fp32 GEMM like the hand versions; bf16 inputs run on tensor cores with fp32 sums.
//
// Epilogue. The bias (one value per column n, i.e. per row of cuBLAS's D: what
// CUBLASLT_EPILOGUE_BIAS broadcasts) and GELU are fused when cuBLASLt can:
//   bias:         CUBLASLT_EPILOGUE_BIAS
//   bias + gelu:  CUBLASLT_EPILOGUE_GELU_AUX_BIAS: D = gelu(AB + bias) is our gelu_out,
//                 the "aux" output (the GELU input) is our C
//   gelu alone:   CUBLASLT_EPILOGUE_GELU_AUX
// and accumulate is beta = 1 with C and D the same buffer. What is not fused:
//   - a bias when Tin != Tout: cuBLASLt's bias vector has D's element type, and ours
//     has Tin's (bf16 -> float, a bf16 bias into fp32 outputs; training never asks for
//     it: dW has no bias);
//   - GELU into fp32 outputs: cuBLASLt's GELU is not an exact-fp32 function (its tanh
//     is approximate, about 2^-11 relative), which would make the fp32 baseline less
//     accurate than the hand versions; into bf16 outputs that error is below bf16's own
//     rounding (2^-8), and the fusion is what a bf16 trainer would use;
//   - GELU when ldc % 8 != 0: the GELU aux matrix needs a leading dimension divisible
//     by 8 (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD);
//   - any combination the library has no kernel for (its heuristic returns none).
// Those take the next plan, in this order: everything fused; bias fused and GELU by
// the small kernel below; the plain product and bias + GELU by the kernel. The kernel
// reads the stored C, so for bf16 outputs its GELU sees the pre-activation rounded to
// bf16 (one more rounding, inside the tests' tolerance).
//
// Split K. For a long K cuBLASLt may split the sum across blocks and add the parts in a
// second pass. Left to itself it may keep those parts in the output type: for bf16
// outputs, sums rounded to 8 bits before they are added (seen on an H200: errors of
// several bf16 roundings at K = 65..768). The preference below allows only a single pass
// or parts kept in the compute type (fp32), so every output is one rounding of an fp32 sum.
//
// The library is opened when first used, not linked (cublaslt_library.h): cublaslt()
// is its table of functions. One cuBLASLt handle and a 32 MiB workspace per device,
// created on first use and kept until release_cublas() (cuda_ops.h's
// release_kernel_memory; destroying them in a static destructor could race the CUDA
// runtime's own teardown). The heuristic's choice
// is cached per problem (shape, strides, types, alignments, epilogue): the heuristic
// query costs tens of microseconds, comparable to a small GEMM, and would otherwise be
// in every measurement.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/cublaslt_library.h"
#include "kernels/cuda/gemm/gemm.h"

namespace gpt::cuda {
namespace {

// ---- errors ----------------------------------------------------------------------------

void cublas_check(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                             cublaslt().cublasLtGetStatusName(status) + " (" +
                             cublaslt().cublasLtGetStatusString(status) + ")");
}
#define GPT_CUBLAS_CHECK(call) cublas_check((call), #call, __FILE__, __LINE__)

// ---- per-device handle and workspace -------------------------------------------------------

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // what NVIDIA suggests for Hopper

struct DeviceContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

std::mutex g_mutex;  // guards the contexts and the plan cache

std::vector<DeviceContext>& contexts() {
  static std::vector<DeviceContext> per_device;
  return per_device;
}

// The current device's handle and workspace, created on first use.
DeviceContext device_context(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<DeviceContext>& all = contexts();
  if (all.size() <= size_t(device)) all.resize(size_t(device) + 1);
  DeviceContext& ctx = all[size_t(device)];
  if (!ctx.handle) {
    GPT_CUDA_CHECK(cudaMalloc(&ctx.workspace, kWorkspaceBytes));
    GPT_CUBLAS_CHECK(cublaslt().cublasLtCreate(&ctx.handle));
  }
  return ctx;
}

// ---- descriptors, released on scope exit --------------------------------------------------

struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  MatmulDesc() { GPT_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~MatmulDesc() { cublaslt().cublasLtMatmulDescDestroy(desc); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <class V>
  void set(cublasLtMatmulDescAttributes_t attribute, const V& value) {
    GPT_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
  }
};

struct Layout {  // a column-major rows x cols matrix with leading dimension ld
  cublasLtMatrixLayout_t layout = nullptr;
  Layout(cudaDataType_t type, int rows, int cols, int ld) {
    GPT_CUBLAS_CHECK(
        cublaslt().cublasLtMatrixLayoutCreate(&layout, type, uint64_t(rows), uint64_t(cols), int64_t(ld)));
  }
  ~Layout() { cublaslt().cublasLtMatrixLayoutDestroy(layout); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() { GPT_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceCreate(&pref)); }
  ~Preference() { cublaslt().cublasLtMatmulPreferenceDestroy(pref); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <class V>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const V& value) {
    GPT_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)));
  }
};

template <class T>
constexpr cudaDataType_t data_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// The largest power of two (up to 256, cuBLASLt's default assumption) dividing the
// address: algorithms needing more alignment than a buffer has are excluded.
uint32_t alignment_of(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && address % (2 * a) == 0) a *= 2;
  return a;
}

// ---- the plans -----------------------------------------------------------------------------

// What cuBLASLt computes in one call; whatever the args ask beyond it, the epilogue
// kernel finishes.
enum class Plan : int { Fused = 0, BiasOnly = 1, Plain = 2 };

// One product to set up: the descriptors for args with `plan`'s epilogue.
template <class Tin, class Tout>
struct Problem {
  const GemmArgs<Tin, Tout>& a;
  Plan plan;
  MatmulDesc desc;
  // cuBLAS's A is our B, its B is our A (see the top); D and C are our output.
  Layout b_layout, a_layout, d_layout;
  bool fused_bias = false, fused_gelu = false;

  Problem(const GemmArgs<Tin, Tout>& args, Plan p)
      : a(args),
        plan(p),
        b_layout(data_type<Tin>(), args.trans_b ? args.K : args.N, args.trans_b ? args.N : args.K, args.ldb),
        a_layout(data_type<Tin>(), args.trans_a ? args.M : args.K, args.trans_a ? args.K : args.M, args.lda),
        d_layout(data_type<Tout>(), args.N, args.M, args.ldc) {
    const cublasOperation_t op_b = args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_b);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_a);
    fused_bias = args.bias && plan != Plan::Plain;
    fused_gelu = args.gelu_out && plan == Plan::Fused;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (fused_gelu) epilogue = fused_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    else if (fused_bias) epilogue = CUBLASLT_EPILOGUE_BIAS;
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    if (fused_bias) {
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(args.bias));
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(data_type<Tin>()));
    }
    if (fused_gelu) {  // the GELU input (pre-activation) goes to C, GELU's output to D
      desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(args.C));
      desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(args.ldc));
    }
  }

  // Where cuBLAS writes D: gelu_out when it applies the GELU, C otherwise.
  Tout* d() const { return fused_gelu ? a.gelu_out : a.C; }

  // Whether cuBLASLt can do this plan at all (fixed limits, before asking it).
  static bool possible(const GemmArgs<Tin, Tout>& args, Plan p) {
    constexpr bool bias_type_ok = std::is_same_v<Tin, Tout>;       // bias has D's type
    constexpr bool gelu_type_ok = std::is_same_v<Tout, __nv_bfloat16>;  // see the top
    switch (p) {
      case Plan::Fused:  // everything asked for, in one call
        return (!args.bias || bias_type_ok) && (!args.gelu_out || (gelu_type_ok && args.ldc % 8 == 0)) &&
               (args.bias || args.gelu_out);
      case Plan::BiasOnly:  // bias fused; only worth it when a GELU is left for the kernel
        return args.bias && bias_type_ok && args.gelu_out;
      case Plan::Plain:
        return true;
    }
    return false;
  }

  // Asks the heuristic for the best algorithm; false if it has none.
  bool choose(cublasLtHandle_t handle, cublasLtMatmulAlgo_t& algo) {
    Preference pref;
    pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kWorkspaceBytes));
    // No split-K parts in the output type (see the top of the file).
    pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(a.B));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(a.A));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(d()));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(d()));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublaslt().cublasLtMatmulAlgoGetHeuristic(
        handle, desc.desc, b_layout.layout, a_layout.layout, d_layout.layout, d_layout.layout, pref.pref, 1, &result,
        &found);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return false;
    GPT_CUBLAS_CHECK(status);
    algo = result.algo;
    return true;
  }

  void run(const DeviceContext& ctx, const cublasLtMatmulAlgo_t& algo, cudaStream_t stream) {
    const float alpha = 1.0f, beta = a.accumulate ? 1.0f : 0.0f;  // beta = 1: C += product
    GPT_CUBLAS_CHECK(cublaslt().cublasLtMatmul(ctx.handle, desc.desc, &alpha, a.B, b_layout.layout, a.A,
                                               a_layout.layout, &beta, d(), d_layout.layout, d(), d_layout.layout,
                                               &algo, ctx.workspace, kWorkspaceBytes, stream));
  }
};

// ---- the plan cache -------------------------------------------------------------------------

// Everything the heuristic's answer depends on.
using PlanKey = std::vector<int64_t>;

template <class Tin, class Tout>
PlanKey plan_key(int device, const GemmArgs<Tin, Tout>& a) {
  return {device,
          int64_t(data_type<Tin>()),
          int64_t(data_type<Tout>()),
          a.trans_a,
          a.trans_b,
          a.M,
          a.N,
          a.K,
          a.lda,
          a.ldb,
          a.ldc,
          a.accumulate,
          a.bias != nullptr,
          a.gelu_out != nullptr,
          alignment_of(a.A),
          alignment_of(a.B),
          alignment_of(a.C),
          alignment_of(a.gelu_out),
          alignment_of(a.bias)};
}

struct Chosen {
  Plan plan;
  cublasLtMatmulAlgo_t algo;
};

std::map<PlanKey, Chosen>& plan_cache() {
  static std::map<PlanKey, Chosen> cache;
  return cache;
}

// ---- the fallback epilogue ----------------------------------------------------------------

// C[m,n] += bias[n] (when add_bias) and gelu_out[m,n] = gelu(C[m,n]) (when gelu_out):
// what cuBLASLt did not fuse. One thread per element, grid-stride.
template <class Tin, class Tout>
__global__ void bias_gelu_kernel(Tout* C, Tout* gelu_out, const Tin* bias, int M, int N, int ldc) {
  const int64_t total = int64_t(M) * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int m = int(i / N), n = int(i % N);
    const int64_t at = int64_t(m) * ldc + n;
    float v = to_float(C[at]);
    if (bias) {
      v += to_float(bias[n]);
      C[at] = from_float<Tout>(v);
    }
    if (gelu_out) gelu_out[at] = from_float<Tout>(gelu(v));
  }
}

template <class Tin, class Tout>
void finish_epilogue(const GemmArgs<Tin, Tout>& a, bool add_bias, bool add_gelu, cudaStream_t stream) {
  if (!add_bias && !add_gelu) return;
  constexpr int kThreads = 256;
  const unsigned blocks = ceil_div(std::min<int64_t>(int64_t(a.M) * a.N, int64_t(kThreads) << 16), kThreads);
  bias_gelu_kernel<Tin, Tout><<<blocks, kThreads, 0, stream>>>(a.C, add_gelu ? a.gelu_out : nullptr,
                                                               add_bias ? a.bias : nullptr, a.M, a.N, a.ldc);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void release_cublas() {
  GPT_CUDA_CHECK(cudaDeviceSynchronize());  // queued products may still use a workspace
  std::lock_guard<std::mutex> lock(g_mutex);
  for (DeviceContext& ctx : contexts()) {
    if (ctx.handle) GPT_CUBLAS_CHECK(cublaslt().cublasLtDestroy(ctx.handle));
    if (ctx.workspace) GPT_CUDA_CHECK(cudaFree(ctx.workspace));
    ctx = DeviceContext{};
  }
  plan_cache().clear();  // the plans were chosen for those handles
}

// The arguments were validated by gemm() (gemm.cu).
template <class Tin, class Tout>
void gemm_cublas(const GemmArgs<Tin, Tout>& args, cudaStream_t stream) {
  int device = 0;
  GPT_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceContext ctx = device_context(device);
  const PlanKey key = plan_key(device, args);

  Chosen chosen{};
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const auto it = plan_cache().find(key);
    if (it != plan_cache().end()) chosen = it->second, cached = true;
  }
  if (!cached) {  // the first plan, in order, that cuBLASLt has an algorithm for
    bool found = false;
    for (Plan p : {Plan::Fused, Plan::BiasOnly, Plan::Plain}) {
      if (!Problem<Tin, Tout>::possible(args, p)) continue;
      Problem<Tin, Tout> problem(args, p);
      if (problem.choose(ctx.handle, chosen.algo)) {
        chosen.plan = p;
        found = true;
        break;
      }
    }
    if (!found)
      throw std::runtime_error("gemm_cublas: cuBLASLt has no algorithm for M=" + std::to_string(args.M) +
                               " N=" + std::to_string(args.N) + " K=" + std::to_string(args.K));
    std::lock_guard<std::mutex> lock(g_mutex);
    plan_cache()[key] = chosen;
  }

  Problem<Tin, Tout> problem(args, chosen.plan);
  problem.run(ctx, chosen.algo, stream);
  finish_epilogue(args, args.bias && !problem.fused_bias, args.gelu_out && !problem.fused_gelu, stream);
}

template void gemm_cublas<float, float>(const GemmArgs<float, float>&, cudaStream_t);
template void gemm_cublas<__nv_bfloat16, __nv_bfloat16>(const GemmArgs<__nv_bfloat16, __nv_bfloat16>&,
                                                        cudaStream_t);
template void gemm_cublas<__nv_bfloat16, float>(const GemmArgs<__nv_bfloat16, float>&, cudaStream_t);

}  // namespace gpt::cuda
