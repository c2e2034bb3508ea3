/// @file
/// A model that reads another's weights: an inference-only GPT2 with no weights of its
/// own, whose FlatStore points at compute weights held elsewhere (a GPT2's params(), or a
/// whole copy gathered from the ranks). The sampler's window and the multiple-choice
/// scorer run forwards of other shapes than the model that holds the weights (other
/// batch and window sizes) without a second copy of them.
#pragma once
#include "common/gpt2.h"

namespace gpt {

/// An inference-only GPT2 of `batch` sequences of `seq_len` tokens over `weights` (the
/// whole model's compute weights, layout ParamLayout(model), in `device`'s memory), which
/// must outlive it. Not copyable or movable: the store points into the model.
template <class A>
class ModelReader {
 public:
  /// Makes the model (no weights, no gradients) and points its store at `weights`.
  ModelReader(const ModelConfig& model, const A* weights, int batch, int seq_len, Device device, Precision precision)
      : model_(model, batch, seq_len, device, precision, /*own_weights=*/false, inference_slice()),
        // An inference-only model runs no backward, so nothing writes through the pointer.
        store_(model_.layout(), const_cast<A*>(weights), nullptr) {
    model_.set_store(&store_);
  }
  ModelReader(const ModelReader&) = delete;
  ModelReader& operator=(const ModelReader&) = delete;

  GPT2<A>& model() { return model_; }  ///< the forward-only model reading the weights

 private:
  static ModelSlice<A> inference_slice() {
    ModelSlice<A> slice;
    slice.inference_only = true;
    return slice;
  }
  GPT2<A> model_;
  FlatStore<A> store_;
};

}  // namespace gpt
