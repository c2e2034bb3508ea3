// The linear layer on the GPU: forward, backward and the bias gradient, computing what
// kernels/cpu/matmul.cpp computes, on the GEMM ladder of kernels/cuda/gemm/.
//
// Weights are stored (OC, C), as PyTorch stores them; inp is (N, C), out is (N, OC).
// The layer is three products, each one call of gemm() (gemm.h: row-major matrices,
// op(A) is M x K, op(B) is K x N, C[m,n] = (accumulate ? C : 0) + sum_k op(A) op(B) + bias):
//
//   forward  out   = inp . W^T + bias   trans_a = false, trans_b = true     M = N,  N = OC, K = C
//                                        A = inp (N x C, lda = C), B = W (OC x C, ldb = C),
//                                        C = out (ldc = OC), bias, gelu_out; overwrites
//   dinp     dinp  = dout . W            trans_a = false, trans_b = false    M = N,  N = C,  K = OC
//                                        A = dout (N x OC, lda = OC), B = W (OC x C, ldb = C),
//                                        C = dinp (ldc = C), overwrites, Tout = A
//   dW       dW   += dout^T . inp        trans_a = true,  trans_b = false    M = OC, N = C,  K = N
//                                        A = dout stored N x OC (lda = OC), B = inp (N x C,
//                                        ldb = C), C = dW (ldc = C), accumulate, Tout = float
//
// Parameter gradients are fp32 (docs/architecture.md, bf16 mode): in bf16 mode dW is a
// bf16 -> float product, so the sum over the N rows never passes through bf16. With
// gelu_out the forward also writes gelu(out) from the GEMM's epilogue: the MLP's
// pre-activation and activation leave the same kernel, and the activation costs no
// extra pass over memory.
//
//   dbias += column sums of dout         bias_backward below (not a GEMM)
//
// Which GEMM runs. set_gemm() picks "cublas", one rung "v1".."v5", or "hand": the top
// of the ladder. A chosen rung that cannot take a call (gemm_version_supports() is
// false: v4 and v5 need bf16 inputs, 16-byte alignment and strides that are multiples
// of 8; v4 needs compute capability 8.0+, v5 9.x) steps down v5 -> v4 -> v3 until one
// can; v1..v3 take every call. So "hand" is v5 on Hopper, v4 on Ampere, v3 elsewhere
// for bf16, and v3 for fp32 (v4/v5 are bf16-only). The descent never ends at cuBLAS:
// a run that asked for the hand-written GEMM gets a hand-written GEMM.
//
// bias_backward. dbias[o] += sum_n dout[n,o] is a reduction down the columns of a
// row-major matrix, taken in the two fixed-order steps of kernels/cuda/column_sums.h:
// block (chunk j, column tile) sums the kBiasRowsPerChunk rows of chunk j for 32 packs of
// columns (a warp reads 512 contiguous bytes of a row), its kSumLanes rows of threads
// taking every kSumLanes-th row and adding their sums in lane order; finish_column_sums
// then adds the chunks' partials into dbias. No atomics: the same bits every run. One
// block per 32 columns walking all the rows, as before, gave the 768 columns of GPT-2's
// biases 24 blocks for 132 SMs: 12 % of a training step's GPU time on an H200.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/column_sums.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda {
namespace {

// ---- the GEMM choice --------------------------------------------------------------------

// What set_gemm chose: a GemmVersion, or kHand. Atomic so that a thread may change the
// choice while another launches (each call reads it once).
constexpr int kHand = -1;
std::atomic<int> g_choice{kHand};

struct GemmName {
  const char* name;
  int choice;
};
constexpr GemmName kGemmNames[] = {
    {"hand", kHand},
    {"cublas", int(GemmVersion::Cublas)},
    {"v1", int(GemmVersion::V1)},
    {"v2", int(GemmVersion::V2)},
    {"v3", int(GemmVersion::V3)},
    {"v4", int(GemmVersion::V4)},
    {"v5", int(GemmVersion::V5)},
};

// The version that runs `args`: the chosen one ("hand": the top rung, v5), stepped down
// the tensor-core rungs until one can take the call. v3 and below take every call.
template <class Tin, class Tout>
GemmVersion version_for(const GemmArgs<Tin, Tout>& args) {
  const int choice = g_choice.load(std::memory_order_relaxed);
  GemmVersion v = choice == kHand ? GemmVersion::V5 : GemmVersion(choice);
  while ((v == GemmVersion::V5 || v == GemmVersion::V4) && !gemm_version_supports(v, args))
    v = GemmVersion(int(v) - 1);
  return v;
}

// A call as training makes it (16-byte aligned operands, strides multiples of 8), for
// gemm_in_use. gemm_version_supports only inspects the pointers' values, never what
// they point at; they point at a real, aligned object all the same.
template <class T>
GemmArgs<T, T> well_aligned_call() {
  alignas(256) static const T storage[8] = {};
  GemmArgs<T, T> args;
  args.M = args.N = args.K = 8;
  args.A = args.B = storage;
  args.C = const_cast<T*>(storage);  // never written: the call is only asked about
  args.lda = args.ldb = args.ldc = 8;
  return args;
}

template <class Tin, class Tout>
void run_gemm(const GemmArgs<Tin, Tout>& args) {
  gemm(version_for(args), args, /*stream=*/nullptr);
}

// ---- argument checks (the conventions of the other kernel files) ----------------------------

// Throws on a negative size; returns whether there is anything to compute.
bool check_sizes(const char* fn, int N, int C, int OC) {
  if (N < 0 || C < 0 || OC < 0)
    throw std::invalid_argument(std::string(fn) + ": negative shape N=" + std::to_string(N) +
                                " C=" + std::to_string(C) + " OC=" + std::to_string(OC));
  return N > 0 && C > 0 && OC > 0;
}

// ---- bias gradient ----------------------------------------------------------------------------

constexpr int kBiasRowsPerChunk = 256;  // rows one block sums: 32 per thread

// Block (32, kSumLanes) -> chunk blockIdx.x of the rows, columns [32 K blockIdx.y, + 32 K):
// thread (x, y) sums the pack of K columns at 32 K blockIdx.y + K x over the chunk's rows
// y, y + kSumLanes, ... in order; thread (x, 0) adds the lane sums in lane order and
// writes the chunk's partial sums.
template <class T>
__global__ void __launch_bounds__(32 * kSumLanes)
    bias_partials_kernel(float* __restrict__ partials, const T* __restrict__ dout, int N, int OC, bool vec) {
  constexpr int K = kPack<T>;
  const int x = int(threadIdx.x), y = int(threadIdx.y);
  const int c0 = (int(blockIdx.y) * 32 + x) * K;
  const int chunk = int(blockIdx.x);
  const int row_end = min((chunk + 1) * kBiasRowsPerChunk, N);
  float sum[K] = {};
  if (c0 < OC) {
#pragma unroll 4
    for (int row = chunk * kBiasRowsPerChunk + y; row < row_end; row += kSumLanes) {
      float d[K];
      load_floats(d, dout + size_t(row) * OC, c0, OC, vec);
#pragma unroll
      for (int k = 0; k < K; ++k) sum[k] += d[k];
    }
  }
  __shared__ float lane_sums[kSumLanes][K][32];  // [y][k][x]: consecutive x, consecutive banks
#pragma unroll
  for (int k = 0; k < K; ++k) lane_sums[y][k][x] = sum[k];
  __syncthreads();
  if (y != 0 || c0 >= OC) return;
#pragma unroll
  for (int k = 0; k < K; ++k)
    for (int lane = 1; lane < kSumLanes; ++lane) sum[k] += lane_sums[lane][k][x];
  store_floats(partials + size_t(chunk) * OC, sum, c0, OC, vec);
}

ScratchBuffer bias_partials_scratch;  // kernels/cuda/scratch.h

}  // namespace

// ---- the GEMM choice ----------------------------------------------------------------------------

void set_gemm(const char* name) {
  if (!name) throw std::invalid_argument("set_gemm: name is null");
  std::string choices;
  for (const GemmName& g : kGemmNames) {
    if (std::strcmp(name, g.name) == 0) {
      g_choice.store(g.choice, std::memory_order_relaxed);
      return;
    }
    choices += choices.empty() ? g.name : std::string(", ") + g.name;
  }
  throw std::invalid_argument(std::string("set_gemm: unknown GEMM '") + name + "' (choices: " + choices + ")");
}

const char* gemm_in_use(bool bf16) {
  return bf16 ? gemm_version_name(version_for(well_aligned_call<__nv_bfloat16>()))
              : gemm_version_name(version_for(well_aligned_call<float>()));
}

// ---- the layer --------------------------------------------------------------------------------

template <class A>
void matmul_forward(A* out, const A* inp, const A* w, const A* bias, int N, int C, int OC, A* gelu_out) {
  if (N < 0 || C < 1 || OC < 0)
    throw std::invalid_argument("matmul_forward: shape N=" + std::to_string(N) + " C=" + std::to_string(C) +
                                " OC=" + std::to_string(OC) + " (N, OC >= 0 and C >= 1)");
  if (N == 0 || OC == 0) return;
  require_pointer(out, "matmul_forward", "out");
  require_pointer(inp, "matmul_forward", "inp");
  require_pointer(w, "matmul_forward", "w");
  using T = DeviceType<A>;
  // out = inp . W^T + bias (+ gelu_out): the "forward" row of the table at the top.
  run_gemm(GemmArgs<T, T>{.trans_a = false, .trans_b = true, .M = N, .N = OC, .K = C,
                          .A = device_ptr(inp), .lda = C, .B = device_ptr(w), .ldb = C,
                          .C = device_ptr(out), .ldc = OC, .accumulate = false,
                          .bias = device_ptr(bias), .gelu_out = device_ptr(gelu_out)});
}

template <class A>
void matmul_backward(A* dinp, float* dw, float* dbias, const A* dout, const A* inp, const A* w, int N, int C,
                     int OC) {
  if (!check_sizes("matmul_backward", N, C, OC)) {
    // An empty dimension leaves the accumulated products nothing to add; with C = 0 the
    // bias still has a gradient (bias_backward itself returns when N or OC is 0). The
    // written dinp of an empty sum (OC = 0) is zero, as on the CPU.
    if (dinp && N > 0 && C > 0)
      GPT_CUDA_CHECK(cudaMemsetAsync(device_ptr(dinp), 0, size_t(N) * C * sizeof(DeviceType<A>)));
    if (dbias) bias_backward(dbias, dout, N, OC);
    return;
  }
  require_pointer(dout, "matmul_backward", "dout");
  using T = DeviceType<A>;
  if (dinp) {  // dinp = dout . W (written: kernels/ops.h)
    require_pointer(w, "matmul_backward", "w");
    run_gemm(GemmArgs<T, T>{.trans_a = false, .trans_b = false, .M = N, .N = C, .K = OC,
                            .A = device_ptr(dout), .lda = OC, .B = device_ptr(w), .ldb = C,
                            .C = device_ptr(dinp), .ldc = C, .accumulate = false});
  }
  if (dw) {  // dW += dout^T . inp, summed over the N rows in fp32
    require_pointer(inp, "matmul_backward", "inp");
    run_gemm(GemmArgs<T, float>{.trans_a = true, .trans_b = false, .M = OC, .N = C, .K = N,
                                .A = device_ptr(dout), .lda = OC, .B = device_ptr(inp), .ldb = C,
                                .C = dw, .ldc = C, .accumulate = true});
  }
  if (dbias) bias_backward(dbias, dout, N, OC);
}

template <class A>
void bias_backward(float* dbias, const A* dout, int N, int OC) {
  if (N < 0 || OC < 0)
    throw std::invalid_argument("bias_backward: negative shape N=" + std::to_string(N) +
                                " OC=" + std::to_string(OC));
  if (N == 0 || OC == 0) return;  // no rows: nothing to add
  require_pointer(dbias, "bias_backward", "dbias");
  require_pointer(dout, "bias_backward", "dout");
  using T = DeviceType<A>;
  constexpr int K = kPack<T>;
  const unsigned column_tiles = ceil_div(OC, 32L * K);
  if (column_tiles > 65535)  // gridDim.y's limit
    throw std::invalid_argument("bias_backward: OC = " + std::to_string(OC) + " is too large");
  const int chunks = int(ceil_div(N, kBiasRowsPerChunk));
  // Rows start 16-byte aligned when the base is and OC is a whole number of packs; the
  // partials (a scratch buffer, 256-byte aligned: scratch.h) then are too.
  const bool vec = OC % K == 0 && all_aligned16(dout);
  float* partials = bias_partials_scratch.as<float>(size_t(chunks) * OC);
  bias_partials_kernel<T><<<dim3(unsigned(chunks), column_tiles), dim3(32, kSumLanes)>>>(partials, device_ptr(dout),
                                                                                       N, OC, vec);
  GPT_CUDA_CHECK_LAUNCH();
  finish_column_sums(ColumnSums{.sum = {dbias, nullptr}, .partials = {partials, nullptr}, .count = 1}, chunks, OC);
}

#define GPT_INSTANTIATE_MATMUL(A)                                                                  \
  template void matmul_forward<A>(A*, const A*, const A*, const A*, int, int, int, A*);            \
  template void matmul_backward<A>(A*, float*, float*, const A*, const A*, const A*, int, int, int); \
  template void bias_backward<A>(float*, const A*, int, int);
GPT_INSTANTIATE_MATMUL(float)
GPT_INSTANTIATE_MATMUL(gpt::bf16)
#undef GPT_INSTANTIATE_MATMUL

}  // namespace gpt::cuda
