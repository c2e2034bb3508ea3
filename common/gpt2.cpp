// GPT-2 forward and backward on one device; see gpt2.h. The loop over the pieces:
//   forward:  embedding -> block 0 .. block L-1 -> head (ln_f, logits) -> loss
//   backward: head -> block L-1 .. block 0 -> embedding, with one running residual
//             gradient d_resid and the blocks' shared scratch.
// Weights come from the WeightStore one unit at a time, in the order gpt2.h documents.
//
// Activation checkpointing (ModelSlice::recompute; Chen et al. 2016, "Training Deep Nets
// with Sublinear Memory Cost"): a block's backward needs everything its forward wrote
// (BlockActivations: 16 C values a row on one rank -- ln1, qkv 3C, atty, resid2, ln2,
// fch 4C, fch_gelu 4C, resid3 -- plus the layernorm and attention statistics), but all of
// it follows from the block's input x and its weights.
//
// Full: a micro-batch keeps only the residual stream between blocks, and the backward of
// block l first runs block l's forward again from its kept input:
//
//   kept per micro-batch    without: L x |BlockActivations|    with: L x rows x C
//                           (plus one BlockActivations for the block being recomputed)
//   extra compute           one more forward of every block: with a backward costing
//                           about two forwards, a step costs about 4/3 of one without
//
// The recomputation reads the same weights and the same input through the same ops, so
// it writes the same bits, and training is bit-identical with and without it.
//
// Selective (the cheap part only, as llm.c's recompute option and Korthikanti et al.
// 2022 choose what to recompute by its cost per byte): ln1, ln2 and fch_gelu (6 C of the
// 16 C at tp = 1) follow row by row or element by element from tensors the block keeps
// anyway. A micro-batch keeps the rest; the forward writes the three into a working set
// it then lends to the next block, and the backward rebuilds them there
// (block_rebuild_cheap) -- two layernorms and a GELU, a few passes over memory next to
// the block's six GEMMs.
#include "common/gpt2.h"

#include <algorithm>

#include "common/trace.h"
#include "kernels/cpu/bf16.h"
#include "kernels/ops.h"

namespace gpt {

namespace {
// A tensor of a unit by its absolute offset: the store hands out the unit's first
// element, the layout gives absolute offsets.
template <class T>
struct UnitView {
  T* first;
  int64_t begin;
  T* operator()(int64_t offset) const { return first + (offset - begin); }
};
template <class T>
UnitView<T> unit_view(T* first, const ParamLayout& layout, int unit) {
  return {first, layout.unit(unit).begin};
}
// A block's tensors inside its unit, whose first element is at unit_begin.
template <class T>
BlockTensors<T> block_tensors(const BlockParams& o, T* unit, int64_t unit_begin) {
  const UnitView<T> at{unit, unit_begin};
  return {at(o.ln1_w), at(o.ln1_b), at(o.qkv_w),  at(o.qkv_b), at(o.attproj_w), at(o.attproj_b),
          at(o.ln2_w), at(o.ln2_b), at(o.fc_w),   at(o.fc_b),  at(o.fcproj_w),  at(o.fcproj_b)};
}
}  // namespace

template <class A>
GPT2<A>::GPT2(const ModelConfig& model, int batch, int seq_len, Device device, Precision precision,
              bool own_weights, ModelSlice<A> slice)
    : model_(model),
      slice_(slice),
      layout_(model, slice.tp, slice.rank, slice.layers),
      B_(batch),
      T_(seq_len),
      rows_(rows_for(batch, seq_len, slice)),
      max_T_(seq_len),
      vocab_(vocab_range(model, slice.tp, slice.rank)),
      device_(device),
      precision_(precision),
      ctx_{device, precision},
      dims_(BlockDims::slice(model, slice.tp)),
      hooks_(slice.hooks ? slice.hooks : &no_hooks_) {
  require(T_ <= model.block_size, "seq_len " + std::to_string(T_) + " exceeds block_size " +
                                      std::to_string(model.block_size));
  invariant(slice.tp == 1 || slice.hooks != nullptr, "GPT2: a tensor-parallel slice needs its hooks");
  invariant(!slice.sequence_parallel || (batch * seq_len) % slice.tp == 0,
            "GPT2: sequence parallelism needs B*T divisible by tp");
  invariant(hooks_->full_rows(rows_) == batch * seq_len, "GPT2: the hooks' full_rows do not match the slice");
  invariant(slice.in_flight >= 1, "GPT2: at least one micro-batch in flight");
  invariant(!(slice.recompute == Recompute::Full && slice.split_backward),
            "GPT2: full recompute with split_backward (the weight half would need the activations again)");
  set_positions(slice.positions);
  if constexpr (std::is_same_v<A, double>)
    invariant(device == Device::CPU, "the double-precision model runs on the CPU only");
  const int N = B_ * T_, R = rows_, C = model.n_embd;
  const Device d = device;
  if (own_weights) {
    {
      const MemScope scope(MemKind::Params);
      params_ = DeviceArray<A>(d, layout_.total());
    }
    const MemScope scope(MemKind::Grads);
    if (!slice.inference_only) grads_ = DeviceArray<G>(d, layout_.total());
  }
  flat_ = FlatStore<A>(layout_, params_.data(), grads_.data());
  const MemScope scope(MemKind::Activations);  // everything below: activations and their gradients
  // Without sequence parallelism the embedding's partial sums are all-reduced in place
  // in the slot's input; with it they are reduce-scattered from embedded_ into it.
  if (R != N && first_stage()) embedded_ = DeviceArray<A>(d, size_t(N) * C);
  slots_.resize(size_t(slice.in_flight));
  for (MicroBatch& mb : slots_) {
    mb.input = DeviceArray<A>(d, size_t(R) * C);
    for (int l = layout_.layer_begin(); l < layout_.layer_end(); ++l) {
      if (slice.recompute == Recompute::Full) mb.outputs.emplace_back(d, size_t(R) * C);
      else if (slice.block_pool) continue;  // the pool's, taken at forward_micro
      else if (slice.recompute == Recompute::Selective) mb.blocks.emplace_back(d, dims_, B_, T_, R, BlockBuffers::AllButCheap);
      else mb.blocks.emplace_back(d, dims_, B_, T_, R);
    }
    if (last_stage()) mb.head = HeadActivations<A>(d, C, R, N, vocab_, /*train=*/!slice.inference_only);
    if (!slice.inference_only) mb.d_resid = DeviceArray<A>(d, size_t(R) * C);
    if (first_stage()) mb.inputs = DeviceArray<int32_t>(d, size_t(N));
    if (last_stage()) mb.targets = DeviceArray<int32_t>(d, size_t(N));
    if (slice.split_backward) {
      for (int l = layout_.layer_begin(); l < layout_.layer_end(); ++l) mb.keep.emplace_back(d, dims_, N, R);
      if (last_stage()) mb.keep_d_lnf = DeviceArray<A>(d, size_t(R) * C);
    }
  }
  if (slice.recompute != Recompute::None && slice.working_block == nullptr) {
    own_working_block_ = working_block_for(model, batch, seq_len, device, slice);
    working_block_ = &own_working_block_;
  } else if (slice.recompute != Recompute::None) {  // shared: it must be the set this model would make
    working_block_ = slice.working_block;
    const BlockActivations<A>& w = *working_block_;
    const bool full = slice.recompute == Recompute::Full;
    invariant(w.ln1.size() == size_t(R) * C && w.fch_gelu.size() == size_t(N) * dims_.hidden &&
                  w.resid3.size() == (full ? size_t(R) * C : 0) &&
                  w.qkv.size() == (full ? size_t(N) * 3 * dims_.attn_width() : 0),
              "GPT2: the shared recompute working set is not the one this model's slice needs");
  }
  if (slice.block_pool) {  // shared: its sets must be the ones this model's slots would keep
    invariant(slice.recompute != Recompute::Full, "GPT2: a block pool under full recompute (it keeps no block's)");
    invariant(slice.block_pool->size() >= 1, "GPT2: an empty block pool");
    const BlockActivations<A>& one = slice.block_pool->set(0)[0];
    invariant(slice.block_pool->layers() >= layout_.layer_end() - layout_.layer_begin() &&
                  one.resid3.size() == size_t(R) * C && one.qkv.size() == size_t(N) * 3 * dims_.attn_width() &&
                  one.ln1.empty() == (slice.recompute == Recompute::Selective),  // selective keeps no ln1
              "GPT2: the shared block pool is not the one this model's slice needs");
  }
  scratch_ = BlockScratch<A>(d, dims_, N, R);
  host_losses_.resize(size_t(N));
}

template <class A>
BlockPool<A> GPT2<A>::block_pool_for(const ModelConfig& model, int batch, int seq_len, Device device,
                                     const ModelSlice<A>& slice, int sets, int layers) {
  invariant(slice.recompute != Recompute::Full, "GPT2::block_pool_for: full recompute keeps no block's activations");
  return BlockPool<A>(sets, layers, device, BlockDims::slice(model, slice.tp), batch, seq_len,
                      rows_for(batch, seq_len, slice),
                      slice.recompute == Recompute::Selective ? BlockBuffers::AllButCheap : BlockBuffers::All);
}

template <class A>
void GPT2<A>::release_blocks(int slot) {
  MicroBatch& mb = slot_at(slot, "release_blocks");
  if (mb.pool_set < 0) return;
  slice_.block_pool->release(mb.pool_set);
  mb.pool_set = -1;
}

template <class A>
BlockActivations<A> GPT2<A>::working_block_for(const ModelConfig& model, int batch, int seq_len, Device device,
                                              const ModelSlice<A>& slice) {
  invariant(slice.recompute != Recompute::None, "GPT2::working_block_for: the slice recomputes nothing");
  const MemScope scope(MemKind::Activations);
  return BlockActivations<A>(device, BlockDims::slice(model, slice.tp), batch, seq_len, rows_for(batch, seq_len, slice),
                             slice.recompute == Recompute::Full ? BlockBuffers::All : BlockBuffers::Cheap);
}

template <class A>
void GPT2<A>::set_params(const G* values) {
  invariant(!params_.empty(), "set_params: this model has no weight buffers of its own (own_weights=false)");
  if constexpr (std::is_same_v<A, bf16>) {
    ops::convert_to_bf16(device_, params_.data(), values, params_.size());
  } else {
    // The trainer's fp32 master weights may be these very parameters: no copy onto
    // itself (cudaMemcpy forbids overlapping ranges).
    if (values != params_.data()) device_copy(device_, params_.data(), device_, values, params_.bytes());
    ctx_.round(params_.data(), params_.size());  // bf16 emulated in fp32 buffers: rounded
  }
}

template <class A>
void GPT2<A>::copy_params(const A* values) {
  invariant(!params_.empty(), "copy_params: this model has no weight buffers of its own (own_weights=false)");
  if (values != params_.data()) device_copy(device_, params_.data(), device_, values, params_.bytes());
}

template <class A>
void GPT2<A>::zero_grads() {
  grads_.zero();
}

template <class A>
void GPT2<A>::logits_row(int position, float* out) const {
  invariant(slice_.tp == 1, "logits_row: a tensor-parallel rank holds only its vocabulary columns");
  const size_t Vp = size_t(model_.padded_vocab());
  if constexpr (std::is_same_v<A, float>) {
    slots_[0].head.logits.copy_to_host(out, Vp, size_t(position) * Vp);
  } else {
    std::vector<A> row(Vp);
    slots_[0].head.logits.copy_to_host(row.data(), Vp, size_t(position) * Vp);
    for (size_t i = 0; i < Vp; ++i) {
      if constexpr (std::is_same_v<A, bf16>) out[i] = cpu::bf16_to_float(row[i].bits);
      else out[i] = float(row[i]);
    }
  }
}

template <class A>
void GPT2<A>::set_positions(const std::vector<int>& positions) {
  position_runs_.clear();
  if (positions.empty()) {
    position_runs_.push_back({0, T_, 0});
    return;
  }
  invariant(int(positions.size()) == T_, "GPT2: one position per local token");
  for (int t = 0; t < T_; ++t) {
    const int p = positions[size_t(t)];
    require(p >= 0 && p < model_.block_size, "position " + std::to_string(p) + " is outside block_size " +
                                                 std::to_string(model_.block_size));
    if (t > 0 && p == position_runs_.back().pos0 + position_runs_.back().length) ++position_runs_.back().length;
    else position_runs_.push_back({t, 1, p});
  }
}

template <class A>
void GPT2<A>::require_whole_inference_model(const char* caller) const {
  invariant(slice_.inference_only && slice_.tp == 1 && slice_.positions.empty() && first_stage() && last_stage(),
            std::string(caller) + ": only an inference-only model of the whole model without context parallelism");
}

template <class A>
void GPT2<A>::set_seq_len(int seq_len) {
  require_whole_inference_model("GPT2::set_seq_len");
  invariant(seq_len >= 1 && seq_len <= max_T_, "GPT2::set_seq_len: " + std::to_string(seq_len) +
                                                   " tokens, outside 1.." + std::to_string(max_T_));
  // Every buffer is laid out (B, T, ...) or (B*T, ...) and every op takes B and T: with
  // a smaller T the same layout fills the buffers' first B*T rows.
  T_ = seq_len;
  rows_ = B_ * seq_len;
  set_positions({});
}

template <class A>
template <class F>
void GPT2<A>::for_each_position_run(F&& f) const {
  if (position_runs_.size() == 1) {  // consecutive positions: all B sequences in one call
    f(size_t(0), B_, T_, position_runs_[0].pos0);
    return;
  }
  for (int b = 0; b < B_; ++b)  // chunks of the sequence: each run of consecutive positions on its own
    for (const PositionRun& run : position_runs_) f(size_t(b) * T_ + size_t(run.t0), 1, run.length, run.pos0);
}

template <class A>
GradOf<A> GPT2<A>::forward(const int32_t* inputs, const int32_t* targets) {
  return forward_micro(0, inputs, targets, true);
}

template <class A>
GradOf<A> GPT2<A>::evaluate(const int32_t* inputs, const int32_t* targets) {
  invariant(targets != nullptr, "evaluate() needs targets");
  return forward_micro(0, inputs, targets, false);
}

template <class A>
void GPT2<A>::backward(G loss_scale) {
  backward_micro(0, loss_scale);
}

template <class A>
typename GPT2<A>::MicroBatch& GPT2<A>::slot_at(int slot, const char* caller) {
  invariant(slot >= 0 && slot < in_flight(),
            std::string(caller) + ": slot " + std::to_string(slot) + " of " + std::to_string(in_flight()));
  return slots_[size_t(slot)];
}

template <class A>
GradOf<A> GPT2<A>::evaluate_spans(const int32_t* inputs, const int32_t* targets, const std::vector<ScoredSpan>& spans) {
  require_whole_inference_model("GPT2::evaluate_spans");
  invariant(targets != nullptr && !spans.empty(), "GPT2::evaluate_spans: targets and at least one span");
  const int N = B_ * T_;
  // The head's targets, span by span, then zeros (valid tokens) up to the N the forward checks.
  std::vector<int32_t> scored_targets(size_t(N), 0);
  int scored = 0;
  for (const ScoredSpan& s : spans) {
    invariant(s.first >= 0 && s.count >= 1 && s.count <= N - s.first && s.count <= N - scored,
              "GPT2::evaluate_spans: a span outside the B*T positions, or more positions than they hold");
    std::copy(targets + s.first, targets + s.first + s.count, scored_targets.begin() + scored);
    scored += s.count;
  }
  if (span_rows_.empty()) {
    const MemScope scope(MemKind::Activations);
    span_rows_ = DeviceArray<A>(device_, size_t(B_) * max_T_ * model_.n_embd);
  }
  return run_forward(0, inputs, scored_targets.data(), false, &spans);
}

template <class A>
GradOf<A> GPT2<A>::forward_micro(int slot, const int32_t* inputs, const int32_t* targets, bool for_backward) {
  return run_forward(slot, inputs, targets, for_backward, nullptr);
}

template <class A>
GradOf<A> GPT2<A>::run_forward(int slot, const int32_t* inputs, const int32_t* targets, bool for_backward,
                               const std::vector<ScoredSpan>* spans) {
  Span span("forward");
  MicroBatch& mb = slot_at(slot, "forward_micro");
  const int l0 = layout_.layer_begin(), l1 = layout_.layer_end();
  const int C = model_.n_embd, V = model_.vocab_size, Vp = model_.padded_vocab();
  const int N = B_ * T_, R = rows_;
  auto check_tokens = [&](const int32_t* tokens, const char* what) {
    for (int i = 0; i < N; ++i)
      require(tokens[i] >= 0 && tokens[i] < V, std::string(what) + " token " + std::to_string(tokens[i]) +
                                                   " is outside the vocabulary [0, " + std::to_string(V) + ")");
  };
  if (first_stage()) {
    invariant(inputs != nullptr, "forward: the first stage needs the input tokens");
    check_tokens(inputs, "input");
    mb.inputs.copy_from_host(inputs, size_t(N));
  }
  const bool with_loss = last_stage() && targets != nullptr;
  if (with_loss) {
    check_tokens(targets, "target");
    mb.targets.copy_from_host(targets, size_t(N));
  }
  mb.have_targets = for_backward && !slice_.inference_only && (with_loss || !last_stage());
  // After the token checks, so that a refused forward takes no set.
  if (slice_.block_pool && mb.pool_set < 0) mb.pool_set = slice_.block_pool->acquire();
  const VocabRange vocab = vocab_;
  // Only one rank of a tensor-parallel group adds what every rank holds whole (wpe, the
  // row-parallel biases): the reductions after them must count it once.
  const bool adds_shared = slice_.rank == 0;
  const int embed = ParamLayout::kEmbeddingUnit, final = layout_.final_unit();
  const auto PE = unit_view(store_->acquire(embed, Pass::Forward), layout_, embed);

  if (first_stage()) {
    // The embedding of this rank's vocabulary rows, for all N rows: a partial sum under
    // tensor parallelism, reduced like a row-parallel product's.
    A* embedded = embedded_.empty() ? mb.input.data() : embedded_.data();
    for_each_position_run([&](size_t row, int B, int T, int pos0) {
      embedding_piece_forward(ctx_, embedded + row * C, mb.inputs.data() + row, PE(layout_.wte()), vocab,
                              adds_shared ? PE(layout_.wpe()) : nullptr, pos0, B, T, C, Vp);
    });
    A* reduced = hooks_->reduce_output(Site::Embedding, embedded, mb.input.data(), R, C);
    invariant(reduced == mb.input.data(), "GPT2: the embedding's reduction must land in the residual stream");
    ctx_.round(mb.input.data(), size_t(R) * C);
  }
  for (int l = l0; l < l1; ++l) {
    const int unit = layout_.block_unit(l);
    const A* pb = store_->acquire(unit, Pass::Forward);
    BlockWeights<A> w = block_tensors(layout_.block(l), pb, layout_.unit(unit).begin);
    if (!adds_shared) w.attproj_b = w.fcproj_b = nullptr;
    BlockActivations<A>& act = activations(mb, l);
    // Selective: the block borrows the working set's cheap buffers and gives them back
    // full, for the next block to overwrite.
    if (slice_.recompute == Recompute::Selective) act.swap_cheap(*working_block_);
    block_forward(ctx_, dims_, w, block_input(mb, l), act, scratch_, *hooks_, B_, T_, R);
    if (slice_.recompute == Recompute::Selective) act.swap_cheap(*working_block_);
    // Full: the output moves into the micro-batch (an exchange of buffers, no copy); the
    // rest of act is overwritten by the next block.
    if (slice_.recompute == Recompute::Full) act.resid3.swap(mb.outputs[size_t(l - l0)]);
    store_->release(unit, Pass::Forward);
  }
  const auto PF = unit_view(store_->acquire(final, Pass::Forward), layout_, final);
  // The head's rows: the stage's rows, or the spans' gathered one after another.
  const A* head_input = block_input(mb, l1);
  int head_rows = R;
  if (spans) {
    head_rows = 0;
    for (const ScoredSpan& s : *spans) {
      device_copy(device_, span_rows_.data() + size_t(head_rows) * C, device_, head_input + size_t(s.first) * C,
                  size_t(s.count) * C * sizeof(A));
      head_rows += s.count;
    }
    head_input = span_rows_.data();
  }
  if (last_stage())
    head_forward(ctx_, head_input, PF(layout_.lnf_w()), PF(layout_.lnf_b()), PE(layout_.wte()), vocab, mb.head,
                 *hooks_, head_rows, C);
  store_->release(final, Pass::Forward);
  store_->release(embed, Pass::Forward);
  if (!with_loss) return G(0);
  head_loss(ctx_, mb.head, mb.targets.data(), vocab, V, *hooks_, head_rows);
  const int losses = hooks_->full_rows(head_rows);  // N, or the spans' positions
  mb.head.losses.copy_to_host(host_losses_.data(), size_t(losses));
  G sum = 0;
  for (int i = 0; i < losses; ++i) sum += host_losses_[size_t(i)];
  return sum / G(losses);
}

template <class A>
void GPT2<A>::backward_micro(int slot, G loss_scale) {
  Span span("backward");
  invariant(!slice_.inference_only, "backward: this model was made for inference only (ModelSlice::inference_only)");
  MicroBatch& mb = slot_at(slot, "backward_micro");
  invariant(mb.have_targets, "backward() needs a forward() with targets");
  const int l0 = layout_.layer_begin(), l1 = layout_.layer_end();
  const int C = model_.n_embd, N = B_ * T_, R = rows_;
  const VocabRange vocab = vocab_;
  const bool adds_shared = slice_.rank == 0;
  const int embed = ParamLayout::kEmbeddingUnit, final = layout_.final_unit();
  const auto PE = unit_view(store_->acquire(embed, Pass::Backward), layout_, embed);
  const auto PF = unit_view(store_->acquire(final, Pass::Backward), layout_, final);
  const auto GE = unit_view(store_->grads(embed), layout_, embed);
  const auto GF = unit_view(store_->grads(final), layout_, final);

  // d loss / d logits, each row's loss carrying dloss = loss_scale / N (the mean over N
  // positions and the accumulation factor). A stage before the last has received the
  // gradient of its output in d_resid instead.
  if (last_stage()) {
    head_loss_gradient(ctx_, mb.head, mb.targets.data(), vocab, model_.vocab_size, *hooks_, R,
                       double(loss_scale / G(N)));
    head_backward(ctx_, block_input(mb, l1), PF(layout_.lnf_w()), PE(layout_.wte()), GF(layout_.lnf_w()),
                  GF(layout_.lnf_b()), GE(layout_.wte()), vocab, mb.head, mb.d_resid.data(), scratch_, *hooks_, R, C);
  }
  store_->grads_done(final);
  store_->release(final, Pass::Backward);

  for (int l = l1 - 1; l >= l0; --l) {
    const int unit = layout_.block_unit(l);
    const A* pb = store_->acquire(unit, Pass::Backward);
    G* gb = store_->grads(unit);
    const int64_t begin = layout_.unit(unit).begin;
    BlockWeights<A> w = block_tensors(layout_.block(l), pb, begin);
    if (!adds_shared) w.attproj_b = w.fcproj_b = nullptr;
    BlockActivations<A>& act = activations(mb, l);
    if (slice_.recompute == Recompute::Full) {  // block l's activations again, from its kept input
      Span recompute_span("recompute");
      block_forward(ctx_, dims_, w, block_input(mb, l), act, scratch_, *hooks_, B_, T_, R);
    } else if (slice_.recompute == Recompute::Selective) {  // its cheap buffers again
      Span recompute_span("recompute");
      act.swap_cheap(*working_block_);
      block_rebuild_cheap(ctx_, dims_, w, block_input(mb, l), act, B_, T_, R);
    }
    block_backward(ctx_, dims_, w, block_tensors(layout_.block(l), gb, begin), block_input(mb, l), act,
                   mb.d_resid.data(), scratch_, *hooks_, B_, T_, R);
    if (slice_.recompute == Recompute::Selective) act.swap_cheap(*working_block_);
    store_->release(unit, Pass::Backward);
    store_->grads_done(unit);
  }
  if (first_stage()) embedding_backward(mb, GE(layout_.wte()), GE(layout_.wpe()));
  store_->grads_done(embed);
  store_->release(embed, Pass::Backward);
  mb.have_targets = false;  // d_logits was consumed
  release_blocks(slot);
}

template <class A>
void GPT2<A>::embedding_backward(MicroBatch& mb, G* dwte, G* dwpe) {
  const int C = model_.n_embd, Vp = model_.padded_vocab(), R = rows_;
  // Every rank needs the gradient of all N rows of the embedding (its vocabulary rows
  // may be any token's); every rank computes wpe's gradient from it (the same on each).
  const A* d_embedded = hooks_->gather_output_grad(Site::Embedding, mb.d_resid.data(), scratch_.d_full.data(), R, C);
  for_each_position_run([&](size_t row, int B, int T, int pos0) {
    embedding_piece_backward(ctx_, dwte, dwpe, d_embedded + row * C, mb.inputs.data() + row, vocab_, pos0, B, T, C,
                             Vp);
  });
}

template <class A>
void GPT2<A>::backward_input_micro(int slot, G loss_scale) {
  Span span("backward_input");
  invariant(slice_.split_backward, "backward_input_micro: the model was made without split_backward");
  invariant(!slice_.inference_only, "backward_input_micro: this model was made for inference only");
  MicroBatch& mb = slot_at(slot, "backward_input_micro");
  invariant(mb.have_targets && !mb.input_done, "backward_input_micro needs a forward() with targets");
  const int l0 = layout_.layer_begin(), l1 = layout_.layer_end();
  const int C = model_.n_embd, N = B_ * T_, R = rows_;
  const bool adds_shared = slice_.rank == 0;
  const int embed = ParamLayout::kEmbeddingUnit, final = layout_.final_unit();
  const auto PE = unit_view(store_->acquire(embed, Pass::Backward), layout_, embed);
  const auto PF = unit_view(store_->acquire(final, Pass::Backward), layout_, final);
  if (last_stage()) {
    head_loss_gradient(ctx_, mb.head, mb.targets.data(), vocab_, model_.vocab_size, *hooks_, R,
                       double(loss_scale / G(N)));
    head_backward_input(ctx_, block_input(mb, l1), PF(layout_.lnf_w()), PE(layout_.wte()), vocab_, mb.head,
                        mb.d_resid.data(), mb.keep_d_lnf, scratch_, *hooks_, R, C);
  }
  store_->release(final, Pass::Backward);
  for (int l = l1 - 1; l >= l0; --l) {
    const int unit = layout_.block_unit(l);
    const A* pb = store_->acquire(unit, Pass::Backward);
    BlockWeights<A> w = block_tensors(layout_.block(l), pb, layout_.unit(unit).begin);
    if (!adds_shared) w.attproj_b = w.fcproj_b = nullptr;
    block_backward_input(ctx_, dims_, w, block_input(mb, l), kept_blocks(mb)[size_t(l - l0)], mb.d_resid.data(),
                         mb.keep[size_t(l - l0)], scratch_, *hooks_, B_, T_, R);
    store_->release(unit, Pass::Backward);
  }
  store_->release(embed, Pass::Backward);
  mb.input_done = true;
}

template <class A>
void GPT2<A>::backward_weight_micro(int slot) {
  Span span("backward_weight");
  MicroBatch& mb = slot_at(slot, "backward_weight_micro");
  invariant(mb.input_done, "backward_weight_micro needs the slot's backward_input_micro first");
  const int l0 = layout_.layer_begin(), l1 = layout_.layer_end();
  const int C = model_.n_embd, R = rows_;
  const bool adds_shared = slice_.rank == 0;
  const int embed = ParamLayout::kEmbeddingUnit, final = layout_.final_unit();
  // The fused backward's order of units: the head, the blocks last to first, the embedding.
  const auto PE = unit_view(store_->acquire(embed, Pass::Backward), layout_, embed);
  const auto PF = unit_view(store_->acquire(final, Pass::Backward), layout_, final);
  const auto GE = unit_view(store_->grads(embed), layout_, embed);
  const auto GF = unit_view(store_->grads(final), layout_, final);
  if (last_stage())
    head_backward_weight(ctx_, block_input(mb, l1), PF(layout_.lnf_w()), PE(layout_.wte()), GF(layout_.lnf_w()),
                         GF(layout_.lnf_b()), GE(layout_.wte()), vocab_, mb.head, mb.keep_d_lnf, R, C);
  store_->grads_done(final);
  store_->release(final, Pass::Backward);
  for (int l = l1 - 1; l >= l0; --l) {
    const int unit = layout_.block_unit(l);
    const A* pb = store_->acquire(unit, Pass::Backward);
    G* gb = store_->grads(unit);
    const int64_t begin = layout_.unit(unit).begin;
    BlockWeights<A> w = block_tensors(layout_.block(l), pb, begin);
    if (!adds_shared) w.attproj_b = w.fcproj_b = nullptr;
    BlockActivations<A>& act = kept_blocks(mb)[size_t(l - l0)];
    // Selective: the input half read none of the cheap buffers; the weight half reads all
    // three (the products' inputs), so they are rebuilt here, where the schedule runs it.
    if (slice_.recompute == Recompute::Selective) {
      Span recompute_span("recompute");
      act.swap_cheap(*working_block_);
      block_rebuild_cheap(ctx_, dims_, w, block_input(mb, l), act, B_, T_, R);
    }
    block_backward_weight(ctx_, dims_, block_tensors(layout_.block(l), gb, begin), w, block_input(mb, l), act,
                          mb.keep[size_t(l - l0)], scratch_, *hooks_, B_, T_, R);
    if (slice_.recompute == Recompute::Selective) act.swap_cheap(*working_block_);
    store_->release(unit, Pass::Backward);
    store_->grads_done(unit);
  }
  if (first_stage()) embedding_backward(mb, GE(layout_.wte()), GE(layout_.wpe()));  // weight gradients only
  store_->grads_done(embed);
  store_->release(embed, Pass::Backward);
  mb.input_done = false;
  mb.have_targets = false;
  release_blocks(slot);
}

template <class A>
size_t GPT2<A>::param_bytes() const {
  return params_.bytes();
}
template <class A>
size_t GPT2<A>::grad_bytes() const {
  return grads_.bytes();
}
template <class A>
size_t GPT2<A>::activation_bytes() const {
  size_t n = embedded_.bytes() + scratch_.bytes() + span_rows_.bytes();
  for (const MicroBatch& mb : slots_) {
    n += mb.input.bytes() + mb.head.bytes() + mb.d_resid.bytes() + mb.keep_d_lnf.bytes();
    for (const BlockGradInputs<A>& k : mb.keep) n += k.bytes();
    for (const BlockActivations<A>& b : mb.blocks) n += b.bytes();
    for (const DeviceArray<A>& o : mb.outputs) n += o.bytes();
  }
  return n + own_working_block_.bytes();
}

template class GPT2<float>;
template class GPT2<double>;
template class GPT2<bf16>;

}  // namespace gpt
