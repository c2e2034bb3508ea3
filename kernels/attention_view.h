/// @file
/// A view of one attention problem, the same on the CPU and the GPU.
#pragma once
#include <cstddef>

namespace gpt {

/// The largest head size the GPU's key-block kernels take (kernels/cuda/attention/
/// block_attention.cu: a warp holds a head's row in registers, 4 values a lane). The
/// whole-sequence attention kernels have no such limit.
constexpr int kGpuBlockMaxHeadSize = 128;

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
  const T* q;  ///< the queries: Tq rows per sequence, indexed as above
  const T* k;  ///< the keys: Tk rows per sequence
  const T* v;  ///< the values, laid out as the keys
  /// @var q_stride
  /// elements from one query row to the next
  /// @var kv_stride
  /// elements from one key row (and value row) to the next
  /// @var out_stride
  /// elements from one row of out (and of dout) to the next
  size_t q_stride, kv_stride, out_stride;
  /// @var B
  /// sequences in the batch
  /// @var Tq
  /// query rows per sequence
  /// @var Tk
  /// key and value rows per sequence
  /// @var NH
  /// heads
  /// @var hs
  /// head size: the values of one head in a row
  int B, Tq, Tk, NH, hs;
  /// Position in the sequence of query row 0 (the causal mask compares positions).
  int q_pos0 = 0, k_pos0 = 0;  ///< position in the sequence of key row 0
};

}  // namespace gpt
