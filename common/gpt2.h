/// @file
/// GPT-2 forward and backward on one device: the model's pieces (model_embedding.h,
/// model_block.h, model_head.h) composed over the whole model with hooks that do nothing.
///
/// ```
///   x0 = wte[tokens] + wpe[positions]
///   for each block:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
///   logits = ln_f(x) . wte^T;  loss = mean cross-entropy over the B*T positions
/// ```
///
/// The model owns its compute weights, their gradients and the activations of its
/// micro-batches in flight (B sequences of T tokens each; one micro-batch, except in a
/// pipeline stage, whose schedule keeps several: ModelSlice below); the optimizer owns the
/// moments and, in bf16 mode only, the fp32 master weights (in fp32 and fp64 the model's
/// weights are the master weights). The template argument A is the storage type of weights and activations:
/// float for fp32 training, double for the ground-truth runs of the tests, bf16 for the
/// bf16 mode of every stage on either device. (GPT2<float> in bf16 mode emulates bf16
/// storage by rounding fp32 buffers: the tests' reference for GPT2<bf16>.) Parameter
/// gradients are GradOf<A> (fp32 for bf16).
/// Buffers live on the model's device.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "common/bf16.h"
#include "common/block_pool.h"
#include "common/config.h"
#include "common/device.h"
#include "common/device_array.h"
#include "common/error.h"
#include "common/gpt2_layout.h"
#include "common/model_backward_split.h"
#include "common/model_block.h"
#include "common/model_head.h"
#include "common/model_pieces.h"
#include "common/precision.h"
#include "common/recompute.h"

namespace gpt {

/// Which pass asks a WeightStore for a unit, so that a store can tell the two orders of
/// calls below apart.
enum class Pass { Forward, Backward };

/// Where the model's weights and gradient buffers live, asked for one unit at a time
/// (units: see ParamLayout). Stage 01 keeps everything in two flat buffers (FlatStore);
/// later stages shard them and gather or reduce a unit around its use.
/// The order of calls, which a store may exploit to prefetch:
/// ```
///   forward:  acquire(0) | acquire(1) .. release(1) | ... | acquire(L+1) release(L+1) | release(0)
///   backward: acquire(0) acquire(L+1) grads(0) grads(L+1) .. done(L+1) release(L+1)
///             | for l = L..1: acquire(l) grads(l) .. release(l) done(l) | done(0) release(0)
/// ```
/// A backward split in two (zero-bubble schedules) calls the backward's sequence twice:
/// its input half without grads() and done() (it computes no weight gradient), then its
/// weight half whole, possibly after other micro-batches' forwards and input halves.
/// Pointers returned by acquire/grads point at the unit's first element.
template <class A>
class WeightStore {
 public:
  virtual ~WeightStore() = default;
  /// The unit's compute weights, in the model's device memory, valid until the matching
  /// release(unit, pass).
  virtual const A* acquire(int unit, Pass pass) = 0;
  /// The pass is done with the unit's weights for now; the default keeps them.
  virtual void release(int /*unit*/, Pass /*pass*/) {}
  /// The unit's gradient buffer, which the backward accumulates into (GradOf<A>, the
  /// model's device memory), valid until grads_done(unit).
  virtual GradOf<A>* grads(int unit) = 0;
  /// The unit's gradient is complete for this backward (accumulated over the micro-batch).
  virtual void grads_done(int /*unit*/) {}
};

/// Stage 01's store: the whole model's weights and gradients, flat.
template <class A>
class FlatStore : public WeightStore<A> {
 public:
  /// Borrows the flat buffers of layout.total() weights and gradients, laid out by
  /// `layout`; all three must outlive the store.
  FlatStore(const ParamLayout& layout, A* params, GradOf<A>* grads)
      : layout_(&layout), params_(params), grads_(grads) {}
  /// The unit's slice of the flat weights; nothing is copied.
  const A* acquire(int unit, Pass) override { return params_ + layout_->unit(unit).begin; }
  /// The unit's slice of the flat gradients.
  GradOf<A>* grads(int unit) override { return grads_ + layout_->unit(unit).begin; }

 private:
  const ParamLayout* layout_;
  A* params_;
  GradOf<A>* grads_;
};

/// How a rank holds the model: all of it (the default), or tensor-parallel rank `rank`
/// of `tp`: its heads, hidden units and vocabulary rows (the tensors of
/// ParamLayout(model, tp, rank)), with `hooks` joining the slices, and with
/// sequence_parallel its 1/tp share of the B*T rows for the elementwise work. Only rank 0
/// adds the row-parallel biases and wpe (a sum over ranks must count them once); every
/// rank computes their gradients, from the whole gradient it holds there.
///
/// Context parallelism gives a rank some chunks of each sequence: `positions` holds the
/// position in the whole sequence of each of the seq_len tokens the rank runs (empty: 0,
/// 1, ...), and the hooks' attention brings the other chunks' keys and values.
///
/// Pipeline parallelism gives a rank a range of `layers` (a stage: the first also runs the
/// embedding, the last the head and the loss) and lets `in_flight` micro-batches be
/// between their forward and their backward at once: each keeps its activations in a
/// slot (forward_micro / backward_micro below), which is where a schedule's memory goes;
/// an interleaved rank's chunks take their slots' block activations from one pool
/// (`block_pool`, common/block_pool.h).
template <class A>
struct ModelSlice {
  /// Tensor-parallel degree: how many ranks share each layer's tensors (1: the whole model).
  int tp = 1, rank = 0;  ///< this rank's index among the tp ranks, 0..tp-1
  bool sequence_parallel = false;  ///< split the B*T residual rows over the tp ranks (B*T divisible by tp)
  ModelHooks<A>* hooks = nullptr;  ///< required when tp > 1
  std::vector<int> positions;      ///< context parallelism: each local token's position
  LayerRange layers = {};          ///< pipeline parallelism: this stage's layers (default: all)
  int in_flight = 1;               ///< micro-batches whose activations are kept at once
  bool split_backward = false;     ///< zero-bubble schedules: backward_input/weight_micro
  /// Activation checkpointing (common/recompute.h, the top of gpt2.cpp): Full keeps only
  /// each block's output per micro-batch and runs a block's forward again before its
  /// backward; Selective keeps all but the block's cheap buffers and rebuilds those (with
  /// split_backward, in the weight half: the input half does not read them). Full not
  /// with split_backward.
  Recompute recompute = Recompute::None;
  /// Recompute: the buffers the one block running now writes and then loses (Full: all of
  /// them; Selective: the cheap ones). nullptr: the model allocates its own set. A rank's
  /// pipeline chunks can share one, since one block runs at a time on a rank
  /// (GPT2::working_block_for makes it; the caller owns and counts it).
  BlockActivations<A>* working_block = nullptr;
  /// Interleaved pipelines: the blocks' activations a micro-batch keeps come from this pool,
  /// which the rank's chunks share (common/block_pool.h; GPT2::block_pool_for makes it; the
  /// caller owns and counts it), taken at forward_micro and given back after the backward;
  /// nullptr: every slot keeps its own. Not with Full recompute (it keeps no block's).
  BlockPool<A>* block_pool = nullptr;
  /// Sampling and evaluation: no gradient buffers (grads(), as many values as the weights;
  /// the logits' and the residual stream's gradients); forward() evaluates only and
  /// backward() is refused.
  bool inference_only = false;
};

/// A run of consecutive positions among a forward's B*T tokens (sequence b, position t
/// is b*T + t) whose losses GPT2::evaluate_spans computes.
struct ScoredSpan {
  int first = 0;  ///< the run's first position
  int count = 0;  ///< the positions in the run
};

/// GPT-2 on one rank, with storage type A (see the top of this file): float or bf16 on either
/// device, double on the CPU (the ground truth). Holds the whole model or the ModelSlice it was made
/// with; runs forward and backward passes and accumulates parameter gradients.
/// Not copyable.
template <class A>
class GPT2 {
  using G = GradOf<A>;


 public:
  /// With own_weights false the model allocates no weight or gradient buffers of its
  /// own: a store set with set_store() provides them (the ZeRO stages shard them).
  GPT2(const ModelConfig& model, int batch, int seq_len, Device device, Precision precision,
       bool own_weights = true, ModelSlice<A> slice = {});
  GPT2(const GPT2&) = delete;  ///< the store points into the model
  GPT2& operator=(const GPT2&) = delete;

  const ModelConfig& model() const { return model_; }  ///< the whole model's configuration
  const ParamLayout& layout() const { return layout_; }  ///< this rank's tensors and their units
  int batch() const { return B_; }  ///< B: sequences per micro-batch
  int seq_len() const { return T_; }  ///< T: tokens per sequence this rank runs (its chunks under context parallelism)
  /// Rows of the residual stream this rank holds: B*T, or B*T/tp with sequence parallelism.
  int rows() const { return rows_; }
  /// This rank's rows of the padded vocabulary (all Vp of them without tensor parallelism).
  const VocabRange& vocab() const { return vocab_; }

  Device device() const { return device_; }  ///< where every buffer of the model lives

  /// The compute weights (in bf16 mode, rounded copies of the fp32 master weights) and
  /// the parameter gradients, in the model's device memory.
  DeviceArray<A>& params() { return params_; }
  const DeviceArray<A>& params() const { return params_; }  ///< read-only params()
  /// layout().total() gradients, accumulated by the backward; empty when own_weights was false.
  DeviceArray<G>& grads() { return grads_; }
  const DeviceArray<G>& grads() const { return grads_; }  ///< read-only grads()

  /// Sets the weights from (master) values in the model's device memory, rounding to
  /// bf16 in bf16 mode.
  void set_params(const G* values);
  /// Sets the weights to compute weights of another model of this shape (its params(),
  /// already rounded in bf16 mode), in the model's device memory: copied as they are.
  void copy_params(const A* values);

  /// Forward over inputs (B*T token ids, host memory). With targets, returns the mean
  /// loss over the B*T positions; without, returns 0 and only the logits are valid.
  G forward(const int32_t* inputs, const int32_t* targets);
  /// The mean loss of inputs against targets, for evaluation: forward() without writing
  /// the logits' gradient (no backward() may follow). On a GPU that saves a write of
  /// B*T*Vp values per batch.
  G evaluate(const int32_t* inputs, const int32_t* targets);

  /// evaluate() for the losses of some positions only, in an inference-only model of the
  /// whole model: the blocks run over all B*T positions (attention needs every earlier
  /// one), the head (ln_f, the logits, the loss) over the spans' positions alone, whose
  /// losses fill losses() in the spans' order. Returns their mean. The multiple-choice
  /// scorer reads only the completions' losses: the head over the contexts was work
  /// thrown away (a third of a GPT-2 124M forward is its head). On the CPU each loss is
  /// the one evaluate() computes at that position, bit for bit (the head's ops compute a
  /// row on its own).
  G evaluate_spans(const int32_t* inputs, const int32_t* targets, const std::vector<ScoredSpan>& spans);

  /// Backward of the last forward (which must have had targets), accumulating into
  /// grads(): the gradient of  loss_scale * mean loss.  With gradient accumulation over
  /// k micro-batches, loss_scale = 1/k gives the gradient of the mean over all of them.
  void backward(G loss_scale);

  /// A pipeline stage's passes over one micro-batch, its activations kept in `slot` (of
  /// in_flight slots) from its forward to its backward; forward() and backward() are
  /// slot 0 of the whole model. forward_micro reads the tokens on the first stage and
  /// stage_input(slot) on the others; on the last stage it computes the loss (the
  /// micro-batch's mean, returned; targets needed) and elsewhere returns 0, leaving the
  /// stage's output in stage_output(slot). Without for_backward it only evaluates.
  /// backward_micro reads the gradient of the stage's output from output_grad(slot) (the
  /// last stage: from its loss) and leaves the gradient of the stage's input there (the
  /// first stage: consumed by the embedding's backward). With a block pool the forward
  /// takes a set for the slot, which its backward gives back (without for_backward:
  /// release_blocks).
  G forward_micro(int slot, const int32_t* inputs, const int32_t* targets, bool for_backward = true);
  /// The backward of the micro-batch in `slot` (see above), which needs a forward_micro
  /// with for_backward (and targets on the last stage); loss_scale as for backward().
  void backward_micro(int slot, G loss_scale);
  /// backward_micro in two halves (ModelSlice::split_backward; model_backward_split.h):
  /// the input gradient (output_grad(slot) as after backward_micro), then, later, the
  /// weight gradients, accumulated; the slot's activations are kept until the second.
  void backward_input_micro(int slot, G loss_scale);
  /// The second half: the slot's weight gradients, after its backward_input_micro; frees the slot.
  void backward_weight_micro(int slot);
  bool first_stage() const { return layout_.has_embeddings(); }  ///< runs the embedding: reads tokens
  bool last_stage() const { return layout_.has_head(); }  ///< runs the head and the loss
  int in_flight() const { return int(slots_.size()); }  ///< number of slots (ModelSlice::in_flight)
  const ModelSlice<A>& slice() const { return slice_; }  ///< how this rank holds its part (as made)
  /// rows() x C values each, device memory.
  A* stage_input(int slot) { return slots_[size_t(slot)].input.data(); }
  /// The last block's output after forward_micro (rows() x C, device memory).
  const A* stage_output(int slot) const { return block_input(slots_[size_t(slot)], layout_.layer_end()); }
  /// Gradient of the stage's output before backward_micro (written by the caller on all
  /// but the last stage), of its input after it (rows() x C, device memory).
  A* output_grad(int slot) { return slots_[size_t(slot)].d_resid.data(); }

  /// The position in the whole sequence of each of the seq_len() local tokens (empty: 0,
  /// 1, ...): context parallelism sets it once (ModelSlice::positions); the cached decoder
  /// (common/decoder.h) moves its one token along the sequence, a position per step.
  void set_positions(const std::vector<int>& positions);

  /// Runs the next forwards over B sequences of seq_len tokens, seq_len at most the one
  /// the model was made with (max_seq_len()): the same buffers, each used up to the size
  /// the shorter sequences need. Only for an inference-only model of the whole model
  /// without context parallelism (the multiple-choice scorer makes each forward only as
  /// long as its longest row).
  void set_seq_len(int seq_len);
  int max_seq_len() const { return max_T_; }  ///< the seq_len the model was made with

  /// Zeroes the model's own gradient buffer, grads(); a store's gradients are its own to clear.
  void zero_grads();

  /// Routes weights and gradients through another store (nullptr: the model's own flat
  /// buffers, params() and grads()). The store must outlive its use.
  void set_store(WeightStore<A>* store) { store_ = store ? store : &flat_; }

  /// Logits of the last forward, (B, T, vocab().size()) in the model's device memory:
  /// this rank's columns; columns >= V are padding. logits_row copies row `position`
  /// (the whole model's Vp values) to host memory as float.
  const A* logits() const { return slots_[0].head.logits.data(); }
  void logits_row(int position, float* out) const;  ///< needs tp == 1; out holds Vp floats
  /// Per-position losses of the last forward, (B, T), device memory.
  const G* losses() const { return slots_[0].head.losses.data(); }

  /// The working set a model made with `slice` recomputes into (the activations of one
  /// block of it), for chunks to share through ModelSlice::working_block.
  static BlockActivations<A> working_block_for(const ModelConfig& model, int batch, int seq_len, Device device,
                                               const ModelSlice<A>& slice);
  /// A pool of `sets` sets of `layers` blocks' activations as a model made with `slice`
  /// keeps them per micro-batch, for chunks to share through ModelSlice::block_pool.
  static BlockPool<A> block_pool_for(const ModelConfig& model, int batch, int seq_len, Device device,
                                     const ModelSlice<A>& slice, int sets, int layers);
  /// Gives back the pool's set that `slot` holds after a forward without a backward
  /// (for_backward false: an evaluation), once what reads it (a send of stage_output) is
  /// done; nothing without a pool or a held set. A backward gives its set back itself.
  void release_blocks(int slot);

  /// Bytes held, by kind (for the memory ledger).
  size_t param_bytes() const;
  size_t grad_bytes() const;  ///< the model's own gradient buffer (0 when own_weights was false)
  /// Every slot's activations, the blocks' scratch, the embedding's sums and the recompute
  /// working set when the model owns it (a shared one is its owner's to count, as is a
  /// shared block pool).
  size_t activation_bytes() const;

 private:
  ModelConfig model_;
  ModelSlice<A> slice_;
  ParamLayout layout_;
  int B_, T_, rows_;
  int max_T_;  ///< the seq_len the buffers are made for (set_seq_len may run fewer)
  VocabRange vocab_;
  Device device_;
  Precision precision_;
  PieceContext ctx_;
  BlockDims dims_;
  ModelHooks<A> no_hooks_;  ///< the whole model: every hook does nothing
  ModelHooks<A>* hooks_;
  DeviceArray<A> params_;
  DeviceArray<G> grads_;
  FlatStore<A> flat_{layout_, nullptr, nullptr};
  WeightStore<A>* store_ = &flat_;
  /// What one micro-batch keeps from its forward to its backward: the stage's input (the
  /// embedding's output, or the activation received from the stage before), each block's
  /// activations, the head's (last stage), its tokens (first stage) and targets (last),
  /// and the residual stream's gradient (received from the stage after, on the others).
  struct MicroBatch {
    DeviceArray<A> input;
    /// Each block's activations (under Selective without the cheap ones; empty under Full).
    std::vector<BlockActivations<A>> blocks;
    std::vector<DeviceArray<A>> outputs;  ///< Full recompute: each block's output only (rows x C)
    HeadActivations<A> head;
    DeviceArray<int32_t> inputs, targets;
    DeviceArray<A> d_resid;
    bool have_targets = false;
    /// Split backward: what the weight half needs from the input half, per block and for
    /// the head (the gradient of ln_f's output).
    std::vector<BlockGradInputs<A>> keep;
    DeviceArray<A> keep_d_lnf;
    bool input_done = false;
    int pool_set = -1;  ///< with ModelSlice::block_pool: the set holding `blocks`' activations, or -1
  };
  std::vector<MicroBatch> slots_;
  /// Rows of the residual stream a rank holds: B*T, or B*T/tp under sequence parallelism.
  static int rows_for(int batch, int seq_len, const ModelSlice<A>& slice) {
    return slice.sequence_parallel ? batch * seq_len / slice.tp : batch * seq_len;
  }
  /// Recompute: the buffers of the one block running now that no micro-batch keeps,
  /// written by each block's forward and, in the backward, by its recomputation; the next
  /// block overwrites them.
  BlockActivations<A> own_working_block_;           ///< the working set when none is shared
  BlockActivations<A>* working_block_ = nullptr;  ///< the working set in use (own or shared)
  /// Where block l's forward writes its activations: its own set in the micro-batch (under
  /// Selective lent the working set's cheap buffers while the block runs), or under Full
  /// recompute the working set.
  BlockActivations<A>& activations(MicroBatch& mb, int l) {
    return slice_.recompute == Recompute::Full ? *working_block_ : kept_blocks(mb)[size_t(l - layout_.layer_begin())];
  }
  /// The blocks' activations micro-batch mb keeps: its own, or the pool's set it holds.
  std::vector<BlockActivations<A>>& kept_blocks(MicroBatch& mb) {
    return const_cast<std::vector<BlockActivations<A>>&>(std::as_const(*this).kept_blocks(mb));
  }
  const std::vector<BlockActivations<A>>& kept_blocks(const MicroBatch& mb) const {
    if (!slice_.block_pool) return mb.blocks;
    invariant(mb.pool_set >= 0, "GPT2: a slot's blocks read while it holds no set of the block pool");
    return slice_.block_pool->set(mb.pool_set);
  }
  /// slots_[slot], after checking that slot is in [0, in_flight()) (`caller` names the
  /// method in the error).
  MicroBatch& slot_at(int slot, const char* caller);
  /// An InternalError naming `caller` unless the model is inference-only, of the whole
  /// model, without context parallelism (set_seq_len, evaluate_spans).
  void require_whole_inference_model(const char* caller) const;
  /// forward_micro, with the head over the spans' positions alone when `spans` is set
  /// (evaluate_spans: the targets then hold the spans' targets first, in order).
  G run_forward(int slot, const int32_t* inputs, const int32_t* targets, bool for_backward,
                const std::vector<ScoredSpan>* spans);
  /// evaluate_spans: the spans' rows of the last block's output, gathered for the head
  /// (made at its first call, B x max_seq_len() rows).
  DeviceArray<A> span_rows_;
  /// The embedding's backward from the gradient of the stage input (first stage).
  void embedding_backward(MicroBatch& mb, G* dwte, G* dwpe);
  DeviceArray<A> embedded_;  ///< sequence parallelism: the embedding's partial sums over all rows
  BlockScratch<A> scratch_;  ///< shared by every block's pass
  /// Runs of consecutive positions among the local tokens: (first local t, length,
  /// position of the first); one run [0, T) at position 0 without context parallelism.
  struct PositionRun {
    int t0, length, pos0;
  };
  std::vector<PositionRun> position_runs_;
  /// Calls f(first row, sequences, tokens, position of the first) for each piece of the
  /// embedding: one call for B sequences of consecutive positions, else one per run.
  template <class F>
  void for_each_position_run(F&& f) const;
  std::vector<G> host_losses_;
  /// The input of layer l (in [layers.begin, layers.end]: the last is the head's input).
  const A* block_input(const MicroBatch& mb, int l) const {
    const int i = l - layout_.layer_begin();
    if (i == 0) return mb.input.data();
    return slice_.recompute == Recompute::Full ? mb.outputs[size_t(i - 1)].data()
                                               : kept_blocks(mb)[size_t(i - 1)].resid3.data();
  }
};

}  // namespace gpt
