/// @file
/// The GEMM ladder: one product, five hand-written versions and the cuBLASLt baseline.
///
/// ```
///   v1 naive               one thread per output element, operands from global memory.
///   v2 shared tiling       a block stages tiles of A and B in shared memory; each value
///                          loaded from global memory is reused by a whole tile row/column.
///   v3 register blocking   each thread computes a small 2-D block of outputs from
///                          registers, loads are 16-byte vectors.
///   v4 mma.sync            tensor cores (bf16 in, fp32 accumulate) fed by cp.async
///                          through a multi-stage shared-memory pipeline.       (sm_80+)
///   v5 wgmma               Hopper: WGMMA fed by TMA through an mbarrier pipeline,
///                          producer/consumer warp specialisation, persistent; K split
///                          into ranges when the tiles cannot fill the SMs.  (sm_90a)
///   cublas                 cuBLASLt, the baseline every version is measured against.
/// ```
///
/// The product, row-major (all matrices row-major; ld* are row strides in elements):
/// ```
///   op(A) is M x K: A stored M x K when !trans_a, or A^T with A stored K x M;
///   op(B) is K x N: B stored K x N when !trans_b, or B^T with B stored N x K;
///   C[m,n] = (accumulate ? C[m,n] : 0) + sum_k op(A)[m,k] op(B)[k,n] + bias[n]
///   and, when gelu_out is non-null, gelu_out[m,n] = gelu(C[m,n]) (tanh form), from the
///   fp32 value before C is rounded to Tout (as the CPU reference does).
/// ```
/// Training uses three layouts (linear weights W stored (OC, C), as PyTorch):
/// ```
///   forward   out  = inp . W^T + bias     trans_a = false, trans_b = true   (M=N_rows, N=OC, K=C)
///   dinp      dinp  = dout . W            trans_a = false, trans_b = false  (M=N_rows, N=C, K=OC)
///   dW        dW  += dout^T . inp         trans_a = true,  trans_b = false  (M=OC, N=C, K=N_rows)
/// ```
/// Every version takes every layout, any M, N, K >= 1 (tails are predicated), fp32
/// accumulation. Element types (Tin -> Tout): float -> float, bf16 -> bf16, bf16 -> float
/// (dW into fp32 gradients). bias has type Tin; gelu requires !accumulate.
///
/// v4 and v5 take bf16 inputs only, and need 16-byte aligned A, B, C (and bias and
/// gelu_out when given) and row strides that are multiples of 8 elements (cp.async and
/// TMA move 16-byte pieces); they throw std::invalid_argument otherwise, and
/// gemm_version_supports() says so beforehand.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpt::cuda {

/// A rung of the ladder above; the value is the version's number, 0 for cuBLASLt.
enum class GemmVersion : int { Cublas = 0, V1 = 1, V2 = 2, V3 = 3, V4 = 4, V5 = 5 };

const char* gemm_version_name(GemmVersion v);  ///< "cublas", "v1", ... "v5"

/// One call of the product above: Tin elements in, Tout out; every pointer in device memory.
template <class Tin, class Tout>
struct GemmArgs {
  /// op(A) is A^T, with A stored K x M (false: A itself, stored M x K).
  bool trans_a = false, trans_b = false;
  /// @var trans_b
  /// op(B) is B^T, with B stored N x K (false: B itself, stored K x N).
  /// @var M
  /// Rows of op(A), of C and of gelu_out (>= 1).
  /// @var N
  /// Columns of op(B), of C and of gelu_out; the length of bias (>= 1).
  /// @var K
  /// The summed dimension: columns of op(A), rows of op(B) (>= 1).
  int M = 0, N = 0, K = 0;
  const Tin* A = nullptr;  ///< the first operand, stored as trans_a says
  int lda = 0;             ///< A's row stride in elements, at least its stored row length
  const Tin* B = nullptr;  ///< the second operand, stored as trans_b says
  int ldb = 0;             ///< B's row stride in elements, at least its stored row length
  Tout* C = nullptr;       ///< the M x N result
  int ldc = 0;             ///< C's (and gelu_out's) row stride in elements, at least N
  bool accumulate = false;  ///< C += the product instead of C = it; not with gelu_out
  const Tin* bias = nullptr;  ///< length N, or null
  Tout* gelu_out = nullptr;   ///< M x N with row stride ldc, or null
};

/// Whether version v can compute args on the current device (architecture, element
/// types, alignment). Throws nothing.
template <class Tin, class Tout>
bool gemm_version_supports(GemmVersion v, const GemmArgs<Tin, Tout>& args);

/// Computes the product with version v, asynchronously on `stream` (v5 splits K only on
/// the default stream, which orders the one workspace of its partial tiles). Throws
/// std::invalid_argument (bad shapes or strides, or a version that cannot take args,
/// naming which) and std::runtime_error (a failed CUDA or cuBLAS call).
template <class Tin, class Tout>
void gemm(GemmVersion v, const GemmArgs<Tin, Tout>& args, cudaStream_t stream = nullptr);

/// Per-version entry points (one .cu file each); gemm() validates and dispatches to them.
template <class Tin, class Tout>
void gemm_v1(const GemmArgs<Tin, Tout>& args, cudaStream_t stream);
/// v2, shared-memory tiling.
template <class Tin, class Tout>
void gemm_v2(const GemmArgs<Tin, Tout>& args, cudaStream_t stream);
/// v3, register blocking.
template <class Tin, class Tout>
void gemm_v3(const GemmArgs<Tin, Tout>& args, cudaStream_t stream);
template <class Tin, class Tout>
void gemm_v4(const GemmArgs<Tin, Tout>& args, cudaStream_t stream);  ///< Tin = bf16 only
/// The current device's compute capability as 10 * major + minor (90 for an H100), or -1
/// without a usable device; cached per device, so cheap enough to ask at every launch.
int current_capability() noexcept;

/// The widest C gemm_v4 takes: its grid holds N's tiles of 128 columns on the y
/// dimension, at most 65535 of them.
constexpr int64_t kGemmV4MaxN = int64_t(65535) * 128;
template <class Tin, class Tout>
void gemm_v5(const GemmArgs<Tin, Tout>& args, cudaStream_t stream);  ///< Tin = bf16 only
/// The cuBLASLt baseline.
template <class Tin, class Tout>
void gemm_cublas(const GemmArgs<Tin, Tout>& args, cudaStream_t stream);
/// Destroys cuBLASLt's handles and frees their workspaces (the next call creates them again).
void release_cublas();

}  // namespace gpt::cuda
