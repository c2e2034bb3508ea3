/// @file
/// A view of one attention problem, the same on the CPU and the GPU.
#pragma once
#include <cstddef>

namespace gpt {

/// One attention problem in its general form: for every sequence b and head h, queries
/// at positions q_pos0 + t (t < Tq) attend to keys and values at positions k_pos0 + u
/// (u < Tk); a query sees the keys at or before its own position (the causal mask, by
/// position). With Tq = Tk and equal offsets this is ordinary causal self-attention; with
/// a key block from elsewhere in the sequence it is one piece of a larger attention
/// (context parallelism: keys and values arrive from other ranks in blocks), and the
/// pieces merge exactly through their logsumexps (cpu::flash_attention_merge,
/// cuda::attention_merge).
/// Element i of head h at row (b, t) is at q[(b*Tq + t)*q_stride + h*hs + i] (likewise k
/// and v with kv_stride over Tk rows, out and dout with out_stride over Tq rows), so the
/// three thirds of a fused (B,T,3C) qkv buffer are views with stride 3C.
template <class T>
struct AttentionView {
  const T* q;
  const T* k;
  const T* v;
  size_t q_stride, kv_stride, out_stride;
  int B, Tq, Tk, NH, hs;
  int q_pos0 = 0, k_pos0 = 0;
};

}  // namespace gpt
