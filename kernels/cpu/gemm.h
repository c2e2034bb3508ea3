/// @file
/// The CPU GEMM: C[M,N] (+)= op(A)[M,K] . op(B)[K,N], row-major, cache-blocked and
/// vectorised (see gemm.cpp for the blocking scheme). Templated on float and double; bf16
/// operands are widened as they are packed.
///
/// ```
///   op(A) = A (M x K, row stride lda)      when !trans_a
///         = A^T, A stored K x M (stride lda) when trans_a
///   op(B) = B (K x N, row stride ldb)      when !trans_b
///         = B^T, B stored N x K (stride ldb) when trans_b
///   accumulate: C += product; otherwise C = product.
/// ```
/// ```
/// The three products of a linear layer out = inp . w^T map onto it as
///   forward   out  = inp . w^T     gemm(false, true,  N, OC, C, ...)
///   backward  dinp  = dout . w     gemm(false, false, N, C, OC, ..., false)
///             dw   += dout^T . inp gemm(true,  false, OC, C, N, ..., true)
/// ```
#pragma once

#include "common/bf16.h"

namespace gpt::cpu {

/// C = op(A) . op(B), or C += it with accumulate, as above: row-major, row strides lda,
/// ldb, ldc in elements; C must not overlap A or B. Runs on the OpenMP threads.
template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, const T* A, int lda, const T* B, int ldb,
          T* C, int ldc, bool accumulate);

/// The same product of bf16 operands into fp32 C: each operand is widened as it is
/// packed, so C is, bit for bit, the fp32 GEMM's on widened copies of A and B, and no
/// copy of a whole operand is made (kernels/cpu/bf16_ops.h's matmuls).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
          float* C, int ldc, bool accumulate);

/// How OpenMP's threads share one product (gemm.cpp describes both): the row blocks of
/// op(A) around a B block they pack together, or each thread its own slice of C's
/// columns. The result is the same to the bit either way, and on any number of threads.
enum class GemmSplit { automatic, rows, columns };

/// The split gemm<T> uses for an M x N product on `threads` threads (rows or columns).
/// The bf16 gemm computes in float and splits as gemm<float>.
template <class T>
GemmSplit gemm_split(int M, int N, int threads);

/// Makes every later product, on any thread, split as `split`; `automatic` returns to
/// gemm_split's choice. For benchmarks and tests that compare the splits.
void force_gemm_split(GemmSplit split);

/// The plain triple loop, the reference the blocked GEMM is tested against.
template <class T>
void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, const T* A, int lda,
                    const T* B, int ldb, T* C, int ldc, bool accumulate);

}  // namespace gpt::cpu
