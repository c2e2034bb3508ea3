// Attention v2: flash forward. What it adds to v1: the (T, T) score matrix never
// exists. A thread block owns a tile of Br queries of one (batch, head); it walks over
// the keys in tiles of Bc rows, staged in shared memory, and keeps for each query row
// only a running max m, a running sum l and an unnormalised output accumulator acc.
//
// Online softmax (Milakov & Gimelshein 2018; Dao et al. 2022). For query t and the
// next key tile j with scores s_u = scale * q_t . k_u:
//   m'  = max(m, max_u s_u)
//   c   = exp(m - m')                      rescales what was summed under the old max
//   p_u = exp(s_u - m')
//   l'  = c * l + sum_u p_u
//   acc' = c * acc + sum_u p_u v_u
// After the last tile, y_t = acc / l, which is softmax(s) v exactly: every term was
// computed relative to the same final max, because each rescale multiplies the old
// terms by exp(m_old - m_new). The logsumexp L_t = m + log(l) is saved (B,NH,T) fp32:
// the backward recomputes P[t,u] = exp(s_tu - L_t) from it (v3).
//
// Causal: a query tile [q0, q0+Br) needs key tiles starting at k0 <= q0+Br-1 only;
// later tiles are skipped entirely, and the diagonal tile masks u > t one by one.
//
// Work split (no tensor cores yet: that is v4). A block has kWarps warps; warp w owns
// query rows w*R .. w*R+R-1 of the tile (R = kRowsPerWarp). Within a key tile of
// Bc = 32 keys, lane i owns key k0+i for the scores and output columns i, i+32, ... for
// the accumulator. Probabilities move from the key's lane to all lanes by shuffles.
//
// Memory: reads q, k, v once per (query tile, key tile) pair and writes out once;
// O(B*NH*T) extra memory (the logsumexp) instead of O(B*NH*T*T).
#include <cmath>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/common.cuh"

namespace gpt::cuda {
namespace {

constexpr int kWarps = 4;                      // warps per block
constexpr int kRowsPerWarp = 8;                // query rows per warp (R)
constexpr int kBr = kWarps * kRowsPerWarp;     // 32 query rows per block
constexpr int kBc = 32;                        // 32 keys per tile: one per lane

// Shared memory, in floats: Q (Br x HS) | K (Bc x (HS+1)) | V (Bc x HS).
// Lane i reads K row i at column d: with a row stride of HS+1 (not a multiple of 32
// banks) the 32 lanes hit 32 different banks. Q is read at one address per warp (a
// broadcast) and V along a row (consecutive addresses), so neither needs padding.
template <int HS>
constexpr size_t smem_floats() {
  return size_t(kBr) * HS + size_t(kBc) * (HS + 1) + size_t(kBc) * HS;
}

template <class T, int HS>
__global__ void __launch_bounds__(kWarps * 32)
    flash_forward_kernel(T* out, float* lse, const T* qkv, int T_, int C, int NH, float scale) {
  constexpr int R = kRowsPerWarp;
  constexpr int kCols = HS / 32;  // output columns per lane: lane + 32*j
  constexpr int kPad = HS + 1;    // K row stride
  extern __shared__ float smem[];
  float* Qs = smem;
  float* Ks = Qs + kBr * HS;
  float* Vs = Ks + kBc * kPad;

  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  // Causal work grows with the query position: start the heaviest tiles first, so the
  // last wave of blocks is made of short ones.
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBr;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t row_stride = 3 * size_t(C);

  // Q tile, rows past T zero-filled (their results are computed but never written).
  load_tile<HS>(Qs, HS, qkv + qkv_at(b, q0, 0, h, T_, C, C / NH), row_stride, kBr, T_ - q0);

  float m[R], l[R], acc[R][kCols];
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int j = 0; j < kCols; ++j) acc[r][j] = 0.0f;
  }

  const int last_query = min(q0 + kBr, T_) - 1;
  for (int k0 = 0; k0 <= last_query; k0 += kBc) {  // causal: later key tiles skipped
    __syncthreads();  // everyone is done with the previous K, V tile (and Q is loaded)
    load_tile<HS>(Ks, kPad, qkv + qkv_at(b, k0, 1, h, T_, C, C / NH), row_stride, kBc, T_ - k0);
    load_tile<HS>(Vs, HS, qkv + qkv_at(b, k0, 2, h, T_, C, C / NH), row_stride, kBc, T_ - k0);
    __syncthreads();

    // Scores of this lane's key u against the warp's R queries.
    float s[R];
    for (int r = 0; r < R; ++r) s[r] = 0.0f;
    for (int d = 0; d < HS; ++d) {
      const float kd = Ks[lane * kPad + d];
      for (int r = 0; r < R; ++r) s[r] += Qs[(warp * R + r) * HS + d] * kd;
    }

    const int u = k0 + lane;
    for (int r = 0; r < R; ++r) {
      const int t = q0 + warp * R + r;
      s[r] = (u <= t && u < T_) ? s[r] * scale : -INFINITY;  // causal mask and tail keys
      const float m_new = fmaxf(m[r], warp_max(s[r]));
      // exp(-inf) would be 0 anyway, but -inf - (-inf) is NaN: a row with nothing visible
      // yet (m = -inf) must not poison the accumulator.
      const float p = s[r] == -INFINITY ? 0.0f : expf(s[r] - m_new);
      const float c = m[r] == -INFINITY ? 0.0f : expf(m[r] - m_new);
      l[r] = c * l[r] + warp_sum(p);
      m[r] = m_new;
      for (int j = 0; j < kCols; ++j) acc[r][j] *= c;
      s[r] = p;  // from here on s holds the probabilities (unnormalised)
    }

    // acc[r][j] += sum_i p(row r, key k0+i) * v_{k0+i}[lane + 32j]; p of key i is in lane i.
    for (int i = 0; i < kBc; ++i) {
      for (int r = 0; r < R; ++r) {
        const float p = __shfl_sync(kFullMask, s[r], i);
        for (int j = 0; j < kCols; ++j) acc[r][j] += p * Vs[i * HS + lane + 32 * j];
      }
    }
  }

  // Normalise and write each row once; lane 0 writes the row's logsumexp.
  for (int r = 0; r < R; ++r) {
    const int t = q0 + warp * R + r;
    if (t >= T_) continue;
    const float inv = 1.0f / l[r];
    T* y = out + out_at(b, t, h, T_, C, HS);
    for (int j = 0; j < kCols; ++j) y[lane + 32 * j] = from_float<T>(acc[r][j] * inv);
    if (lane == 0) lse[size_t(bh) * T_ + t] = m[r] + logf(l[r]);
  }
}

template <class T, int HS>
void launch(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, cudaStream_t stream) {
  const float scale = 1.0f / std::sqrt(float(HS));
  const size_t smem = smem_floats<HS>() * sizeof(float);
  // Above 48 KiB of shared memory a kernel must opt in (HS = 128: 48.1 KiB).
  GPT_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<T, HS>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(ceil_div(T_, kBr), unsigned(B * NH));
  flash_forward_kernel<T, HS><<<grid, kWarps * 32, smem, stream>>>(out, lse, qkv, T_, C, NH, scale);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void attention_forward_v2(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH,
                          cudaStream_t stream) {
  const int hs = attention_head_size("attention_forward_v2", B, T_, C, NH, false);
  if (hs == 64)
    launch<T, 64>(out, lse, qkv, B, T_, C, NH, stream);
  else
    launch<T, 128>(out, lse, qkv, B, T_, C, NH, stream);
}

template void attention_forward_v2<float>(float*, float*, const float*, int, int, int, int, cudaStream_t);
template void attention_forward_v2<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, int, int,
                                                  int, int, cudaStream_t);

}  // namespace gpt::cuda
