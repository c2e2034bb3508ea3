// GPT-2 forward and backward; see gpt2.h. Activation shapes (L layers, N = B*T rows):
//   encoded (N,C); per layer: ln1 (N,C) + mean/rstd (N), qkv (N,3C), atty (N,C),
//   att (the attention statistics: probabilities (B,NH,T,T) on the CPU, logsumexps
//   (B,NH,T) on the GPU), attproj (N,C), resid2 (N,C), ln2 (N,C) + mean/rstd, fch (N,4C),
//   fch_gelu (N,4C), fcproj (N,C), resid3 (N,C); then lnf (N,C), logits (N,Vp), losses (N).
// The backward walks the same list in reverse with one running residual gradient
// d_resid and scratch buffers reused by every layer.
#include "common/gpt2.h"

#include <algorithm>

#include "common/trace.h"
#include "kernels/cpu/bf16.h"
#include "kernels/ops.h"

namespace gpt {

template <class A>
GPT2<A>::GPT2(const ModelConfig& model, int batch, int seq_len, Device device, Precision precision,
              bool own_weights)
    : model_(model), layout_(model), B_(batch), T_(seq_len), device_(device), precision_(precision) {
  require(T_ <= model.block_size, "seq_len " + std::to_string(T_) + " exceeds block_size " +
                                      std::to_string(model.block_size));
  if constexpr (std::is_same_v<A, bf16>)
    require(device == Device::CUDA, "bf16 storage is for the GPU; the CPU emulates bf16 in float");
  if constexpr (std::is_same_v<A, double>)
    require(device == Device::CPU, "the double-precision model runs on the CPU only");
  const size_t L = model.n_layer, C = model.n_embd, N = size_t(B_) * T_, NH = model.n_head;
  const size_t Vp = model.padded_vocab();
  const Device d = device;
  if (own_weights) {
    params_ = DeviceArray<A>(d, layout_.total());
    grads_ = DeviceArray<G>(d, layout_.total());
  }
  flat_ = FlatStore<A>(layout_, params_.data(), grads_.data());
  const size_t att = ops::attention_stats_size(d, B_, T_, int(NH));
  encoded_ = DeviceArray<A>(d, N * C);
  ln1_ = DeviceArray<A>(d, L * N * C), ln1_mean_ = DeviceArray<G>(d, L * N), ln1_rstd_ = DeviceArray<G>(d, L * N);
  qkv_ = DeviceArray<A>(d, L * N * 3 * C), atty_ = DeviceArray<A>(d, L * N * C), att_ = DeviceArray<G>(d, L * att);
  attproj_ = DeviceArray<A>(d, L * N * C), resid2_ = DeviceArray<A>(d, L * N * C);
  ln2_ = DeviceArray<A>(d, L * N * C), ln2_mean_ = DeviceArray<G>(d, L * N), ln2_rstd_ = DeviceArray<G>(d, L * N);
  fch_ = DeviceArray<A>(d, L * N * 4 * C), fch_gelu_ = DeviceArray<A>(d, L * N * 4 * C);
  fcproj_ = DeviceArray<A>(d, L * N * C), resid3_ = DeviceArray<A>(d, L * N * C);
  lnf_ = DeviceArray<A>(d, N * C), lnf_mean_ = DeviceArray<G>(d, N), lnf_rstd_ = DeviceArray<G>(d, N);
  logits_ = DeviceArray<A>(d, N * Vp), losses_ = DeviceArray<G>(d, N);
  d_resid_ = DeviceArray<A>(d, N * C), d_x_ = DeviceArray<A>(d, N * C);
  d_big_ = DeviceArray<A>(d, N * 4 * C), d_big2_ = DeviceArray<A>(d, N * 4 * C);
  d_qkv_ = DeviceArray<A>(d, N * 3 * C), d_logits_ = DeviceArray<A>(d, N * Vp);
  inputs_ = DeviceArray<int32_t>(d, N), targets_ = DeviceArray<int32_t>(d, N);
  host_losses_.resize(N);
}

template <class A>
void GPT2<A>::store(A* x, size_t n) {
  if constexpr (std::is_same_v<A, float>)
    if (precision_ == Precision::BF16) ops::round_to_bf16(device_, x, n);
  (void)x, (void)n;
}

template <class A>
void GPT2<A>::set_params(const G* values) {
  require(!params_.empty(), "set_params: this model has no weight buffers of its own (own_weights=false)");
  if constexpr (std::is_same_v<A, bf16>) {
    ops::convert_to_bf16(device_, params_.data(), values, params_.size());
  } else {
    // The trainer's fp32 master weights may be these very parameters: no copy onto
    // itself (cudaMemcpy forbids overlapping ranges).
    if (values != params_.data()) device_copy(device_, params_.data(), device_, values, params_.bytes());
    store(params_.data(), params_.size());
  }
}

template <class A>
void GPT2<A>::zero_grads() {
  grads_.zero();
}

template <class A>
void GPT2<A>::logits_row(int position, float* out) const {
  const size_t Vp = size_t(model_.padded_vocab());
  if constexpr (std::is_same_v<A, float>) {
    logits_.copy_to_host(out, Vp, size_t(position) * Vp);
  } else {
    std::vector<A> row(Vp);
    logits_.copy_to_host(row.data(), Vp, size_t(position) * Vp);
    for (size_t i = 0; i < Vp; ++i) {
      if constexpr (std::is_same_v<A, bf16>) out[i] = cpu::bf16_to_float(row[i].bits);
      else out[i] = float(row[i]);
    }
  }
}

template <class A>
GradOf<A> GPT2<A>::forward(const int32_t* inputs, const int32_t* targets) {
  return forward_pass(inputs, targets, true);
}

template <class A>
GradOf<A> GPT2<A>::evaluate(const int32_t* inputs, const int32_t* targets) {
  require(targets != nullptr, "evaluate() needs targets");
  return forward_pass(inputs, targets, false);
}

template <class A>
GradOf<A> GPT2<A>::forward_pass(const int32_t* inputs, const int32_t* targets, bool for_backward) {
  Span span("forward");
  const Device d = device_;
  const int L = model_.n_layer, C = model_.n_embd, NH = model_.n_head;
  const int V = model_.vocab_size, Vp = model_.padded_vocab(), N = B_ * T_;
  const size_t NC = size_t(N) * C, att_size = ops::attention_stats_size(d, B_, T_, NH);
  for (int i = 0; i < N; ++i) {
    require(inputs[i] >= 0 && inputs[i] < V,
            "input token " + std::to_string(inputs[i]) + " is outside the vocabulary [0, " +
                std::to_string(V) + ")");
    if (targets)
      require(targets[i] >= 0 && targets[i] < V,
              "target token " + std::to_string(targets[i]) + " is outside the vocabulary");
  }
  inputs_.copy_from_host(inputs, size_t(N));
  have_targets_ = targets != nullptr && for_backward;
  if (targets) targets_.copy_from_host(targets, size_t(N));
  // Pointers into a unit: the store hands out the unit's first element, the layout
  // gives absolute offsets.
  const int embed = ParamLayout::kEmbeddingUnit, final = layout_.final_unit();
  const A* pe = store_->acquire(embed, Pass::Forward);
  auto PE = [&](int64_t off) { return pe + (off - layout_.unit(embed).begin); };

  ops::embedding_forward(d, encoded_.data(), inputs_.data(), PE(layout_.wte()), PE(layout_.wpe()), B_, T_, C);
  store(encoded_.data(), NC);
  for (int l = 0; l < L; ++l) {
    const BlockParams& w = layout_.block(l);
    const int unit = layout_.block_unit(l);
    const A* pb = store_->acquire(unit, Pass::Forward);
    auto P = [&](int64_t off) { return pb + (off - layout_.unit(unit).begin); };
    const A* x = l == 0 ? encoded_.data() : resid3_.data() + (l - 1) * NC;
    A* ln1 = ln1_.data() + l * NC;
    A* qkv = qkv_.data() + l * NC * 3;
    A* atty = atty_.data() + l * NC;
    G* att = att_.data() + l * att_size;
    A* attproj = attproj_.data() + l * NC;
    A* resid2 = resid2_.data() + l * NC;
    A* ln2 = ln2_.data() + l * NC;
    A* fch = fch_.data() + l * NC * 4;
    A* fch_gelu = fch_gelu_.data() + l * NC * 4;
    A* fcproj = fcproj_.data() + l * NC;
    A* resid3 = resid3_.data() + l * NC;

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
    // fch = ln2 . fc_w^T + fc_b and fch_gelu = gelu(fch) in one call (fused on the GPU).
    ops::matmul_forward(d, fch, ln2, P(w.fc_w), P(w.fc_b), N, C, 4 * C, fch_gelu);
    store(fch, NC * 4);
    store(fch_gelu, NC * 4);
    ops::matmul_forward(d, fcproj, fch_gelu, P(w.fcproj_w), P(w.fcproj_b), N, 4 * C, C);
    store(fcproj, NC);
    ops::residual_forward(d, resid3, resid2, fcproj, NC);
    store(resid3, NC);
    store_->release(unit, Pass::Forward);
  }
  const A* last = L > 0 ? resid3_.data() + (L - 1) * NC : encoded_.data();
  const A* pf = store_->acquire(final, Pass::Forward);
  auto PF = [&](int64_t off) { return pf + (off - layout_.unit(final).begin); };
  ops::layernorm_forward(d, lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), last,
                         PF(layout_.lnf_w()), PF(layout_.lnf_b()), N, C);
  store(lnf_.data(), NC);
  store_->release(final, Pass::Forward);
  ops::matmul_forward(d, logits_.data(), lnf_.data(), PE(layout_.wte()), static_cast<const A*>(nullptr),
                      N, C, Vp);
  store(logits_.data(), size_t(N) * Vp);
  store_->release(embed, Pass::Forward);
  if (!targets) return G(0);
  // The gradient of the mean loss is written now (fused), scaled in backward().
  ops::softmax_crossentropy(d, losses_.data(), for_backward ? d_logits_.data() : static_cast<A*>(nullptr),
                            logits_.data(), targets_.data(), 1.0, N, V, Vp);
  losses_.copy_to_host(host_losses_.data(), size_t(N));
  G sum = 0;
  for (int i = 0; i < N; ++i) sum += host_losses_[size_t(i)];
  return sum / G(N);
}

template <class A>
void GPT2<A>::backward(G loss_scale) {
  Span span("backward");
  require(have_targets_, "backward() needs a forward() with targets");
  const Device d = device_;
  const int L = model_.n_layer, C = model_.n_embd, NH = model_.n_head;
  const int Vp = model_.padded_vocab(), N = B_ * T_;
  const size_t NC = size_t(N) * C, att_size = ops::attention_stats_size(d, B_, T_, NH);
  const int embed = ParamLayout::kEmbeddingUnit, final = layout_.final_unit();
  const A* pe = store_->acquire(embed, Pass::Backward);
  const A* pf = store_->acquire(final, Pass::Backward);
  G* ge = store_->grads(embed);
  G* gf = store_->grads(final);
  auto PE = [&](int64_t off) { return pe + (off - layout_.unit(embed).begin); };
  auto GE = [&](int64_t off) { return ge + (off - layout_.unit(embed).begin); };
  auto PF = [&](int64_t off) { return pf + (off - layout_.unit(final).begin); };
  auto GF = [&](int64_t off) { return gf + (off - layout_.unit(final).begin); };
  auto zero = [](DeviceArray<A>& v) { v.zero(); };

  // d loss / d logits: forward() left dloss=1 per position; the mean over N positions
  // and the accumulation factor scale it.
  ops::scale(d, d_logits_.data(), d_logits_.size(), double(loss_scale / G(N)));
  store(d_logits_.data(), d_logits_.size());

  zero(d_x_);
  ops::matmul_backward(d, d_x_.data(), GE(layout_.wte()), static_cast<G*>(nullptr),
                       d_logits_.data(), lnf_.data(), PE(layout_.wte()), N, C, Vp);
  store(d_x_.data(), NC);
  const A* last = L > 0 ? resid3_.data() + (L - 1) * NC : encoded_.data();
  zero(d_resid_);
  ops::layernorm_backward(d, d_resid_.data(), GF(layout_.lnf_w()), GF(layout_.lnf_b()), d_x_.data(),
                          last, PF(layout_.lnf_w()), lnf_mean_.data(), lnf_rstd_.data(), N, C);
  store(d_resid_.data(), NC);
  store_->grads_done(final);
  store_->release(final, Pass::Backward);

  for (int l = L - 1; l >= 0; --l) {
    const BlockParams& w = layout_.block(l);
    const int unit = layout_.block_unit(l);
    const A* pb = store_->acquire(unit, Pass::Backward);
    G* gb = store_->grads(unit);
    auto P = [&](int64_t off) { return pb + (off - layout_.unit(unit).begin); };
    auto GB = [&](int64_t off) { return gb + (off - layout_.unit(unit).begin); };
    const A* x = l == 0 ? encoded_.data() : resid3_.data() + (l - 1) * NC;
    const A* ln1 = ln1_.data() + l * NC;
    const A* qkv = qkv_.data() + l * NC * 3;
    const A* atty = atty_.data() + l * NC;
    const G* att = att_.data() + l * att_size;
    const A* resid2 = resid2_.data() + l * NC;
    const A* ln2 = ln2_.data() + l * NC;
    const A* fch = fch_.data() + l * NC * 4;
    const A* fch_gelu = fch_gelu_.data() + l * NC * 4;

    // MLP: resid3 = resid2 + c_proj(gelu(c_fc(ln_2(resid2)))); d_resid holds d resid3.
    zero(d_big_);
    ops::matmul_backward(d, d_big_.data(), GB(w.fcproj_w), GB(w.fcproj_b), d_resid_.data(),
                         fch_gelu, P(w.fcproj_w), N, 4 * C, C);
    store(d_big_.data(), NC * 4);
    zero(d_big2_);
    ops::gelu_backward(d, d_big2_.data(), fch, d_big_.data(), NC * 4);
    store(d_big2_.data(), NC * 4);
    zero(d_x_);
    ops::matmul_backward(d, d_x_.data(), GB(w.fc_w), GB(w.fc_b), d_big2_.data(), ln2, P(w.fc_w),
                         N, C, 4 * C);
    store(d_x_.data(), NC);
    // The residual branch: d resid2 = d resid3 + (through ln_2), accumulated in place.
    ops::layernorm_backward(d, d_resid_.data(), GB(w.ln2_w), GB(w.ln2_b), d_x_.data(), resid2,
                            P(w.ln2_w), ln2_mean_.data() + l * N, ln2_rstd_.data() + l * N, N, C);
    store(d_resid_.data(), NC);

    // Attention: resid2 = x + c_proj(attn(c_attn(ln_1(x)))).
    zero(d_x_);
    ops::matmul_backward(d, d_x_.data(), GB(w.attproj_w), GB(w.attproj_b), d_resid_.data(), atty,
                         P(w.attproj_w), N, C, C);
    store(d_x_.data(), NC);
    zero(d_qkv_);
    ops::attention_backward(d, d_qkv_.data(), d_x_.data(), qkv, atty, att, B_, T_, C, NH);
    store(d_qkv_.data(), NC * 3);
    zero(d_x_);
    ops::matmul_backward(d, d_x_.data(), GB(w.qkv_w), GB(w.qkv_b), d_qkv_.data(), ln1, P(w.qkv_w),
                         N, C, 3 * C);
    store(d_x_.data(), NC);
    ops::layernorm_backward(d, d_resid_.data(), GB(w.ln1_w), GB(w.ln1_b), d_x_.data(), x,
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
  size_t n = 0;
  for (const DeviceArray<A>* v : {&encoded_, &ln1_, &qkv_, &atty_, &attproj_, &resid2_, &ln2_, &fch_,
                                  &fch_gelu_, &fcproj_, &resid3_, &lnf_, &logits_, &d_resid_, &d_x_,
                                  &d_big_, &d_big2_, &d_qkv_, &d_logits_})
    n += v->bytes();
  for (const DeviceArray<G>* v : {&ln1_mean_, &ln1_rstd_, &att_, &ln2_mean_, &ln2_rstd_, &lnf_mean_,
                                  &lnf_rstd_, &losses_})
    n += v->bytes();
  return n;
}

template class GPT2<float>;
template class GPT2<double>;
template class GPT2<bf16>;

}  // namespace gpt
