#include "common/decoder.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "common/memory.h"
#include "kernels/attention_view.h"
#include "kernels/ops.h"

namespace gpt {

template <class A>
CachedDecoder<A>::CacheHooks::CacheHooks(const ModelConfig& model, int capacity, Device device) {
  invariant(capacity >= 1 && capacity <= model.block_size,
            "CachedDecoder: capacity " + std::to_string(capacity) + " outside 1..block_size");
  const MemScope scope(MemKind::Activations);
  for (int l = 0; l < model.n_layer; ++l) cache_.emplace_back(device, size_t(capacity) * 2 * model.n_embd);
  if constexpr (!std::is_same_v<A, G>) {
    qkv_wide_ = DeviceArray<G>(device, size_t(3) * model.n_embd);
    out_wide_ = DeviceArray<G>(device, size_t(model.n_embd));
  }
}

template <class A>
void CachedDecoder<A>::CacheHooks::attention_forward(const PieceContext& ctx, A* out, G* lse, const A* qkv, int B,
                                                     int T, int width, int heads) {
  invariant(B == 1 && T == 1, "CachedDecoder: the model runs one token at a time");
  invariant(layer < int(cache_.size()), "CachedDecoder: more attention calls than layers in one step");
  const Device d = ctx.device;
  const size_t W = size_t(width);
  // The row [q | k | v] in the cache's type (bf16 mode: widened, exactly).
  const G* row = nullptr;
  if constexpr (std::is_same_v<A, G>) {
    row = qkv;
  } else {
    ops::convert_to_float(d, qkv_wide_.data(), qkv, 3 * W);
    row = qkv_wide_.data();
  }
  G* keys = cache_[size_t(layer)].data();  // row u: [k_u | v_u]
  device_copy(d, keys + size_t(position) * 2 * W, d, row + W, 2 * W * sizeof(G));
  // The one query at `position` against keys 0..position, causal by position as a ring
  // attention block is.
  AttentionView<G> view{};
  view.q = row, view.k = keys, view.v = keys + W;
  view.q_stride = 3 * W, view.kv_stride = 2 * W, view.out_stride = W;
  view.B = 1, view.Tq = 1, view.Tk = position + 1, view.NH = heads, view.hs = width / heads;
  view.q_pos0 = position, view.k_pos0 = 0;
  if constexpr (std::is_same_v<A, G>) {
    ops::attention_block_forward(d, view, out, lse);
  } else {
    ops::attention_block_forward(d, view, out_wide_.data(), lse);
    ops::convert_to_bf16(d, out, out_wide_.data(), W);  // one rounding, as the fused attention's
  }
  ++layer;
}

template <class A>
void CachedDecoder<A>::CacheHooks::attention_backward(const PieceContext&, A*, const A*, const A*, const A*,
                                                      const G*, int, int, int, int) {
  internal_error("CachedDecoder: generation runs no backward");
}

template <class A>
CachedDecoder<A>::CachedDecoder(const ModelConfig& model, int capacity, Device device, Precision precision)
    : capacity_(capacity),
      precision_(precision),
      uses_cache_(device == Device::CPU || model.n_embd / model.n_head <= kGpuBlockMaxHeadSize),
      hooks_(model, uses_cache_ ? capacity : 1, device),
      model_(model, 1, 1, device, precision, /*own_weights=*/true, [this] {
        ModelSlice<A> slice;
        slice.hooks = &hooks_;
        slice.positions = {0};
        slice.inference_only = true;
        return slice;
      }()) {
  invariant(capacity >= 1 && capacity <= model.block_size,
            "CachedDecoder: capacity " + std::to_string(capacity) + " outside 1..block_size");
}

template <class A>
void CachedDecoder<A>::step(int token, float* logits) {
  invariant(uses_cache_, "CachedDecoder: step() on a model whose heads the GPU's key blocks cannot take");
  invariant(length_ < capacity_, "CachedDecoder: the cache is full (reset it)");
  model_.set_positions({length_});
  hooks_.position = length_;
  hooks_.layer = 0;
  const int32_t input = token;
  model_.forward(&input, nullptr);
  invariant(hooks_.layer == model_.model().n_layer, "CachedDecoder: a layer ran without the cache's attention");
  model_.logits_row(0, logits);
  ++length_;
}

template <class A>
void CachedDecoder<A>::window_step(const int* tokens, int count, float* logits) {
  invariant(count >= 1 && count <= capacity_, "CachedDecoder: window_step of " + std::to_string(count) + " tokens");
  if (!window_)
    window_ = std::make_unique<ModelReader<A>>(model_.model(), model_.params().data(), 1, capacity_, model_.device(),
                                               precision_);
  // Causal attention ignores what follows the context, so the forward runs only its
  // `count` positions (GPT2::set_seq_len): on the CPU the same logits, bit for bit, as
  // the whole window's row count - 1.
  GPT2<A>& window = window_->model();
  window.set_seq_len(count);
  const std::vector<int32_t> input(tokens, tokens + count);
  window.forward(input.data(), nullptr);
  window.logits_row(count - 1, logits);
}

template class CachedDecoder<float>;
template class CachedDecoder<double>;
template class CachedDecoder<bf16>;

}  // namespace gpt
