// The GPT-2 parameter table; see gpt2_layout.h for the order and the initialisation.
#include "common/gpt2_layout.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/cpu/parallel.h"

namespace gpt {

int64_t ParamLayout::add(const std::string& name, std::vector<int64_t> shape, int layer, bool decay,
                         Init init, double std) {
  ParamTensor t;
  t.name = name;
  t.numel = 1;
  for (int64_t s : shape) t.numel *= s;
  t.shape = std::move(shape);
  t.offset = total_;
  t.layer = layer;
  t.decay = decay;
  t.init = init;
  t.init_std = std;
  t.init_rows = t.shape[0];
  total_ += t.numel;
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

ParamLayout::ParamLayout(const ModelConfig& m) : ParamLayout(m, 1, 0, LayerRange{}) {}

ParamLayout::ParamLayout(const ModelConfig& m, int tp, int tp_rank) : ParamLayout(m, tp, tp_rank, LayerRange{}) {}

ParamLayout::ParamLayout(const ModelConfig& m, int tp, int tp_rank, LayerRange layers)
    : model_(m), tp_(tp), l0_(layers.begin), l1_(layers.end < 0 ? m.n_layer : layers.end) {
  require(tp >= 1 && m.n_head % tp == 0, "tp=" + std::to_string(tp) + " must divide n_head=" + std::to_string(m.n_head) +
                                             " (each tensor-parallel rank takes whole heads)");
  invariant(tp_rank >= 0 && tp_rank < tp, "ParamLayout: tp rank " + std::to_string(tp_rank) + " of " + std::to_string(tp));
  const int64_t C = m.n_embd, L = m.n_layer, W = C / tp, F = 4 * C / tp;
  invariant(0 <= l0_ && l0_ < l1_ && l1_ <= L, "ParamLayout: layers [" + std::to_string(l0_) + ", " +
                                                  std::to_string(l1_) + ") of " + std::to_string(L));
  const VocabRange vocab = vocab_range(m, tp, tp_rank);
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * double(L));
  if (has_embeddings() || has_head()) {
    wte_ = add("wte", {vocab.size(), C}, -1, true, Init::Normal, std);
    tensors_.back().init_rows = m.vocab_size - vocab.begin;  // padding rows stay zero
  }
  if (has_embeddings()) wpe_ = add("wpe", {m.block_size, C}, -1, true, Init::Normal, std);
  units_.push_back({0, total_});
  for (int l = l0_; l < l1_; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    BlockParams b;
    b.ln1_w = add(p + "ln_1.weight", {C}, l, false, Init::Ones);
    b.ln1_b = add(p + "ln_1.bias", {C}, l, false, Init::Zeros);
    b.qkv_w = add(p + "attn.c_attn.weight", {3 * W, C}, l, true, Init::Normal, std);
    b.qkv_b = add(p + "attn.c_attn.bias", {3 * W}, l, false, Init::Zeros);
    b.attproj_w = add(p + "attn.c_proj.weight", {C, W}, l, true, Init::Normal, proj_std);
    b.attproj_b = add(p + "attn.c_proj.bias", {C}, l, false, Init::Zeros);
    b.ln2_w = add(p + "ln_2.weight", {C}, l, false, Init::Ones);
    b.ln2_b = add(p + "ln_2.bias", {C}, l, false, Init::Zeros);
    b.fc_w = add(p + "mlp.c_fc.weight", {F, C}, l, true, Init::Normal, std);
    b.fc_b = add(p + "mlp.c_fc.bias", {F}, l, false, Init::Zeros);
    b.fcproj_w = add(p + "mlp.c_proj.weight", {C, F}, l, true, Init::Normal, proj_std);
    b.fcproj_b = add(p + "mlp.c_proj.bias", {C}, l, false, Init::Zeros);
    blocks_.push_back(b);
    units_.push_back({b.ln1_w, total_});
  }
  const int64_t final_begin = total_;
  if (has_head()) {
    lnf_w_ = add("ln_f.weight", {C}, -1, false, Init::Ones);
    lnf_b_ = add("ln_f.bias", {C}, -1, false, Init::Zeros);
  }
  units_.push_back({final_begin, total_});
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const ParamTensor& t : tensors_)
    if (t.name == name) return t;
  fail("no parameter tensor named '" + name + "' in the GPT-2 layout");
}

template <class T>
void ParamLayout::init_range(uint64_t seed, int64_t begin, int64_t end, T* out) const {
  invariant(is_whole(), "ParamLayout::init_range: a tensor-parallel slice or a pipeline stage initialises through RankLayout::init");
  for (const ParamTensor& t : tensors_) {
    const int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    const uint64_t stream = stream_id(t.name);
    const int64_t row = t.numel / t.shape[0];
#pragma omp parallel for schedule(static) if (parallel : cpu::worth_threads(double(hi - lo)))
    for (int64_t g = lo; g < hi; ++g) {
      const int64_t i = g - t.offset;  // index within the tensor: the RNG counter
      double value = 0.0;
      if (t.init == Init::Ones) value = 1.0;
      else if (t.init == Init::Normal && i / row < t.init_rows)
        value = t.init_std * normal_at(seed, stream, uint64_t(i));
      out[g - begin] = T(float(value));  // an fp32 number in every precision (the header says why)
    }
  }
}

template void ParamLayout::init_range<float>(uint64_t, int64_t, int64_t, float*) const;
template void ParamLayout::init_range<double>(uint64_t, int64_t, int64_t, double*) const;

}  // namespace gpt
