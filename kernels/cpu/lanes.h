/// @file
/// Sums in fixed lanes: the CPU kernels' dot products and softmax sums, written so that
/// the compiler vectorises them and the result does not depend on where the data lies;
/// and the 64-byte vector type the register-blocked kernels spell their lanes with.
///
/// A plain loop `s += x[i]` adds one term after another: a chain of dependent additions
/// that runs at the adder's latency, one term per ~4 cycles. Vectorising it means adding
/// in another order, which the compiler may only do when told (`omp simd reduction`);
/// it then also peels the first terms until the data is aligned, so the order, and the
/// rounding, follows the data's address. A tensor computed in two places (a whole model,
/// and a pipeline stage whose buffers lie elsewhere) would no longer get the same bits.
///
/// Here the order is fixed by n alone. With L lanes (one 64-byte vector: 16 floats or 8
/// doubles), lane l adds the terms i = l, l + L, l + 2L, ... in order, and the lanes are
/// then folded in halves:
/// ```
///   acc[l] = sum over i = l (mod L) of term(i)          (in increasing i)
///   fold:  acc[l] += acc[l + L/2] for l < L/2, then L/4, ..., 1;   result acc[0]
/// ```
/// The compiler turns each step of the lane loop into one vector operation.
#pragma once

namespace gpt::cpu {

/// Lanes of a fixed-lane sum of T: one 64-byte vector's worth.
template <class T>
inline constexpr int kLanes = int(64 / sizeof(T));

/// sum of term(i) for i in [0, n), in the fixed order above. term is inlined: it may
/// be any expression of i that the compiler can vectorise (a product, an exp_t).
template <class T, class Term>
inline T lane_sum(int n, Term&& term) {
  constexpr int L = kLanes<T>;
  T acc[L] = {};
  int i = 0;
  for (; i + L <= n; i += L) {
#pragma omp simd
    for (int l = 0; l < L; ++l) acc[l] += term(i + l);
  }
  for (int l = 0; i + l < n; ++l) acc[l] += term(i + l);  // the last, partial round
  for (int width = L / 2; width > 0; width /= 2) {
#pragma omp simd
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

/// One 64-byte vector of T (kLanes<T> values) in GCC's vector extension: `a + b`, `s * v`
/// and `v[l]` act lane by lane, and `acc += s * v` becomes one fused multiply-add. The
/// kernels that keep their sums in registers (the GEMM's micro-kernel, the flash
/// attention's row helpers) use it where a loop over lanes would leave the compiler to
/// guess. Aligned to T alone, so it may be loaded from and stored to any element's address.
/// (A struct per element type because GCC drops the vector attribute from an alias
/// template's dependent type.)
template <class T>
struct LaneVectorOf;
/// 16 floats.
template <>
struct LaneVectorOf<float> {
  /// The vector type.
  typedef float type __attribute__((vector_size(64), aligned(alignof(float))));
};
/// 8 doubles.
template <>
struct LaneVectorOf<double> {
  /// The vector type.
  typedef double type __attribute__((vector_size(64), aligned(alignof(double))));
};
/// One 64-byte vector of T: LaneVectorOf's type.
template <class T>
using LaneVector = typename LaneVectorOf<T>::type;

/// The kLanes<T> values from x on, as one vector (x need not be 64-byte aligned).
template <class T>
inline LaneVector<T> load_lanes(const T* x) {
  return *reinterpret_cast<const LaneVector<T>*>(x);
}

/// v written to the kLanes<T> values from x on.
template <class T>
inline void store_lanes(T* x, LaneVector<T> v) {
  *reinterpret_cast<LaneVector<T>*>(x) = v;
}

/// a . b over n elements, in the fixed order of lane_sum.
template <class T>
inline T dot_lanes(const T* a, const T* b, int n) {
  return lane_sum<T>(n, [=](int i) { return a[i] * b[i]; });
}

}  // namespace gpt::cpu
