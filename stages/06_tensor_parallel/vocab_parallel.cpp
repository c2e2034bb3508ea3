// The vocabulary-parallel embedding and cross-entropy (Megatron-LM's, with the padded
// vocabulary of this model). Rank r holds rows V_r = [v0, v1) of wte (vocab_range).
//
// Embedding: x0 = wte[token] + wpe[pos] = sum_r (token in V_r ? wte[token] : 0) + wpe[pos]:
// each rank embeds the tokens it holds (zero for the others), rank 0 adds wpe, and the
// sum over ranks is g's reduction (all-reduce, or reduce-scatter under sequence
// parallelism). Backward: every rank takes the whole gradient of x0 and adds row i of
// it to its wte row token_i when it holds that token.
//
// Tied LM head: logits[:, V_r] = ln_f(x) . wte[V_r]^T on the same local rows of wte, so
// the head's gradient and the embedding's add up in the rank's one wte gradient.
//
// Cross-entropy without the full logits on any rank: per row i, over its real columns
// (< V; padding excluded exactly as one device excludes it), rank r computes
//   m_r = max_j z_ij,   s_r = sum_j e^{z_ij - m_r},   t_r = z_i,target if target in V_r else 0
// and then, across ranks,
//   M = max_r m_r,   S = sum_r s_r e^{m_r - M},   t = sum_r t_r,   loss_i = log S - (t - M)
//   d loss_i / d z_ij = e^{z_ij - M} / S - [j = target]        (on each rank's own columns)
// A rank whose range is all padding has m_r = -inf and s_r = 0, so its term is
// 0 * e^{-inf} = 0 (never inf - inf). Communication per row: the tp maxes (an
// all-gather: the communicator sums, it does not take maxima) and one all-reduce of the
// pair (s e^{m - M}, t).
#include <algorithm>
#include <cmath>

#include "common/device_array.h"
#include "common/trace.h"
#include "stages/06_tensor_parallel/tp_hooks.h"

namespace gpt {

template <class A>
void TensorParallelHooks<A>::vocab_reduce(G* row_max, G* row_sumexp, G* target_logit, int rows) {
  Span span("tp_vocab_reduce", "comm");
  if (device_ == Device::CPU) return reduce_stats_on_host(row_max, row_sumexp, target_logit, rows);
  // On the GPU: 3 numbers per row (a few KiB) to the host and back, around the same math.
  const size_t bytes = size_t(rows) * sizeof(G);
  staged_.resize(size_t(rows) * 3);
  G* host_max = staged_.data();
  G* host_sumexp = host_max + rows;
  G* host_target = host_sumexp + rows;
  device_copy(Device::CPU, host_max, device_, row_max, bytes);
  device_copy(Device::CPU, host_sumexp, device_, row_sumexp, bytes);
  device_copy(Device::CPU, host_target, device_, target_logit, bytes);
  reduce_stats_on_host(host_max, host_sumexp, host_target, rows);
  device_copy(device_, row_max, Device::CPU, host_max, bytes);
  device_copy(device_, row_sumexp, Device::CPU, host_sumexp, bytes);
  device_copy(device_, target_logit, Device::CPU, host_target, bytes);
}

template <class A>
void TensorParallelHooks<A>::reduce_stats_on_host(G* row_max, G* row_sumexp, G* target_logit, int rows) {
  const int tp_size = tp_.size();
  const DType t = dtype_of<G>();
  maxes_.resize(size_t(rows) * tp_size);
  tp_.all_gather(row_max, maxes_.data(), size_t(rows), t);
  sums_.resize(size_t(rows) * 2);
  for (int i = 0; i < rows; ++i) {
    G M = -INFINITY;
    for (int rank = 0; rank < tp_size; ++rank) M = std::max(M, maxes_[size_t(rank) * rows + i]);
    const G mine = row_max[i];
    sums_[size_t(i)] = row_sumexp[i] == G(0) ? G(0) : row_sumexp[i] * std::exp(mine - M);
    sums_[size_t(rows) + i] = target_logit[i];
    row_max[i] = M;
  }
  tp_.all_reduce(sums_.data(), sums_.size(), t);
  std::copy(sums_.begin(), sums_.begin() + rows, row_sumexp);
  std::copy(sums_.begin() + rows, sums_.end(), target_logit);
}

template void TensorParallelHooks<float>::vocab_reduce(float*, float*, float*, int);
template void TensorParallelHooks<double>::vocab_reduce(double*, double*, double*, int);
template void TensorParallelHooks<bf16>::vocab_reduce(float*, float*, float*, int);  // G = float

}  // namespace gpt
