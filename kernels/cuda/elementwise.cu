// Element-wise ops on the GPU: GELU forward and backward, the residual add and its
// backward, scaling, bf16 rounding and the fp32 <-> bf16 conversions. They compute
// what kernels/cpu/elementwise.cpp and kernels/cpu/adamw.cpp (round_to_bf16) compute:
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   dinp    += gelu'(x) dout;   out = a + b;   da += dout, db += dout;   x *= s
//
// Each of them reads and writes a few numbers per element and does little arithmetic,
// so its speed is the memory bandwidth, and what matters is how the bytes move. Every
// thread moves 16 bytes per array with one 128-bit load or store: a "pack" of K = 4
// floats or 8 bf16, the widest access a thread can make.
//
//   thread i  ->  elements [K i, K i + K)          (K = 16 bytes / element size)
//   warp      ->  32 consecutive packs = 512 contiguous bytes per array (coalesced)
//
// Compared with one element per thread, a 128-bit access issues 4x (fp32) or 8x (bf16)
// fewer load instructions for the same bytes and keeps more bytes in flight per thread,
// which is what hides DRAM latency.
//
// 128-bit accesses need 16-byte aligned addresses. cudaMalloc returns 256-byte aligned
// buffers, but callers pass views into larger buffers, so alignment is checked at run
// time: an unaligned call, and the last partial pack of a size that is not a multiple
// of K, go element by element (the scalar tail). All arithmetic is fp32; a bf16 value
// is rounded (to nearest even) once, when it is stored.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;

// ---- 16-byte packs (the same helpers as the other memory-bound kernel files) -----------

// 16 bytes of T, moved by one 128-bit load or store.
template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};
template <class T>
constexpr int kPack = Pack<T>::kSize;  // 4 for float, 8 for bf16

template <class T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {  // p: 16-byte aligned
  Pack<T> pack;
  *reinterpret_cast<int4*>(&pack) = *reinterpret_cast<const int4*>(p);
  return pack;
}
template <class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& pack) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&pack);
}

// x[k] = p[i0 + k] in fp32, k < K; elements at or past n read as 0. With vec (p is
// 16-byte aligned, i0 a multiple of K, K a multiple of the pack) whole packs are loaded.
template <int K, class T>
__device__ __forceinline__ void load_floats(float (&x)[K], const T* p, size_t i0, size_t n, bool vec) {
  constexpr int P = kPack<T>;
  static_assert(K % P == 0, "K must be a whole number of packs");
  if (vec && i0 + K <= n) {
#pragma unroll
    for (int q = 0; q < K / P; ++q) {
      const Pack<T> pack = load_pack(p + i0 + q * P);
#pragma unroll
      for (int k = 0; k < P; ++k) x[q * P + k] = to_float(pack.v[k]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) x[k] = i0 + k < n ? to_float(p[i0 + k]) : 0.0f;
  }
}

// p[i0 + k] = x[k] (rounded to T), k < K and i0 + k < n.
template <int K, class T>
__device__ __forceinline__ void store_floats(T* p, const float (&x)[K], size_t i0, size_t n, bool vec) {
  constexpr int P = kPack<T>;
  static_assert(K % P == 0, "K must be a whole number of packs");
  if (vec && i0 + K <= n) {
#pragma unroll
    for (int q = 0; q < K / P; ++q) {
      Pack<T> pack;
#pragma unroll
      for (int k = 0; k < P; ++k) pack.v[k] = from_float<T>(x[q * P + k]);
      store_pack(p + i0 + q * P, pack);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (i0 + k < n) p[i0 + k] = from_float<T>(x[k]);
  }
}

// The first of the K elements this thread owns.
template <int K>
__device__ __forceinline__ size_t first_element() {
  return (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * K;
}

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
  load_floats(dx, dinp, i0, n, vec);
#pragma unroll
  for (int k = 0; k < K; ++k) dx[k] += gelu_grad(x[k]) * dy[k];
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

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
template <class... P>
bool all_aligned16(const P*... p) {
  return (aligned16(p) && ...);
}

void require_pointer(const void* p, const char* fn, const char* arg) {
  if (!p) throw std::invalid_argument(std::string(fn) + ": " + arg + " is null");
}

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
