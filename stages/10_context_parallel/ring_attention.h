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
//
// Precision. The blocks are computed, merged and accumulated in G (fp32 for bf16 storage):
// with A = bf16 the keys and values travel as bf16 (half the bytes) and are widened where
// they arrive, this rank's q, out and dout are widened once, the merged output and the
// gradients are rounded to bf16 once at the end, and dK, dV travel in fp32, since each
// rank on the ring adds to them (rounding at every hop would round cp times). The
// attention arithmetic is then what stage 01's is: fp32 with one rounding of what it
// stores.
#pragma once
#include <cstdint>

#include "common/comm.h"
#include "common/comm_counter.h"
#include "common/device_array.h"
#include "stages/06_tensor_parallel/tp_hooks.h"
#include "stages/10_context_parallel/context_split.h"

namespace gpt {

// One step's ring messages on a rank, as a CountingCommunicator around the cp group counts
// them (an isend and an irecv each count their payload), in each of `layers` attention
// layers of each of `micro_steps` micro-batches: forward cp - 1 hops of the block's k | v,
// backward cp - 1 hops of k | v and cp hops of dK | dV, each hop a send and a receive of
// 2 width x tokens values (width = C / tp, tokens = B T / cp this rank's own):
//     calls = 2 (3 cp - 2) L m,   bytes = 2 width tokens L m (4 (cp - 1) a + 2 cp 4)
// with a the bytes of the activations' type (k and v travel in it, dK and dV in fp32).
// With `forwards` = 2 (stage 11's full activation checkpointing: each block's forward runs
// again before its backward) the forward's hops come twice. Nothing at cp = 1.
CommTally ring_attention_traffic(int cp, int layers, int micro_steps, int width, int64_t tokens, DType activations,
                                 int forwards = 1);

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
  // The block that arrived (kv_) in G: kv_ itself, or its widened copy.
  const G* block_kv(Device d);
  // Posts the ring step's messages: `send` to rank r + 1, `recv` from rank r - 1.
  template <class T>
  void exchange(std::vector<Request>& reqs, const T* send, T* recv, size_t count, int tag);

  Communicator& cp_;
  const ContextSplit& split_;
  DeviceArray<A> kv_, kv_next_;     // (rows, 2W): the block's k | v as it travels
  DeviceArray<G> kv_wide_;          // (A = bf16) the block widened to fp32
  DeviceArray<G> dkv_, dkv_next_;   // (rows, 2W): the block's dK | dV, accumulated on the ring
  DeviceArray<G> block_out_;        // one block's output (Tc, W)
  DeviceArray<G> block_lse_;        // and logsumexps (heads, Tc)
  DeviceArray<G> qkv_wide_, out_wide_, dout_wide_, dqkv_wide_;  // (A = bf16) this rank's rows in fp32
  int64_t pairs_ = 0;
};

}  // namespace gpt
