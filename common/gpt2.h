// GPT-2 forward and backward on one device: the model's pieces (model_embedding.h,
// model_block.h, model_head.h) composed over the whole model with hooks that do nothing.
//
//   x0 = wte[tokens] + wpe[positions]
//   for each block:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
//   logits = ln_f(x) . wte^T;  loss = mean cross-entropy over the B*T positions
//
// The model owns its compute weights, their gradients and the activations of one
// micro-batch (B sequences of T tokens); the optimizer owns the master weights and
// moments. The template argument A is the storage type of weights and activations:
// float for training (fp32 mode; bf16 mode on the CPU, emulated by rounding), double for
// the ground-truth runs of the tests, bf16 for the bf16 mode on the GPU. Parameter
// gradients are GradOf<A> (fp32 for bf16). Buffers live on the model's device.
#pragma once
#include <cstdint>
#include <vector>

#include "common/bf16.h"
#include "common/config.h"
#include "common/device.h"
#include "common/device_array.h"
#include "common/gpt2_layout.h"
#include "common/model_block.h"
#include "common/model_head.h"
#include "common/model_pieces.h"
#include "common/precision.h"

namespace gpt {

enum class Pass { Forward, Backward };

// Where the model's weights and gradient buffers live, asked for one unit at a time
// (units: see ParamLayout). Stage 01 keeps everything in two flat buffers (FlatStore);
// later stages shard them and gather or reduce a unit around its use.
// The order of calls, which a store may exploit to prefetch:
//   forward:  acquire(0) | acquire(1) .. release(1) | ... | acquire(L+1) release(L+1) | release(0)
//   backward: acquire(0) acquire(L+1) grads(0) grads(L+1) .. done(L+1) release(L+1)
//             | for l = L..1: acquire(l) grads(l) .. release(l) done(l) | done(0) release(0)
// Pointers returned by acquire/grads point at the unit's first element.
template <class A>
class WeightStore {
 public:
  virtual ~WeightStore() = default;
  virtual const A* acquire(int unit, Pass pass) = 0;
  virtual void release(int /*unit*/, Pass /*pass*/) {}
  virtual GradOf<A>* grads(int unit) = 0;
  // The unit's gradient is complete for this backward (accumulated over the micro-batch).
  virtual void grads_done(int /*unit*/) {}
};

// Stage 01's store: the whole model's weights and gradients, flat.
template <class A>
class FlatStore : public WeightStore<A> {
 public:
  FlatStore(const ParamLayout& layout, A* params, GradOf<A>* grads)
      : layout_(&layout), params_(params), grads_(grads) {}
  const A* acquire(int unit, Pass) override { return params_ + layout_->unit(unit).begin; }
  GradOf<A>* grads(int unit) override { return grads_ + layout_->unit(unit).begin; }

 private:
  const ParamLayout* layout_;
  A* params_;
  GradOf<A>* grads_;
};

// How a rank holds the model: all of it (the default), or tensor-parallel rank `rank`
// of `tp`: its heads, hidden units and vocabulary rows (the tensors of
// ParamLayout(model, tp, rank)), with `hooks` joining the slices, and with
// sequence_parallel its 1/tp share of the B*T rows for the elementwise work. Only rank 0
// adds the row-parallel biases and wpe (a sum over ranks must count them once); every
// rank computes their gradients, from the whole gradient it holds there.
//
// Context parallelism gives a rank some chunks of each sequence: `positions` holds the
// position in the whole sequence of each of the seq_len tokens the rank runs (empty: 0,
// 1, ...), and the hooks' attention brings the other chunks' keys and values.
template <class A>
struct ModelSlice {
  int tp = 1, rank = 0;
  bool sequence_parallel = false;
  ModelHooks<A>* hooks = nullptr;  // required when tp > 1
  std::vector<int> positions;      // context parallelism: each local token's position
};

template <class A>
class GPT2 {
  using G = GradOf<A>;


 public:
  // With own_weights false the model allocates no weight or gradient buffers of its
  // own: a store set with set_store() provides them (the ZeRO stages shard them).
  GPT2(const ModelConfig& model, int batch, int seq_len, Device device, Precision precision,
       bool own_weights = true, ModelSlice<A> slice = {});
  GPT2(const GPT2&) = delete;  // the store points into the model
  GPT2& operator=(const GPT2&) = delete;

  const ModelConfig& model() const { return model_; }
  const ParamLayout& layout() const { return layout_; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }
  // Rows of the residual stream this rank holds: B*T, or B*T/tp with sequence parallelism.
  int rows() const { return rows_; }
  const VocabRange& vocab() const { return vocab_; }

  Device device() const { return device_; }

  // The compute weights (in bf16 mode, rounded copies of the fp32 master weights) and
  // the parameter gradients, in the model's device memory.
  DeviceArray<A>& params() { return params_; }
  const DeviceArray<A>& params() const { return params_; }
  DeviceArray<G>& grads() { return grads_; }
  const DeviceArray<G>& grads() const { return grads_; }

  // Sets the weights from (master) values in the model's device memory, rounding to
  // bf16 in bf16 mode.
  void set_params(const G* values);

  // Forward over inputs (B*T token ids, host memory). With targets, returns the mean
  // loss over the B*T positions; without, returns 0 and only the logits are valid.
  G forward(const int32_t* inputs, const int32_t* targets);
  // The mean loss of inputs against targets, for evaluation: forward() without writing
  // the logits' gradient (no backward() may follow). On a GPU that saves a write of
  // B*T*Vp values per batch.
  G evaluate(const int32_t* inputs, const int32_t* targets);

  // Backward of the last forward (which must have had targets), accumulating into
  // grads(): the gradient of  loss_scale * mean loss.  With gradient accumulation over
  // k micro-batches, loss_scale = 1/k gives the gradient of the mean over all of them.
  void backward(G loss_scale);

  void zero_grads();

  // Routes weights and gradients through another store (nullptr: the model's own flat
  // buffers, params() and grads()). The store must outlive its use.
  void set_store(WeightStore<A>* store) { store_ = store ? store : &flat_; }

  // Rounds stored values to bf16 in bf16 mode when A is float (the CPU's emulation; a
  // no-op in fp32 and for real bf16 storage): what the model does to every activation,
  // for stores that make their own weight copies.
  void store(A* x, size_t n);

  // Logits of the last forward, (B, T, vocab().size()) in the model's device memory:
  // this rank's columns; columns >= V are padding. logits_row copies row `position`
  // (the whole model's Vp values) to host memory as float.
  const A* logits() const { return head_.logits.data(); }
  void logits_row(int position, float* out) const;
  // Per-position losses of the last forward, (B, T), device memory.
  const G* losses() const { return head_.losses.data(); }

  // Bytes held, by kind (for the memory ledger).
  size_t param_bytes() const;
  size_t grad_bytes() const;
  size_t activation_bytes() const;

 private:
  ModelConfig model_;
  ModelSlice<A> slice_;
  ParamLayout layout_;
  int B_, T_, rows_;
  VocabRange vocab_;
  Device device_;
  Precision precision_;
  PieceContext ctx_;
  BlockDims dims_;
  ModelHooks<A> no_hooks_;  // the whole model: every hook does nothing
  ModelHooks<A>* hooks_;
  DeviceArray<A> params_;
  DeviceArray<G> grads_;
  FlatStore<A> flat_{layout_, nullptr, nullptr};
  WeightStore<A>* store_ = &flat_;
  // Activations of the one micro-batch: the embedding's output, each block's, the
  // head's; the residual stream's gradient and the blocks' shared scratch for backward.
  DeviceArray<A> encoded_;
  DeviceArray<A> embedded_;  // sequence parallelism: the embedding's partial sums over all rows
  std::vector<BlockActivations<A>> blocks_;
  HeadActivations<A> head_;
  BlockScratch<A> scratch_;
  DeviceArray<A> d_resid_;
  DeviceArray<int32_t> inputs_, targets_;
  // Runs of consecutive positions among the local tokens: (first local t, length,
  // position of the first); one run [0, T) at position 0 without context parallelism.
  struct PositionRun {
    int t0, length, pos0;
  };
  std::vector<PositionRun> position_runs_;
  // Calls f(first row, sequences, tokens, position of the first) for each piece of the
  // embedding: one call for B sequences of consecutive positions, else one per run.
  template <class F>
  void for_each_position_run(F&& f) const;
  std::vector<G> host_losses_;
  bool have_targets_ = false;
  G forward_pass(const int32_t* inputs, const int32_t* targets, bool for_backward);
  const A* block_input(int l) const { return l == 0 ? encoded_.data() : blocks_[size_t(l - 1)].resid3.data(); }
};

}  // namespace gpt
