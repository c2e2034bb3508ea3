// Token + position embedding on the GPU, forward and backward, computing what
// kernels/cpu/embedding.cpp computes:
//   out[b,t,:]  = wte[tokens[b,t],:] + wpe[t,:]
//   dwpe[t,:]  += sum_b dout[b,t,:]                      (b in order)
//   dwte[v,:]  += sum of the dout rows whose token is v   (positions in order)
//
// The forward is a gather: one thread per 16 bytes of an output row (4 floats or 8 bf16),
// reading the matching 16 bytes of a wte row and of a wpe row.
//
// The backward is a scatter, and a scatter is where determinism is lost: two positions
// with the same token add into the same dwte row, and float atomics would add them in
// whatever order the hardware chose, so the bits would change from run to run. Instead
// the scatter is turned into a gather by sorting:
//
//   tokens     [ 7 3 7 9 3 7 ]     positions [ 0 1 2 3 4 5 ]
//   stable sort by token (radix sort: stable, so equal tokens keep position order)
//   sorted tok [ 3 3 7 7 7 9 ]     sorted pos [ 1 4 0 2 5 3 ]
//                 run     run        run
//
// Each run of equal tokens is one dwte row, owned by one warp per 32 packs of channels
// (a "channel slice"): the warp at the run's first sorted index walks the run and adds
// the dout rows in position order into registers, then adds that into the dwte row.
// No two warps write one element, no atomics, and the additions happen in exactly the
// CPU reference's order (dwte[v,c] += dout[bt,c] for bt ascending), so the fp32 result
// is bit for bit the CPU's. dwpe needs no sort: position t's row is the sum over b of
// dout[b,t,:], one thread per (t, 16 bytes of channels), b in order.
//
// Cost: the sort moves 8 bytes per position (N = B*T of them, a few radix passes), tiny
// next to the N*C dout elements read once by each of the two gathers. A very frequent
// token makes its run long and its warps serial; the run loop is unrolled so that
// several dout rows are in flight at once.
//
// Vocabulary ranges (tensor parallelism): a rank holding rows [v0, v1) of wte embeds the
// tokens it holds and zero for the others, and adds positions from pos0 only when it is
// given wpe (kernels/ops.h, embedding_range_forward). The same kernels do both: the whole
// vocabulary is the range [0, INT_MAX) with positions from 0. In the backward the warp of
// a run whose token is outside the range returns at once, and dwpe may be absent.
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRunWarps = 4;  // warps per block of the dwte kernel: 4 sorted indices

// ---- forward --------------------------------------------------------------------------

// Thread -> (row bt, pack of channels [c0, c0 + K)), packs_per_row = ceil(C / K).
// Row-major over (bt, pack): a warp covers consecutive packs of a row (coalesced).
// wte_rows holds rows [v0, v1) of wte; wpe (null: no positions) rows from pos0.
template <class T>
__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                             const T* __restrict__ wte_rows, int v0, int v1, const T* __restrict__ wpe,
                             int pos0, size_t rows, int T_, int C, int packs_per_row, bool vec) {
  constexpr int K = kPack<T>;
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * packs_per_row) return;
  const size_t bt = idx / packs_per_row;
  const int c0 = int(idx % packs_per_row) * K;
  const int t = int(bt % T_);
  const int32_t token = tokens[bt];  // the same address for the row's threads: one load
  float x[K];
  if (token >= v0 && token < v1) {
    load_floats(x, wte_rows + size_t(token - v0) * C, c0, C, vec);
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) x[k] = 0.0f;  // another rank's token
  }
  if (wpe) {
    float pos[K];
    load_floats(pos, wpe + size_t(pos0 + t) * C, c0, C, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) x[k] += pos[k];
  }
  store_floats(out + bt * C, x, c0, C, vec);
}

// ---- backward: dwpe ---------------------------------------------------------------------

// Thread -> (position t, pack [c0, c0 + K)): dwpe[pos0+t, c0..] += dout[0,t,c0..] +
// dout[1,t,c0..] + ..., added one b at a time onto the old value, as the CPU does.
template <class T>
__global__ void __launch_bounds__(kThreads)
    dwpe_kernel(float* __restrict__ dwpe, const T* __restrict__ dout, int pos0, int B, int T_, int C,
                int packs_per_row, bool vec) {
  constexpr int K = kPack<T>;
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(T_) * packs_per_row) return;
  const int t = int(idx / packs_per_row);
  const int c0 = int(idx % packs_per_row) * K;
  float* row = dwpe + size_t(pos0 + t) * C;
  float acc[K];
  load_floats(acc, row, c0, C, vec);
#pragma unroll 4
  for (int b = 0; b < B; ++b) {
    float g[K];
    load_floats(g, dout + (size_t(b) * T_ + t) * C, c0, C, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] += g[k];
  }
  store_floats(row, acc, c0, C, vec);
}

// ---- backward: dwte ---------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads) iota_kernel(int32_t* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = i;
}

// Block (32, kRunWarps): warp y takes sorted index i = blockIdx.x * kRunWarps + y, lane x the
// pack (blockIdx.y * 32 + x) of channels [c0, c0 + K). Only the warp at the first index of a
// run does anything: it finds the run's end, then each lane adds the run's dout rows, in
// sorted (= position) order, into its K channels of dwte row token - v0 (dwte_rows holds
// rows [v0, v1); a run of another range's token is skipped).
// Invariant: every test that decides an early return is the same for the 32 lanes of a warp
// (they share i), so the ballot below always sees the full warp.
template <class T>
__global__ void __launch_bounds__(32 * kRunWarps)
    dwte_kernel(float* __restrict__ dwte_rows, int v0, int v1, const T* __restrict__ dout,
                const int32_t* __restrict__ sorted_tokens, const int32_t* __restrict__ sorted_positions,
                int N, int C, bool vec) {
  constexpr int K = kPack<T>;
  const int lane = threadIdx.x;
  const int start = blockIdx.x * kRunWarps + threadIdx.y;
  if (start >= N) return;
  const int32_t token = sorted_tokens[start];
  if (start > 0 && sorted_tokens[start - 1] == token) return;  // not the first of its run
  if (token < v0 || token >= v1) return;                        // another rank's rows

  // The run is [start, end). The warp tests 32 indices per step: lane l looks at
  // index end + l, and the first lane that sees another token (or the array's end)
  // marks where the run stops.
  int end = start + 1;
  for (;;) {
    const int j = end + lane;
    const bool other = j >= N || sorted_tokens[j] != token;
    const unsigned stops = __ballot_sync(kFullMask, other);
    if (stops) {
      end += __ffs(stops) - 1;  // lowest lane whose index left the run
      break;
    }
    end += 32;
  }

  const int c0 = (blockIdx.y * 32 + lane) * K;
  if (c0 >= C) return;
  float* row = dwte_rows + size_t(token - v0) * C;
  float acc[K];
  load_floats(acc, row, c0, C, vec);
  // Unrolled so that several independent dout rows are loaded before they are added;
  // the additions themselves stay in index order.
#pragma unroll 4
  for (int j = start; j < end; ++j) {
    float g[K];
    load_floats(g, dout + size_t(sorted_positions[j]) * C, c0, C, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] += g[k];
  }
  store_floats(row, acc, c0, C, vec);
}

// ---- host side ----------------------------------------------------------------------

// B, T, C >= 0 and B*T positions addressable by an int (the sort's item count).
// Returns false when there is nothing to do.
bool check_shape(const char* fn, int B, int T, int C) {
  if (B < 0 || T < 0 || C < 0)
    throw std::invalid_argument(std::string(fn) + ": negative shape B=" + std::to_string(B) +
                                " T=" + std::to_string(T) + " C=" + std::to_string(C));
  if (long(B) * T > INT_MAX)
    throw std::invalid_argument(std::string(fn) + ": B*T = " + std::to_string(long(B) * T) +
                                " positions is more than this kernel indexes");
  return B > 0 && T > 0 && C > 0;
}

unsigned blocks_for(size_t threads, int per_block) {
  return unsigned((threads + per_block - 1) / per_block);
}

ScratchBuffer sort_scratch;  // kernels/cuda/scratch.h

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Sorts (token, position) pairs by token, stably. Returns the sorted arrays, which live
// in sort_scratch until the next call.
struct SortedTokens {
  const int32_t* tokens;
  const int32_t* positions;
};
SortedTokens sort_by_token(const int32_t* tokens, int N) {
  size_t cub_bytes = 0;
  GPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, tokens, static_cast<int32_t*>(nullptr),
                                                 static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), N));
  // Layout: sorted tokens | positions 0..N-1 | sorted positions | CUB's temporary storage.
  const size_t array_bytes = round_up_256(size_t(N) * sizeof(int32_t));
  char* base = sort_scratch.as<char>(3 * array_bytes + cub_bytes);
  int32_t* sorted_tokens = reinterpret_cast<int32_t*>(base);
  int32_t* positions = reinterpret_cast<int32_t*>(base + array_bytes);
  int32_t* sorted_positions = reinterpret_cast<int32_t*>(base + 2 * array_bytes);
  void* cub_temp = base + 3 * array_bytes;

  iota_kernel<<<blocks_for(size_t(N), kThreads), kThreads>>>(positions, N);
  GPT_CUDA_CHECK_LAUNCH();
  // Tokens are in [0, Vp): non-negative, so all 32 bits sort them (CUB orders signed keys
  // correctly anyway). Radix sort is stable: equal tokens keep their position order.
  GPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, tokens, sorted_tokens, positions,
                                                 sorted_positions, N));
  return {sorted_tokens, sorted_positions};
}

// A vocabulary range [v0, v1) (empty allowed: a rank holding only padding) and a first
// position pos0 >= 0.
void check_range(const char* fn, int v0, int v1, int pos0) {
  if (v0 < 0 || v1 < v0 || pos0 < 0)
    throw std::invalid_argument(std::string(fn) + ": vocabulary range [" + std::to_string(v0) + ", " +
                                std::to_string(v1) + ") or first position " + std::to_string(pos0) +
                                " is impossible");
}

// The forward of rows [v0, v1) of wte and positions from pos0 (wpe may be null).
template <class A>
void launch_embedding_forward(const char* fn, A* out, const int32_t* tokens, const A* wte_rows, int v0, int v1,
                              const A* wpe, int pos0, int B, int T, int C) {
  if (!check_shape(fn, B, T, C)) return;
  require_pointer(out, fn, "out");
  require_pointer(tokens, fn, "tokens");
  if (v1 > v0) require_pointer(wte_rows, fn, "wte");
  using D = DeviceType<A>;
  constexpr int K = kPack<D>;
  const int packs_per_row = (C + K - 1) / K;
  // 16-byte accesses need every row to start 16-byte aligned: aligned bases, C % K == 0.
  const bool vec = C % K == 0 && aligned16(out) && aligned16(wte_rows) && aligned16(wpe);
  const size_t rows = size_t(B) * T;
  embedding_forward_kernel<D><<<blocks_for(rows * packs_per_row, kThreads), kThreads>>>(
      device_ptr(out), tokens, device_ptr(wte_rows), v0, v1, device_ptr(wpe), pos0, rows, T, C, packs_per_row, vec);
  GPT_CUDA_CHECK_LAUNCH();
}

// The backward into rows [v0, v1) of dwte (none when v1 <= v0) and positions from pos0
// (dwpe may be null).
template <class A>
void launch_embedding_backward(const char* fn, float* dwte_rows, int v0, int v1, float* dwpe, int pos0,
                               const A* dout, const int32_t* tokens, int B, int T, int C) {
  if (!check_shape(fn, B, T, C)) return;
  require_pointer(dout, fn, "dout");
  require_pointer(tokens, fn, "tokens");
  if (v1 > v0) require_pointer(dwte_rows, fn, "dwte");
  using D = DeviceType<A>;
  constexpr int K = kPack<D>;
  const int packs_per_row = (C + K - 1) / K;
  const int N = B * T;

  if (dwpe) {
    const bool vec_pos = C % K == 0 && aligned16(dwpe) && aligned16(dout);
    dwpe_kernel<D><<<blocks_for(size_t(T) * packs_per_row, kThreads), kThreads>>>(
        dwpe, device_ptr(dout), pos0, B, T, C, packs_per_row, vec_pos);
    GPT_CUDA_CHECK_LAUNCH();
  }
  if (v1 <= v0) return;

  const SortedTokens sorted = sort_by_token(tokens, N);
  const bool vec_tok = C % K == 0 && aligned16(dwte_rows) && aligned16(dout);
  const dim3 block(32, kRunWarps);
  const dim3 grid(blocks_for(size_t(N), kRunWarps), blocks_for(size_t(packs_per_row), 32));
  if (grid.y > 65535) throw std::invalid_argument(std::string(fn) + ": C = " + std::to_string(C) + " is too large");
  dwte_kernel<D><<<grid, block>>>(dwte_rows, v0, v1, device_ptr(dout), sorted.tokens, sorted.positions, N, C,
                                  vec_tok);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class A>
void embedding_forward(A* out, const int32_t* tokens, const A* wte, const A* wpe, int B, int T, int C) {
  require_pointer(wte, "embedding_forward", "wte");
  require_pointer(wpe, "embedding_forward", "wpe");
  launch_embedding_forward("embedding_forward", out, tokens, wte, 0, INT_MAX, wpe, 0, B, T, C);
}

template <class A>
void embedding_backward(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int B, int T,
                        int C) {
  require_pointer(dwte, "embedding_backward", "dwte");
  require_pointer(dwpe, "embedding_backward", "dwpe");
  launch_embedding_backward("embedding_backward", dwte, 0, INT_MAX, dwpe, 0, dout, tokens, B, T, C);
}

template <class A>
void embedding_range_forward(A* out, const int32_t* tokens, const A* wte_rows, int v0, int v1, const A* wpe,
                             int pos0, int B, int T, int C) {
  check_range("embedding_range_forward", v0, v1, pos0);
  launch_embedding_forward("embedding_range_forward", out, tokens, wte_rows, v0, v1, wpe, pos0, B, T, C);
}

template <class A>
void embedding_range_backward(float* dwte_rows, float* dwpe, const A* dout, const int32_t* tokens, int v0, int v1,
                              int pos0, int B, int T, int C) {
  check_range("embedding_range_backward", v0, v1, pos0);
  launch_embedding_backward("embedding_range_backward", dwte_rows, v0, v1, dwpe, pos0, dout, tokens, B, T, C);
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int);
template void embedding_forward<gpt::bf16>(gpt::bf16*, const int32_t*, const gpt::bf16*, const gpt::bf16*,
                                           int, int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void embedding_backward<gpt::bf16>(float*, float*, const gpt::bf16*, const int32_t*, int, int,
                                            int);
template void embedding_range_forward<float>(float*, const int32_t*, const float*, int, int, const float*, int, int,
                                             int, int);
template void embedding_range_forward<gpt::bf16>(gpt::bf16*, const int32_t*, const gpt::bf16*, int, int,
                                                 const gpt::bf16*, int, int, int, int);
template void embedding_range_backward<float>(float*, float*, const float*, const int32_t*, int, int, int, int, int,
                                              int);
template void embedding_range_backward<gpt::bf16>(float*, float*, const gpt::bf16*, const int32_t*, int, int, int,
                                                  int, int, int);

}  // namespace gpt::cuda
