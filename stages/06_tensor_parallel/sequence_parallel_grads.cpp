// The layernorm gradients of sequence parallelism summed over tp; see sequence_parallel_grads.h.
#include "stages/06_tensor_parallel/sequence_parallel_grads.h"

#include <algorithm>

#include "common/memory.h"
#include "common/trace.h"

namespace gpt {

template <class A>
std::vector<std::pair<int64_t, int64_t>> SequenceParallelGrads<A>::layernorms(int unit) const {
  const int64_t C = layout_.model().n_embd;
  if (unit == ParamLayout::kEmbeddingUnit) return {};
  if (unit == layout_.final_unit()) {
    if (!layout_.has_head()) return {};  // a pipeline stage before the last: no ln_f
    return {{layout_.lnf_w(), C}, {layout_.lnf_b(), C}};
  }
  const BlockParams& b = layout_.block(layout_.layer_begin() + unit - 1);
  return {{b.ln1_w, C}, {b.ln1_b, C}, {b.ln2_w, C}, {b.ln2_b, C}};
}

template <class A>
void SequenceParallelGrads<A>::grads_done(int unit) {
  const auto parts = layernorms(unit);
  if (sum_ && !parts.empty()) {
    Span span("tp_layernorm_grads", "comm");
    G* g = inner_.grads(unit) - layout_.unit(unit).begin;  // grads() points at the unit's first element
    size_t total = 0;
    for (auto [offset, n] : parts) total += size_t(n);
    if (packed_.size() < total) {
      const MemScope scope(MemKind::Buffers);
      packed_ = DeviceArray<G>(device_, total);
    }
    size_t at = 0;
    for (auto [offset, n] : parts) {
      device_copy(device_, packed_.data() + at, device_, g + offset, size_t(n) * sizeof(G));
      at += size_t(n);
    }
    tp_.all_reduce(packed_.data(), total, dtype_of<G>());
    at = 0;
    for (auto [offset, n] : parts) {
      device_copy(device_, g + offset, device_, packed_.data() + at, size_t(n) * sizeof(G));
      at += size_t(n);
    }
  }
  inner_.grads_done(unit);
}

template class SequenceParallelGrads<float>;
template class SequenceParallelGrads<double>;
template class SequenceParallelGrads<bf16>;

}  // namespace gpt
