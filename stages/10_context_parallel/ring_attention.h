// Ring attention (Liu et al., "Ring Attention with Blockwise Transformers", 2023) over
// the chunks of context_split.h: causal attention of the whole sequence while no rank
// holds more than its own keys and values and two blocks of others' (the one it computes
// on and the next, arriving), and in the backward two blocks of their gradients.
//
// Rank r holds the queries, keys and values of its chunks. The keys and values travel
// the cp ranks as a ring: at step s (s = 0 .. cp-1) rank r holds the block of rank
// (r - s) mod cp, computes the attention of its queries to it (one flash-attention
// block per pair of chunks, causal by position: a pair wholly in the future is skipped)
// and, meanwhile, passes the block on to rank r + 1 and receives the next from r - 1.
// The partial outputs over key blocks merge exactly through their logsumexps:
//
//   L = log(e^{L_a} + e^{L_b})        O = e^{L_a - L} O_a + e^{L_b - L} O_b
//
// Backward, given the merged O and L (so each block's P = e^{S - L} is its share of the
// whole softmax and D = dO . O the whole row's): dQ accumulates at home; each block's dK
// and dV are accumulated by every rank it visits and travel with it. At each step a rank
// posts the next block's keys and values before its compute (to overlap) and passes on
// the block's dK, dV after adding its share; both reach the next rank for the next step.
// The keys make cp - 1 hops, the gradients cp: the last takes them home to their owner.
//
// The hooks derive from TensorParallelHooks: with tp > 1 the attention runs on this
// rank's heads (the ring is among the cp ranks that hold the same heads), and the
// linears communicate over tp as in stage 06.
#pragma once
#include <cstdint>

#include "common/comm.h"
#include "common/device_array.h"
#include "stages/06_tensor_parallel/tp_hooks.h"
#include "stages/10_context_parallel/context_split.h"

namespace gpt {

template <class A>
class RingAttentionHooks : public TensorParallelHooks<A> {
 public:
  using G = GradOf<A>;
  RingAttentionHooks(Communicator& tp, bool sequence_parallel, Communicator& cp, const ContextSplit& split,
                     Device device)
      : TensorParallelHooks<A>(tp, sequence_parallel, device), cp_(cp), split_(split) {}

  // qkv: B x T local rows of [q | k | v] (T = the chunks' tokens); lse is kept in this
  // class's own layout (B, chunk, head, Tc), read back only by attention_backward.
  void attention_forward(const PieceContext& ctx, A* out, G* lse, const A* qkv, int B, int T, int width,
                         int heads) override;
  void attention_backward(const PieceContext& ctx, A* dqkv, const A* dout, const A* qkv, const A* out, const G* lse,
                          int B, int T, int width, int heads) override;

  // Visible (query, key) pairs computed by this rank's forwards so far (the work).
  int64_t pairs() const { return pairs_; }

 private:
  void pack_kv(Device d, const A* qkv, size_t rows, int width);
  // Posts the ring step's messages: `send` to rank r + 1, `recv` from rank r - 1.
  void exchange(std::vector<Request>& reqs, const A* send, A* recv, size_t count, int tag);

  Communicator& cp_;
  const ContextSplit& split_;
  DeviceArray<A> kv_, kv_next_, dkv_, dkv_next_;  // (rows, 2W): a block's k | v, its gradient
  DeviceArray<A> block_out_;                       // one block's output (Tc, W)
  DeviceArray<G> block_lse_;                       // and logsumexps (heads, Tc)
  int64_t pairs_ = 0;
};

}  // namespace gpt
