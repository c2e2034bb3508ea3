// Element-wise ops on the GPU: GELU forward and backward, the residual add and its
// backward, scaling, bf16 rounding and the fp32 <-> bf16 conversions. They compute
// what kernels/cpu/elementwise.cpp and kernels/cpu/adamw.cpp (round_to_bf16) compute:
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   dinp     = gelu'(x) dout;   out = a + b;   da += dout, db += dout;   x *= s
//
// Each of them reads and writes a few numbers per element and does little arithmetic,
// so its speed is the memory bandwidth. Every thread owns one 16-byte pack per array
// (4 floats or 8 bf16) and moves it with a single 128-bit access; unaligned calls and
// the last partial pack go element by element (kernels/cuda/vector_io.cuh explains
// both). All arithmetic is fp32; a bf16 value is rounded (to nearest even) once, when
// it is stored.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float round_bf16(float x) { return to_float(from_float<__nv_bfloat16>(x)); }

// ---- kernels: one thread per K elements -------------------------------------------------
// No __restrict__: callers may run an op in place (out == a), which is safe here because
// every thread reads its elements before it writes them and no thread touches another's.

template <class T>
__global__ void __launch_bounds__(kThreads) gelu_forward_kernel(T* out, const T* inp, size_t n, bool vec) {
  constexpr int K = kPack<T>;
  const size_t i0 = first_element<K>();
  if (i0 >= n) return;
  float x[K];
  load_floats(x, inp, i0, n, vec);
#pragma unroll
  for (int k = 0; k < K; ++k) x[k] = gelu(x[k]);
  store_floats(out, x, i0, n, vec);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n, bool vec) {
  constexpr int K = kPack<T>;
  const size_t i0 = first_element<K>();
  if (i0 >= n) return;
  float x[K], dy[K], dx[K];
  load_floats(x, inp, i0, n, vec);
  load_floats(dy, dout, i0, n, vec);
#pragma unroll
  for (int k = 0; k < K; ++k) dx[k] = gelu_grad(x[k]) * dy[k];
  store_floats(dinp, dx, i0, n, vec);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    residual_forward_kernel(T* out, const T* a, const T* b, size_t n, bool vec) {
  constexpr int K = kPack<T>;
  const size_t i0 = first_element<K>();
  if (i0 >= n) return;
  float x[K], y[K];
  load_floats(x, a, i0, n, vec);
  load_floats(y, b, i0, n, vec);
#pragma unroll
  for (int k = 0; k < K; ++k) x[k] += y[k];
  store_floats(out, x, i0, n, vec);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    residual_backward_kernel(T* da, T* db, const T* dout, size_t n, bool vec) {
  constexpr int K = kPack<T>;
  const size_t i0 = first_element<K>();
  if (i0 >= n) return;
  float g[K], x[K], y[K];
  load_floats(g, dout, i0, n, vec);
  load_floats(x, da, i0, n, vec);
  load_floats(y, db, i0, n, vec);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    x[k] += g[k];
    y[k] += g[k];
  }
  store_floats(da, x, i0, n, vec);
  store_floats(db, y, i0, n, vec);
}

template <class T>
__global__ void __launch_bounds__(kThreads) scale_kernel(T* x, size_t n, float s, bool vec) {
  constexpr int K = kPack<T>;
  const size_t i0 = first_element<K>();
  if (i0 >= n) return;
  float v[K];
  load_floats(v, x, i0, n, vec);
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] *= s;
  store_floats(x, v, i0, n, vec);
}

__global__ void __launch_bounds__(kThreads) round_to_bf16_kernel(float* x, size_t n, bool vec) {
  constexpr int K = kPack<float>;
  const size_t i0 = first_element<K>();
  if (i0 >= n) return;
  float v[K];
  load_floats(v, x, i0, n, vec);
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = round_bf16(v[k]);
  store_floats(x, v, i0, n, vec);
}

// fp32 <-> bf16: 8 elements per thread, one bf16 pack and two float packs.
template <class Dst, class Src>
__global__ void __launch_bounds__(kThreads) convert_kernel(Dst* dst, const Src* src, size_t n, bool vec) {
  constexpr int K = kPack<__nv_bfloat16>;
  const size_t i0 = first_element<K>();
  if (i0 >= n) return;
  float v[K];
  load_floats(v, src, i0, n, vec);  // a bf16 -> float conversion is exact,
  store_floats(dst, v, i0, n, vec);  // float -> bf16 rounds to nearest even
}

// ---- host side ----------------------------------------------------------------------

// Blocks of kThreads threads for n elements at K per thread.
unsigned blocks_for(size_t n, int K, const char* fn) {
  const size_t blocks = (n + size_t(K) * kThreads - 1) / (size_t(K) * kThreads);
  if (blocks > size_t(INT_MAX))
    throw std::invalid_argument(std::string(fn) + ": n = " + std::to_string(n) + " is too large");
  return unsigned(blocks);
}

}  // namespace

template <class A>
void gelu_forward(A* out, const A* inp, size_t n) {
  if (n == 0) return;
  require_pointer(out, "gelu_forward", "out");
  require_pointer(inp, "gelu_forward", "inp");
  using T = DeviceType<A>;
  gelu_forward_kernel<T><<<blocks_for(n, kPack<T>, "gelu_forward"), kThreads>>>(
      device_ptr(out), device_ptr(inp), n, all_aligned16(out, inp));
  GPT_CUDA_CHECK_LAUNCH();
}

template <class A>
void gelu_backward(A* dinp, const A* inp, const A* dout, size_t n) {
  if (n == 0) return;
  require_pointer(dinp, "gelu_backward", "dinp");
  require_pointer(inp, "gelu_backward", "inp");
  require_pointer(dout, "gelu_backward", "dout");
  using T = DeviceType<A>;
  gelu_backward_kernel<T><<<blocks_for(n, kPack<T>, "gelu_backward"), kThreads>>>(
      device_ptr(dinp), device_ptr(inp), device_ptr(dout), n, all_aligned16(dinp, inp, dout));
  GPT_CUDA_CHECK_LAUNCH();
}

template <class A>
void residual_forward(A* out, const A* a, const A* b, size_t n) {
  if (n == 0) return;
  require_pointer(out, "residual_forward", "out");
  require_pointer(a, "residual_forward", "a");
  require_pointer(b, "residual_forward", "b");
  using T = DeviceType<A>;
  residual_forward_kernel<T><<<blocks_for(n, kPack<T>, "residual_forward"), kThreads>>>(
      device_ptr(out), device_ptr(a), device_ptr(b), n, all_aligned16(out, a, b));
  GPT_CUDA_CHECK_LAUNCH();
}

template <class A>
void residual_backward(A* da, A* db, const A* dout, size_t n) {
  if (n == 0) return;
  require_pointer(da, "residual_backward", "da");
  require_pointer(db, "residual_backward", "db");
  require_pointer(dout, "residual_backward", "dout");
  using T = DeviceType<A>;
  residual_backward_kernel<T><<<blocks_for(n, kPack<T>, "residual_backward"), kThreads>>>(
      device_ptr(da), device_ptr(db), device_ptr(dout), n, all_aligned16(da, db, dout));
  GPT_CUDA_CHECK_LAUNCH();
}

template <class A>
void scale(A* x, size_t n, float s) {
  if (n == 0) return;
  require_pointer(x, "scale", "x");
  using T = DeviceType<A>;
  scale_kernel<T><<<blocks_for(n, kPack<T>, "scale"), kThreads>>>(device_ptr(x), n, s, aligned16(x));
  GPT_CUDA_CHECK_LAUNCH();
}

void round_to_bf16(float* x, size_t n) {
  if (n == 0) return;
  require_pointer(x, "round_to_bf16", "x");
  round_to_bf16_kernel<<<blocks_for(n, kPack<float>, "round_to_bf16"), kThreads>>>(x, n, aligned16(x));
  GPT_CUDA_CHECK_LAUNCH();
}

void convert(bf16* dst, const float* src, size_t n) {
  if (n == 0) return;
  require_pointer(dst, "convert", "dst");
  require_pointer(src, "convert", "src");
  convert_kernel<<<blocks_for(n, kPack<__nv_bfloat16>, "convert"), kThreads>>>(
      device_ptr(dst), src, n, all_aligned16(dst, src));
  GPT_CUDA_CHECK_LAUNCH();
}

void convert(float* dst, const bf16* src, size_t n) {
  if (n == 0) return;
  require_pointer(dst, "convert", "dst");
  require_pointer(src, "convert", "src");
  convert_kernel<<<blocks_for(n, kPack<__nv_bfloat16>, "convert"), kThreads>>>(
      dst, device_ptr(src), n, all_aligned16(dst, src));
  GPT_CUDA_CHECK_LAUNCH();
}

#define GPT_INSTANTIATE_ELEMENTWISE(A)                                   \
  template void gelu_forward<A>(A*, const A*, size_t);                   \
  template void gelu_backward<A>(A*, const A*, const A*, size_t);        \
  template void residual_forward<A>(A*, const A*, const A*, size_t);     \
  template void residual_backward<A>(A*, A*, const A*, size_t);          \
  template void scale<A>(A*, size_t, float);
GPT_INSTANTIATE_ELEMENTWISE(float)
GPT_INSTANTIATE_ELEMENTWISE(gpt::bf16)
#undef GPT_INSTANTIATE_ELEMENTWISE

}  // namespace gpt::cuda
