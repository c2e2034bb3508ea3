// GPT-2 forward and backward; see gpt2.h. Activation shapes (L layers, N = B*T rows):
//   encoded (N,C); per layer: ln1 (N,C) + mean/rstd (N), qkv (N,3C), atty (N,C),
//   att (B,NH,T,T), attproj (N,C), resid2 (N,C), ln2 (N,C) + mean/rstd, fch (N,4C),
//   fch_gelu (N,4C), fcproj (N,C), resid3 (N,C); then lnf (N,C), logits (N,Vp), losses (N).
// The backward walks the same list in reverse with one running residual gradient
// d_resid and scratch buffers reused by every layer.
#include "common/gpt2.h"

#include <algorithm>

#include "common/trace.h"
#include "kernels/ops.h"

namespace gpt {

template <class T>
GPT2<T>::GPT2(const ModelConfig& model, int batch, int seq_len, Device device, Precision precision,
              bool own_weights)
    : model_(model), layout_(model), B_(batch), T_(seq_len), device_(device), precision_(precision) {
  require(T_ <= model.block_size, "seq_len " + std::to_string(T_) + " exceeds block_size " +
                                      std::to_string(model.block_size));
  const size_t L = model.n_layer, C = model.n_embd, N = size_t(B_) * T_, NH = model.n_head;
  const size_t Vp = model.padded_vocab();
  if (own_weights) {
    params_.assign(layout_.total(), T(0));
    grads_.assign(layout_.total(), T(0));
  }
  flat_ = FlatStore<T>(layout_, params_.data(), grads_.data());
  encoded_.resize(N * C);
  ln1_.resize(L * N * C), ln1_mean_.resize(L * N), ln1_rstd_.resize(L * N);
  qkv_.resize(L * N * 3 * C), atty_.resize(L * N * C), att_.resize(L * B_ * NH * T_ * T_);
  attproj_.resize(L * N * C), resid2_.resize(L * N * C);
  ln2_.resize(L * N * C), ln2_mean_.resize(L * N), ln2_rstd_.resize(L * N);
  fch_.resize(L * N * 4 * C), fch_gelu_.resize(L * N * 4 * C);
  fcproj_.resize(L * N * C), resid3_.resize(L * N * C);
  lnf_.resize(N * C), lnf_mean_.resize(N), lnf_rstd_.resize(N);
  logits_.resize(N * Vp), losses_.resize(N);
  d_resid_.resize(N * C), d_x_.resize(N * C), d_big_.resize(N * 4 * C), d_big2_.resize(N * 4 * C);
  d_qkv_.resize(N * 3 * C), d_logits_.resize(N * Vp);
  inputs_.resize(N), targets_.resize(N);
}

template <class T>
void GPT2<T>::store(T* x, size_t n) {
  if (precision_ == Precision::BF16) ops::round_to_bf16(device_, x, n);
}

template <class T>
void GPT2<T>::set_params(const T* values) {
  require(!params_.empty(), "set_params: this model has no weight buffers of its own (own_weights=false)");
  std::copy(values, values + params_.size(), params_.begin());
  store(params_.data(), params_.size());
}

template <class T>
void GPT2<T>::zero_grads() {
  std::fill(grads_.begin(), grads_.end(), T(0));
}

template <class T>
T GPT2<T>::forward(const int32_t* inputs, const int32_t* targets) {
  Span span("forward");
  const Device d = device_;
  const int L = model_.n_layer, C = model_.n_embd, NH = model_.n_head;
  const int V = model_.vocab_size, Vp = model_.padded_vocab(), N = B_ * T_;
  const size_t NC = size_t(N) * C;
  for (int i = 0; i < N; ++i) {
    require(inputs[i] >= 0 && inputs[i] < V,
            "input token " + std::to_string(inputs[i]) + " is outside the vocabulary [0, " +
                std::to_string(V) + ")");
    if (targets)
      require(targets[i] >= 0 && targets[i] < V,
              "target token " + std::to_string(targets[i]) + " is outside the vocabulary");
  }
  std::copy(inputs, inputs + N, inputs_.begin());
  have_targets_ = targets != nullptr;
  if (targets) std::copy(targets, targets + N, targets_.begin());
  // Pointers into a unit: the store hands out the unit's first element, the layout
  // gives absolute offsets.
  const int embed = ParamLayout::kEmbeddingUnit, final = layout_.final_unit();
  const T* pe = store_->acquire(embed, Pass::Forward);
  auto PE = [&](int64_t off) { return pe + (off - layout_.unit(embed).begin); };

  ops::embedding_forward(d, encoded_.data(), inputs, PE(layout_.wte()), PE(layout_.wpe()), B_, T_, C);
  store(encoded_.data(), NC);
  for (int l = 0; l < L; ++l) {
    const BlockParams& w = layout_.block(l);
    const int unit = layout_.block_unit(l);
    const T* pb = store_->acquire(unit, Pass::Forward);
    auto P = [&](int64_t off) { return pb + (off - layout_.unit(unit).begin); };
    const T* x = l == 0 ? encoded_.data() : resid3_.data() + (l - 1) * NC;
    T* ln1 = ln1_.data() + l * NC;
    T* qkv = qkv_.data() + l * NC * 3;
    T* atty = atty_.data() + l * NC;
    T* att = att_.data() + size_t(l) * B_ * NH * T_ * T_;
    T* attproj = attproj_.data() + l * NC;
    T* resid2 = resid2_.data() + l * NC;
    T* ln2 = ln2_.data() + l * NC;
    T* fch = fch_.data() + l * NC * 4;
    T* fch_gelu = fch_gelu_.data() + l * NC * 4;
    T* fcproj = fcproj_.data() + l * NC;
    T* resid3 = resid3_.data() + l * NC;

    ops::layernorm_forward(d, ln1, ln1_mean_.data() + l * N, ln1_rstd_.data() + l * N, x,
                           P(w.ln1_w), P(w.ln1_b), N, C);
    store(ln1, NC);
    ops::matmul_forward(d, qkv, ln1, P(w.qkv_w), P(w.qkv_b), N, C, 3 * C);
    store(qkv, NC * 3);
    ops::attention_forward(d, atty, att, qkv, B_, T_, C, NH);
    store(atty, NC);
    ops::matmul_forward(d, attproj, atty, P(w.attproj_w), P(w.attproj_b), N, C, C);
    store(attproj, NC);
    ops::residual_forward(d, resid2, x, attproj, NC);
    store(resid2, NC);
    ops::layernorm_forward(d, ln2, ln2_mean_.data() + l * N, ln2_rstd_.data() + l * N, resid2,
                           P(w.ln2_w), P(w.ln2_b), N, C);
    store(ln2, NC);
    ops::matmul_forward(d, fch, ln2, P(w.fc_w), P(w.fc_b), N, C, 4 * C);
    store(fch, NC * 4);
    ops::gelu_forward(d, fch_gelu, fch, NC * 4);
    store(fch_gelu, NC * 4);
    ops::matmul_forward(d, fcproj, fch_gelu, P(w.fcproj_w), P(w.fcproj_b), N, 4 * C, C);
    store(fcproj, NC);
    ops::residual_forward(d, resid3, resid2, fcproj, NC);
    store(resid3, NC);
    store_->release(unit, Pass::Forward);
  }
  const T* last = L > 0 ? resid3_.data() + (L - 1) * NC : encoded_.data();
  const T* pf = store_->acquire(final, Pass::Forward);
  auto PF = [&](int64_t off) { return pf + (off - layout_.unit(final).begin); };
  ops::layernorm_forward(d, lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), last,
                         PF(layout_.lnf_w()), PF(layout_.lnf_b()), N, C);
  store(lnf_.data(), NC);
  store_->release(final, Pass::Forward);
  ops::matmul_forward(d, logits_.data(), lnf_.data(), PE(layout_.wte()), static_cast<const T*>(nullptr),
                      N, C, Vp);
  store(logits_.data(), size_t(N) * Vp);
  store_->release(embed, Pass::Forward);
  if (!targets) return T(0);
  // The gradient of the mean loss is written now (fused), scaled in backward().
  ops::softmax_crossentropy(d, losses_.data(), d_logits_.data(), logits_.data(), targets, T(1), N,
                            V, Vp);
  T sum = 0;
  for (int i = 0; i < N; ++i) sum += losses_[i];
  return sum / T(N);
}

template <class T>
void GPT2<T>::backward(T loss_scale) {
  Span span("backward");
  require(have_targets_, "backward() needs a forward() with targets");
  const Device d = device_;
  const int L = model_.n_layer, C = model_.n_embd, NH = model_.n_head;
  const int Vp = model_.padded_vocab(), N = B_ * T_;
  const size_t NC = size_t(N) * C;
  const int embed = ParamLayout::kEmbeddingUnit, final = layout_.final_unit();
  const T* pe = store_->acquire(embed, Pass::Backward);
  const T* pf = store_->acquire(final, Pass::Backward);
  T* ge = store_->grads(embed);
  T* gf = store_->grads(final);
  auto PE = [&](int64_t off) { return pe + (off - layout_.unit(embed).begin); };
  auto GE = [&](int64_t off) { return ge + (off - layout_.unit(embed).begin); };
  auto PF = [&](int64_t off) { return pf + (off - layout_.unit(final).begin); };
  auto GF = [&](int64_t off) { return gf + (off - layout_.unit(final).begin); };
  auto zero = [](std::vector<T>& v, size_t n) { std::fill(v.begin(), v.begin() + n, T(0)); };

  // d loss / d logits: forward() left dloss=1 per position; the mean over N positions
  // and the accumulation factor scale it.
  const T scale = loss_scale / T(N);
  for (size_t i = 0; i < d_logits_.size(); ++i) d_logits_[i] *= scale;
  store(d_logits_.data(), d_logits_.size());

  zero(d_x_, NC);
  ops::matmul_backward(d, d_x_.data(), GE(layout_.wte()), static_cast<T*>(nullptr),
                       d_logits_.data(), lnf_.data(), PE(layout_.wte()), N, C, Vp);
  store(d_x_.data(), NC);
  const T* last = L > 0 ? resid3_.data() + (L - 1) * NC : encoded_.data();
  zero(d_resid_, NC);
  ops::layernorm_backward(d, d_resid_.data(), GF(layout_.lnf_w()), GF(layout_.lnf_b()), d_x_.data(),
                          last, PF(layout_.lnf_w()), lnf_mean_.data(), lnf_rstd_.data(), N, C);
  store(d_resid_.data(), NC);
  store_->grads_done(final);
  store_->release(final, Pass::Backward);

  for (int l = L - 1; l >= 0; --l) {
    const BlockParams& w = layout_.block(l);
    const int unit = layout_.block_unit(l);
    const T* pb = store_->acquire(unit, Pass::Backward);
    T* gb = store_->grads(unit);
    auto P = [&](int64_t off) { return pb + (off - layout_.unit(unit).begin); };
    auto G = [&](int64_t off) { return gb + (off - layout_.unit(unit).begin); };
    const T* x = l == 0 ? encoded_.data() : resid3_.data() + (l - 1) * NC;
    const T* ln1 = ln1_.data() + l * NC;
    const T* qkv = qkv_.data() + l * NC * 3;
    const T* atty = atty_.data() + l * NC;
    const T* att = att_.data() + size_t(l) * B_ * NH * T_ * T_;
    const T* resid2 = resid2_.data() + l * NC;
    const T* ln2 = ln2_.data() + l * NC;
    const T* fch = fch_.data() + l * NC * 4;
    const T* fch_gelu = fch_gelu_.data() + l * NC * 4;

    // MLP: resid3 = resid2 + c_proj(gelu(c_fc(ln_2(resid2)))); d_resid holds d resid3.
    zero(d_big_, NC * 4);
    ops::matmul_backward(d, d_big_.data(), G(w.fcproj_w), G(w.fcproj_b), d_resid_.data(),
                         fch_gelu, P(w.fcproj_w), N, 4 * C, C);
    store(d_big_.data(), NC * 4);
    zero(d_big2_, NC * 4);
    ops::gelu_backward(d, d_big2_.data(), fch, d_big_.data(), NC * 4);
    store(d_big2_.data(), NC * 4);
    zero(d_x_, NC);
    ops::matmul_backward(d, d_x_.data(), G(w.fc_w), G(w.fc_b), d_big2_.data(), ln2, P(w.fc_w),
                         N, C, 4 * C);
    store(d_x_.data(), NC);
    // The residual branch: d resid2 = d resid3 + (through ln_2), accumulated in place.
    ops::layernorm_backward(d, d_resid_.data(), G(w.ln2_w), G(w.ln2_b), d_x_.data(), resid2,
                            P(w.ln2_w), ln2_mean_.data() + l * N, ln2_rstd_.data() + l * N, N, C);
    store(d_resid_.data(), NC);

    // Attention: resid2 = x + c_proj(attn(c_attn(ln_1(x)))).
    zero(d_x_, NC);
    ops::matmul_backward(d, d_x_.data(), G(w.attproj_w), G(w.attproj_b), d_resid_.data(), atty,
                         P(w.attproj_w), N, C, C);
    store(d_x_.data(), NC);
    zero(d_qkv_, NC * 3);
    ops::attention_backward(d, d_qkv_.data(), d_x_.data(), qkv, att, B_, T_, C, NH);
    store(d_qkv_.data(), NC * 3);
    zero(d_x_, NC);
    ops::matmul_backward(d, d_x_.data(), G(w.qkv_w), G(w.qkv_b), d_qkv_.data(), ln1, P(w.qkv_w),
                         N, C, 3 * C);
    store(d_x_.data(), NC);
    ops::layernorm_backward(d, d_resid_.data(), G(w.ln1_w), G(w.ln1_b), d_x_.data(), x,
                            P(w.ln1_w), ln1_mean_.data() + l * N, ln1_rstd_.data() + l * N, N, C);
    store(d_resid_.data(), NC);
    store_->release(unit, Pass::Backward);
    store_->grads_done(unit);
  }
  ops::embedding_backward(d, GE(layout_.wte()), GE(layout_.wpe()), d_resid_.data(), inputs_.data(),
                          B_, T_, C);
  store_->grads_done(embed);
  store_->release(embed, Pass::Backward);
  have_targets_ = false;  // d_logits was consumed
}

template <class T>
size_t GPT2<T>::param_bytes() const {
  return params_.size() * sizeof(T);
}
template <class T>
size_t GPT2<T>::grad_bytes() const {
  return grads_.size() * sizeof(T);
}
template <class T>
size_t GPT2<T>::activation_bytes() const {
  size_t n = 0;
  for (const std::vector<T>* v :
       {&encoded_, &ln1_, &ln1_mean_, &ln1_rstd_, &qkv_, &atty_, &att_, &attproj_, &resid2_, &ln2_,
        &ln2_mean_, &ln2_rstd_, &fch_, &fch_gelu_, &fcproj_, &resid3_, &lnf_, &lnf_mean_,
        &lnf_rstd_, &logits_, &losses_, &d_resid_, &d_x_, &d_big_, &d_big2_, &d_qkv_, &d_logits_})
    n += v->size();
  return n * sizeof(T);
}

template class GPT2<float>;
template class GPT2<double>;

}  // namespace gpt
