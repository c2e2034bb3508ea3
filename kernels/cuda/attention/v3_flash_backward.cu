// Attention v3: flash backward. What it adds: the backward of v2 without the (T, T)
// matrices. The probabilities are recomputed tile by tile from the logsumexp L that
// the forward saved, instead of being stored:
//   P[t,u]  = exp(scale * q_t . k_u - L_t)                 (u <= t, else 0)
//   dP[t,u] = dy_t . v_u
//   dS[t,u] = P[t,u] (dP[t,u] - D_t)
//   dv_u = sum_t P[t,u] dy_t;   dk_u = scale sum_t dS[t,u] q_t;   dq_t = scale sum_u dS[t,u] k_u
// where the softmax Jacobian's row term is computed once per row from the outputs:
//   D_t = sum_u P[t,u] dP[t,u] = dy_t . (sum_u P[t,u] v_u) = dy_t . y_t     (dsum kernel)
//
// Three kernels, each output element written by one thread in a fixed order (no
// atomics, so the result is the same on every run):
//   1. dsum:  one warp per row, D_t = dy_t . y_t (attention/common.cuh, shared with v4).
//   2. dkdv:  a block per key tile [k0, k0+32) of one (b, h); it walks over the query
//             tiles that can see those keys (those at or after the diagonal: t >= u)
//             and accumulates dk and dv in registers.
//   3. dq:    a block per query tile; it walks over the key tiles at or before the
//             diagonal and accumulates dq in registers.
// dq could be added from the dkdv blocks with atomics (one pass), but the order of
// float atomic additions changes from run to run and so would the result; the price
// of determinism is recomputing P and dP a second time in kernel 3.
//
// Work split, as in v2: warp w owns R rows of the block's own tile (keys in dkdv,
// queries in dq); lane i owns row i of the tile being walked over and output
// columns i, i+32, ...; values move between lanes by shuffles.
#include <cmath>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/common.cuh"

namespace gpt::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 8;                 // R
constexpr int kTile = kWarps * kRowsPerWarp;    // 32 rows: the block's own tile
static_assert(kTile == 32, "the walked-over tile has one row per lane");

// Shared memory, in floats, for both kernels: two tiles indexed by warp rows (read by
// broadcast, no padding) and two indexed by lane (row stride HS+1: 32 lanes, 32 banks).
template <int HS>
constexpr size_t smem_floats() {
  return 2 * size_t(kTile) * HS + 2 * size_t(kTile) * (HS + 1);
}

// Grid (ceil(T/32), B*NH). The block owns keys u = k0 + w*R + r (warp w, r < R); in
// each query tile lane i is the query t = q0 + i.
template <class T, int HS>
__global__ void __launch_bounds__(kWarps * 32)
    dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* dsum, int T_,
                int C, int NH, float scale) {
  constexpr int R = kRowsPerWarp;
  constexpr int kCols = HS / 32;
  constexpr int kPad = HS + 1;
  extern __shared__ float smem[];
  float* Ks = smem;                // keys of the block, by warp row
  float* Vs = Ks + kTile * HS;
  float* Qs = Vs + kTile * HS;     // queries of the current tile, by lane
  float* dYs = Qs + kTile * kPad;  // their output gradients, by lane

  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int k0 = blockIdx.x * kTile;  // tile 0 has the most query tiles to visit: it starts first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t qkv_stride = 3 * size_t(C), out_stride = size_t(C);

  load_tile<HS>(Ks, HS, qkv + qkv_at(b, k0, 1, h, T_, C, HS), qkv_stride, kTile, T_ - k0);
  load_tile<HS>(Vs, HS, qkv + qkv_at(b, k0, 2, h, T_, C, HS), qkv_stride, kTile, T_ - k0);

  float dk[R][kCols], dv[R][kCols];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kCols; ++j) dk[r][j] = dv[r][j] = 0.0f;

  // Causal: queries t < k0 see none of these keys. Tiles are aligned (k0 is a multiple
  // of 32), so the first query tile to visit starts at q0 = k0.
  for (int q0 = k0; q0 < T_; q0 += kTile) {
    __syncthreads();  // the previous query tile is consumed (and K, V are loaded)
    load_tile<HS>(Qs, kPad, qkv + qkv_at(b, q0, 0, h, T_, C, HS), qkv_stride, kTile, T_ - q0);
    load_tile<HS>(dYs, kPad, dout + out_at(b, q0, h, T_, C, HS), out_stride, kTile, T_ - q0);
    __syncthreads();

    const int t = q0 + lane;
    const bool t_valid = t < T_;
    const float L = t_valid ? lse[size_t(bh) * T_ + t] : 0.0f;  // 32 consecutive floats: coalesced
    const float D = t_valid ? dsum[size_t(bh) * T_ + t] : 0.0f;

    // s = q_t . k_u and dp = dy_t . v_u for this lane's query and the warp's R keys.
    float s[R], dp[R];
    for (int r = 0; r < R; ++r) s[r] = dp[r] = 0.0f;
    for (int d = 0; d < HS; ++d) {
      const float qd = Qs[lane * kPad + d], dyd = dYs[lane * kPad + d];
      for (int r = 0; r < R; ++r) {
        s[r] += Ks[(warp * R + r) * HS + d] * qd;
        dp[r] += Vs[(warp * R + r) * HS + d] * dyd;
      }
    }
    // p = P[t,u] recomputed; ds = dS[t,u]. Masked pairs (u > t, or t past the end) give 0,
    // which also keeps keys past the end (u >= T > t) out of every sum.
    float p[R], ds[R];
    for (int r = 0; r < R; ++r) {
      const int u = k0 + warp * R + r;
      p[r] = (t_valid && u <= t) ? expf(s[r] * scale - L) : 0.0f;
      ds[r] = p[r] * (dp[r] - D);
    }
    // dv_u += sum_i P[q0+i, u] dy_{q0+i};  dk_u += sum_i dS[q0+i, u] q_{q0+i}  (scale at the end)
    for (int i = 0; i < kTile; ++i) {
      for (int r = 0; r < R; ++r) {
        const float pi = __shfl_sync(kFullMask, p[r], i);
        const float dsi = __shfl_sync(kFullMask, ds[r], i);
        for (int j = 0; j < kCols; ++j) {
          dv[r][j] += pi * dYs[i * kPad + lane + 32 * j];
          dk[r][j] += dsi * Qs[i * kPad + lane + 32 * j];
        }
      }
    }
  }

  for (int r = 0; r < R; ++r) {
    const int u = k0 + warp * R + r;
    if (u >= T_) continue;
    T* dkp = dqkv + qkv_at(b, u, 1, h, T_, C, HS);
    T* dvp = dqkv + qkv_at(b, u, 2, h, T_, C, HS);
    for (int j = 0; j < kCols; ++j) {
      add_to(&dkp[lane + 32 * j], dk[r][j] * scale);
      add_to(&dvp[lane + 32 * j], dv[r][j]);
    }
  }
}

// Grid (ceil(T/32), B*NH). The block owns queries t = q0 + w*R + r; in each key tile
// lane i is the key u = k0 + i.
template <class T, int HS>
__global__ void __launch_bounds__(kWarps * 32)
    dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* dsum, int T_, int C,
              int NH, float scale) {
  constexpr int R = kRowsPerWarp;
  constexpr int kCols = HS / 32;
  constexpr int kPad = HS + 1;
  extern __shared__ float smem[];
  float* Qs = smem;                // queries of the block, by warp row
  float* dYs = Qs + kTile * HS;
  float* Ks = dYs + kTile * HS;    // keys of the current tile, by lane
  float* Vs = Ks + kTile * kPad;

  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;  // heaviest (last) query tiles first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t qkv_stride = 3 * size_t(C), out_stride = size_t(C);

  load_tile<HS>(Qs, HS, qkv + qkv_at(b, q0, 0, h, T_, C, HS), qkv_stride, kTile, T_ - q0);
  load_tile<HS>(dYs, HS, dout + out_at(b, q0, h, T_, C, HS), out_stride, kTile, T_ - q0);

  float L[R], D[R], dq[R][kCols];
  for (int r = 0; r < R; ++r) {
    const int t = min(q0 + warp * R + r, T_ - 1);  // rows past the end: any valid row, never written
    L[r] = lse[size_t(bh) * T_ + t];
    D[r] = dsum[size_t(bh) * T_ + t];
    for (int j = 0; j < kCols; ++j) dq[r][j] = 0.0f;
  }

  const int last_query = min(q0 + kTile, T_) - 1;
  for (int k0 = 0; k0 <= last_query; k0 += kTile) {  // causal: later key tiles skipped
    __syncthreads();
    load_tile<HS>(Ks, kPad, qkv + qkv_at(b, k0, 1, h, T_, C, HS), qkv_stride, kTile, T_ - k0);
    load_tile<HS>(Vs, kPad, qkv + qkv_at(b, k0, 2, h, T_, C, HS), qkv_stride, kTile, T_ - k0);
    __syncthreads();

    float s[R], dp[R];
    for (int r = 0; r < R; ++r) s[r] = dp[r] = 0.0f;
    for (int d = 0; d < HS; ++d) {
      const float kd = Ks[lane * kPad + d], vd = Vs[lane * kPad + d];
      for (int r = 0; r < R; ++r) {
        s[r] += Qs[(warp * R + r) * HS + d] * kd;
        dp[r] += dYs[(warp * R + r) * HS + d] * vd;
      }
    }
    const int u = k0 + lane;
    float ds[R];
    for (int r = 0; r < R; ++r) {
      const int t = q0 + warp * R + r;
      const float p = (u <= t && u < T_) ? expf(s[r] * scale - L[r]) : 0.0f;
      ds[r] = p * (dp[r] - D[r]);
    }
    // dq_t += sum_i dS[t, k0+i] k_{k0+i}  (scale at the end); dS of key i is in lane i.
    for (int i = 0; i < kTile; ++i) {
      for (int r = 0; r < R; ++r) {
        const float dsi = __shfl_sync(kFullMask, ds[r], i);
        for (int j = 0; j < kCols; ++j) dq[r][j] += dsi * Ks[i * kPad + lane + 32 * j];
      }
    }
  }

  for (int r = 0; r < R; ++r) {
    const int t = q0 + warp * R + r;
    if (t >= T_) continue;
    T* dqp = dqkv + qkv_at(b, t, 0, h, T_, C, HS);
    for (int j = 0; j < kCols; ++j) add_to(&dqp[lane + 32 * j], dq[r][j] * scale);
  }
}

template <class T, int HS>
void launch(T* dqkv, float* dsum, const T* dout, const T* qkv, const T* out, const float* lse, int B,
            int T_, int C, int NH, cudaStream_t stream) {
  const float scale = 1.0f / std::sqrt(float(HS));
  launch_dsum(dsum, dout, out, B, T_, C, NH, stream);

  // HS = 128 needs 64.3 KiB of shared memory: above the 48 KiB a kernel gets unasked.
  const size_t smem = smem_floats<HS>() * sizeof(float);
  GPT_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<T, HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)));
  GPT_CUDA_CHECK(cudaFuncSetAttribute(dq_kernel<T, HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)));
  const dim3 grid(ceil_div(T_, kTile), unsigned(B * NH));
  dkdv_kernel<T, HS><<<grid, kWarps * 32, smem, stream>>>(dqkv, dout, qkv, lse, dsum, T_, C, NH, scale);
  GPT_CUDA_CHECK_LAUNCH();
  dq_kernel<T, HS><<<grid, kWarps * 32, smem, stream>>>(dqkv, dout, qkv, lse, dsum, T_, C, NH, scale);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void attention_backward_v3(T* dqkv, float* dsum, const T* dout, const T* qkv, const T* out,
                           const float* lse, int B, int T_, int C, int NH, cudaStream_t stream) {
  const int hs = attention_head_size("attention_backward_v3", B, T_, C, NH, false);
  if (hs == 64)
    launch<T, 64>(dqkv, dsum, dout, qkv, out, lse, B, T_, C, NH, stream);
  else
    launch<T, 128>(dqkv, dsum, dout, qkv, out, lse, B, T_, C, NH, stream);
}

template void attention_backward_v3<float>(float*, float*, const float*, const float*, const float*,
                                           const float*, int, int, int, int, cudaStream_t);
template void attention_backward_v3<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                                   const __nv_bfloat16*, const __nv_bfloat16*, const float*,
                                                   int, int, int, int, cudaStream_t);

}  // namespace gpt::cuda
