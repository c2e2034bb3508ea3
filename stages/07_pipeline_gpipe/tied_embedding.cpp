// The tied embedding's gradient summed between the first and the last stage; see
// tied_embedding.h.
#include "stages/07_pipeline_gpipe/tied_embedding.h"

#include "common/error.h"
#include "common/trace.h"
#include "stages/02_ddp/ring_allreduce.h"

namespace gpt {

std::unique_ptr<Communicator> tied_embedding_group(Communicator& pp) {
  const bool end = pp.rank() == 0 || pp.rank() == pp.size() - 1;
  std::unique_ptr<Communicator> group = pp.split(end ? 0 : 1, pp.rank());  // every rank of pp takes part
  if (!end || pp.size() == 1) return nullptr;
  return group;
}

template <class A>
TiedEmbeddingGrads<A>::TiedEmbeddingGrads(const ParamLayout& layout, Communicator* ends, WeightStore<A>& inner,
                                          Device device, bool every_backward)
    : layout_(layout), inner_(inner), ends_(ends), device_(device), every_backward_(every_backward) {
  invariant(!ends || layout.has_embeddings() || layout.has_head(),
            "TiedEmbeddingGrads: a chunk without wte has nothing to sum between the pipeline's ends");
}

template <class A>
void TiedEmbeddingGrads<A>::grads_done(int unit) {
  if (unit == ParamLayout::kEmbeddingUnit && every_backward_ && ends_) {
    held_ = true;  // summed and handed on once a step, at finish()
    return;
  }
  if (unit == ParamLayout::kEmbeddingUnit && last_ && !every_backward_) {
    invariant(!held_, "TiedEmbeddingGrads: finish() was not called after the last step");
    held_ = true;
    return;
  }
  inner_.grads_done(unit);  // a stage without wte, or a store that reduces every backward alone
}

template <class A>
void TiedEmbeddingGrads<A>::finish() {
  if (every_backward_ && !ends_) return;  // handed on after every backward already
  invariant(held_, "TiedEmbeddingGrads::finish: the step's last backward has not run");
  held_ = false;
  if (ends_) {
    Span span("tied_wte_grads", "comm");
    const ParamTensor& wte = layout_.find("wte");
    G* g = inner_.grads(ParamLayout::kEmbeddingUnit) + (wte.offset - layout_.unit(ParamLayout::kEmbeddingUnit).begin);
    invariant(ends_->size() == 2, "TiedEmbeddingGrads: the pipeline's ends are two ranks, not " +
                                      std::to_string(ends_->size()));
    ring_all_reduce(*ends_, device_, g, size_t(wte.numel), dtype_of<G>());
  }
  inner_.grads_done(ParamLayout::kEmbeddingUnit);
}

template <class A>
size_t TiedEmbeddingGrads<A>::summed_elements() const {
  return ends_ ? size_t(layout_.find("wte").numel) : 0;
}

template class TiedEmbeddingGrads<float>;
template class TiedEmbeddingGrads<bf16>;

}  // namespace gpt
