// Ring attention; see ring_attention.h.
#include "stages/10_context_parallel/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common/device_array.h"
#include "common/memory.h"
#include "common/trace.h"
#include "kernels/attention_view.h"
#include "kernels/ops.h"

namespace gpt {

namespace {
// Message tags: a block's keys and values in forward, in backward, and its dK, dV. Any
// three distinct values would do: the ring sends on the cp communicator, which carries
// nothing else (the pipeline's tags are on its own pp communicator).
constexpr int kTagKvForward = 10, kTagKvBackward = 11, kTagDkv = 12;

// One block of the ring: the Tc queries of qkv's rows from q_row against the Tc keys and
// values of kv's rows from k_row (kv: k | v, 2W a row), at their sequence positions.
template <class G>
AttentionView<G> block_view(const G* qkv, const G* kv, size_t q_row, size_t k_row, int W, int Tc, int heads,
                             int q_pos, int k_pos) {
  return {.q = qkv + q_row * 3 * W, .k = kv + k_row * 2 * W, .v = kv + k_row * 2 * W + W,
          .q_stride = size_t(3 * W), .kv_stride = size_t(2 * W), .out_stride = size_t(W),
          .B = 1, .Tq = Tc, .Tk = Tc, .NH = heads, .hs = W / heads, .q_pos0 = q_pos, .k_pos0 = k_pos};
}

template <class T>
void ensure(DeviceArray<T>& a, size_t n, Device d) {
  if (a.size() != n) {
    const MemScope scope(MemKind::Buffers);  // the ring's message and compute buffers
    a = DeviceArray<T>(d, n);
  }
}

// x[0..n) in G, to read: x itself when A is G, else widened (exactly) into `wide`.
template <class G, class A>
const G* widened(Device d, const A* x, size_t n, DeviceArray<G>& wide) {
  if constexpr (std::is_same_v<A, G>) {
    (void)d, (void)n, (void)wide;
    return x;
  } else {
    ensure(wide, n, d);
    ops::convert_to_float(d, wide.data(), x, n);
    return wide.data();
  }
}

// x[0..n) in G, to write: x itself when A is G, else `wide`, holding x's values widened
// when `keep` (an accumulation goes on from them); narrow_into writes it back.
template <class G, class A>
G* working_copy(Device d, A* x, size_t n, DeviceArray<G>& wide, bool keep) {
  if constexpr (std::is_same_v<A, G>) {
    (void)d, (void)n, (void)wide, (void)keep;
    return x;
  } else {
    ensure(wide, n, d);
    if (keep) ops::convert_to_float(d, wide.data(), x, n);
    return wide.data();
  }
}

// The G values computed into `wide` written to x[0..n): rounded once to bf16 when A is
// bf16; nothing to do when they were computed in x itself.
template <class G, class A>
void narrow_into(Device d, A* x, const G* wide, size_t n) {
  if constexpr (!std::is_same_v<A, G>) ops::convert_to_bf16(d, x, wide, n);
  (void)d, (void)x, (void)wide, (void)n;
}
}  // namespace

template <class A>
void RingAttentionHooks<A>::pack_kv(Device d, const A* qkv, size_t rows, int W) {
  // Columns [W, 3W) of each qkv row (k | v) side by side: the block that travels.
  device_copy_2d(d, kv_.data(), size_t(2 * W) * sizeof(A), qkv + W, size_t(3 * W) * sizeof(A),
                 size_t(2 * W) * sizeof(A), rows);
}

template <class A>
const GradOf<A>* RingAttentionHooks<A>::block_kv(Device d) {
  return widened(d, kv_.data(), kv_.size(), kv_wide_);
}

CommTally ring_attention_traffic(int cp, int layers, int micro_steps, int width, int64_t tokens, DType activations,
                                 int forwards) {
  CommTally traffic;
  if (cp == 1) return traffic;  // no hop: the block a rank computes on is its own
  const int64_t passes = int64_t(layers) * micro_steps, message = 2 * int64_t(width) * tokens;
  const int64_t kv_hops = (forwards + 1) * int64_t(cp - 1), dkv_hops = cp;  // the forwards' and backward's; backward
  traffic.calls[size_t(CommOp::PointToPoint)] = passes * 2 * (kv_hops + dkv_hops);
  traffic.bytes[size_t(CommOp::PointToPoint)] =
      passes * 2 * message * (kv_hops * int64_t(dtype_size(activations)) + dkv_hops * int64_t(sizeof(float)));
  return traffic;
}

template <class A>
template <class T>
void RingAttentionHooks<A>::exchange(std::vector<Request>& reqs, const T* send, T* recv, size_t count, int tag) {
  const int cp_size = cp_.size(), cp_rank = cp_.rank();
  reqs.push_back(cp_.irecv(recv, count, dtype_of<T>(), (cp_rank + cp_size - 1) % cp_size, tag));
  reqs.push_back(cp_.isend(send, count, dtype_of<T>(), (cp_rank + 1) % cp_size, tag));
}

template <class A>
void RingAttentionHooks<A>::attention_forward(const PieceContext& ctx, A* out, G* lse, const A* qkv, int B, int T,
                                              int W, int heads) {
  const int cp_size = cp_.size(), cp_rank = cp_.rank(), hs = W / heads;
  const int Tc = split_.chunk_len(), chunks_per_rank = split_.chunks();
  const size_t rows = size_t(B) * T, block = rows * 2 * W;
  const Device d = ctx.device;
  ensure(kv_, block, d), ensure(kv_next_, block, d);
  ensure(block_out_, size_t(Tc) * W, d), ensure(block_lse_, size_t(heads) * Tc, d);
  pack_kv(d, qkv, rows, W);
  const G* q = widened(d, qkv, rows * 3 * W, qkv_wide_);  // this rank's q (k, v) in G
  G* merged = working_copy(d, out, rows * W, out_wide_, /*keep=*/false);  // the merged output, in G
  device_zero(d, merged, rows * W * sizeof(G));
  // No keys yet: L = -inf everywhere, so the first merge takes the first block whole.
  const std::vector<G> no_keys(size_t(B) * chunks_per_rank * heads * Tc, G(-INFINITY));
  device_copy(d, lse, Device::CPU, no_keys.data(), no_keys.size() * sizeof(G));
  for (int step = 0; step < cp_size; ++step) {
    const int owner = (cp_rank - step + cp_size) % cp_size;  // whose keys and values this rank holds now
    std::vector<Request> reqs;
    if (step < cp_size - 1) {  // the next block travels while this one is computed
      Span span("ring_kv_post", "comm");
      exchange(reqs, kv_.data(), kv_next_.data(), block, kTagKvForward);
    }
    {
      Span span("ring_attention_block");
      const G* kv = block_kv(d);
      for (int b = 0; b < B; ++b)
        for (int qc = 0; qc < chunks_per_rank; ++qc)
          for (int kc = 0; kc < chunks_per_rank; ++kc) {
            const int q_pos = split_.chunk_start(cp_rank, qc), k_pos = split_.chunk_start(owner, kc);
            if (k_pos > q_pos + Tc - 1) continue;  // every key after every query: masked
            pairs_ += ContextSplit::visible_pairs(q_pos, k_pos, Tc);
            const size_t q_row = size_t(b) * T + size_t(qc) * Tc, k_row = size_t(b) * T + size_t(kc) * Tc;
            const AttentionView<G> view = block_view(q, kv, q_row, k_row, W, Tc, heads, q_pos, k_pos);
            ops::attention_block_forward(ctx.device, view, block_out_.data(), block_lse_.data());
            G* row_lse = lse + (size_t(b) * chunks_per_rank + qc) * heads * Tc;
            for (int h = 0; h < heads; ++h)  // merge head h's rows through the logsumexps
              ops::attention_merge(ctx.device, merged + q_row * W + size_t(h) * hs, row_lse + size_t(h) * Tc,
                                   size_t(W), block_out_.data() + size_t(h) * hs,
                                   block_lse_.data() + size_t(h) * Tc, size_t(W), size_t(Tc), hs);
          }
    }
    if (step < cp_size - 1) {
      Span span("ring_kv_wait", "comm");
      cp_.wait_all(reqs);
      std::swap(kv_, kv_next_);
    }
  }
  narrow_into(d, out, merged, rows * W);
}

template <class A>
void RingAttentionHooks<A>::attention_backward(const PieceContext& ctx, A* dqkv, const A* dout, const A* qkv,
                                               const A* out, const G* lse, int B, int T, int W, int heads) {
  const int cp_size = cp_.size(), cp_rank = cp_.rank();
  const int Tc = split_.chunk_len(), chunks_per_rank = split_.chunks();
  const size_t rows = size_t(B) * T, block = rows * 2 * W;
  const Device d = ctx.device;
  ensure(kv_, block, d), ensure(kv_next_, block, d), ensure(dkv_, block, d), ensure(dkv_next_, block, d);
  pack_kv(d, qkv, rows, W);
  const G* q = widened(d, qkv, rows * 3 * W, qkv_wide_);
  const G* o = widened(d, out, rows * W, out_wide_);
  const G* d_o = widened(d, dout, rows * W, dout_wide_);
  G* dq = working_copy(d, dqkv, rows * 3 * W, dqkv_wide_, /*keep=*/true);  // accumulates onto dqkv's values
  dkv_.zero();
  for (int step = 0; step < cp_size; ++step) {
    const int owner = (cp_rank - step + cp_size) % cp_size;
    std::vector<Request> kv_reqs;
    if (step < cp_size - 1) {
      Span span("ring_kv_post", "comm");
      exchange(kv_reqs, kv_.data(), kv_next_.data(), block, kTagKvBackward);
    }
    {
      Span span("ring_attention_block_backward");
      const G* kv = block_kv(d);
      for (int b = 0; b < B; ++b)
        for (int qc = 0; qc < chunks_per_rank; ++qc)
          for (int kc = 0; kc < chunks_per_rank; ++kc) {
            const int q_pos = split_.chunk_start(cp_rank, qc), k_pos = split_.chunk_start(owner, kc);
            if (k_pos > q_pos + Tc - 1) continue;
            const size_t q_row = size_t(b) * T + size_t(qc) * Tc, k_row = size_t(b) * T + size_t(kc) * Tc;
            const AttentionView<G> view = block_view(q, kv, q_row, k_row, W, Tc, heads, q_pos, k_pos);
            G* dk = dkv_.data() + k_row * 2 * W;
            ops::attention_block_backward(ctx.device, view, dq + q_row * 3 * W, dk, dk + W, d_o + q_row * W,
                                          o + q_row * W, lse + (size_t(b) * chunks_per_rank + qc) * heads * Tc);
          }
    }
    if (cp_size > 1) {  // the block's dK, dV follow its keys to the next rank; the last hop takes them home
      Span span("ring_dkv", "comm");
      std::vector<Request> reqs;
      exchange(reqs, dkv_.data(), dkv_next_.data(), block, kTagDkv);
      cp_.wait_all(reqs);
      std::swap(dkv_, dkv_next_);
    }
    if (step < cp_size - 1) {
      Span span("ring_kv_wait", "comm");
      cp_.wait_all(kv_reqs);
      std::swap(kv_, kv_next_);
    }
  }
  // dkv_ now holds this rank's own keys' and values' gradient from every rank's queries:
  // the k | v columns of dq side by side (dkv_next_ is free now), the sum, and back.
  const size_t pitch = size_t(3 * W) * sizeof(G), band = size_t(2 * W) * sizeof(G);
  device_copy_2d(d, dkv_next_.data(), band, dq + W, pitch, band, rows);
  ops::residual_forward(d, dkv_next_.data(), dkv_next_.data(), dkv_.data(), block);
  device_copy_2d(d, dq + W, pitch, dkv_next_.data(), band, band, rows);
  narrow_into(d, dqkv, dq, rows * 3 * W);
}

template class RingAttentionHooks<float>;
template class RingAttentionHooks<double>;
template class RingAttentionHooks<bf16>;

}  // namespace gpt
