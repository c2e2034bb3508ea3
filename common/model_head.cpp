// The head piece; see model_head.h.
#include "common/model_head.h"

#include "kernels/ops.h"

namespace gpt {

template <class A>
HeadActivations<A>::HeadActivations(Device d, int C, int rows, int full, VocabRange vocab, bool train) {
  const size_t R = rows, N = full, Vl = vocab.size();
  lnf = DeviceArray<A>(d, R * C), lnf_mean = DeviceArray<G>(d, R), lnf_rstd = DeviceArray<G>(d, R);
  if (full != rows) lnf_full = DeviceArray<A>(d, N * C);
  logits = DeviceArray<A>(d, N * Vl), losses = DeviceArray<G>(d, N);
  if (train) d_logits = DeviceArray<A>(d, N * Vl);
  row_max = DeviceArray<G>(d, N), row_sumexp = DeviceArray<G>(d, N), target_logit = DeviceArray<G>(d, N);
}

template <class A>
size_t HeadActivations<A>::bytes() const {
  return lnf.bytes() + lnf_full.bytes() + lnf_mean.bytes() + lnf_rstd.bytes() + logits.bytes() + losses.bytes() +
         d_logits.bytes() + row_max.bytes() + row_sumexp.bytes() + target_logit.bytes();
}

template <class A>
void head_forward(const PieceContext& ctx, const A* x, const A* lnf_w, const A* lnf_b, const A* wte_rows,
                  VocabRange vocab, HeadActivations<A>& act, ModelHooks<A>& hooks, int rows, int C) {
  const Device d = ctx.device;
  const int full = hooks.full_rows(rows);
  ops::layernorm_forward(d, act.lnf.data(), act.lnf_mean.data(), act.lnf_rstd.data(), x, lnf_w, lnf_b, rows, C);
  ctx.round(act.lnf.data(), size_t(rows) * C);
  A* gathered = act.lnf_full.empty() ? act.lnf.data() : act.lnf_full.data();
  const A* lnf = hooks.gather_input(Site::Head, act.lnf.data(), gathered, rows, C);
  ops::matmul_forward(d, act.logits.data(), lnf, wte_rows, static_cast<const A*>(nullptr), full, C, vocab.size());
  ctx.round(act.logits.data(), size_t(full) * vocab.size());
}

template <class A>
void head_loss(const PieceContext& ctx, HeadActivations<A>& act, const int32_t* targets, VocabRange vocab, int V,
               ModelHooks<A>& hooks, int rows) {
  const Device d = ctx.device;
  const int full = hooks.full_rows(rows), Vl = vocab.size();
  invariant(hooks.vocab_parallel() || vocab.begin == 0, "head_loss: a vocabulary range needs vocab-parallel hooks");
  ops::crossentropy_stats(d, act.row_max.data(), act.row_sumexp.data(), act.target_logit.data(), act.logits.data(),
                          targets, vocab.begin, V, full, Vl);
  if (hooks.vocab_parallel())
    hooks.vocab_reduce(act.row_max.data(), act.row_sumexp.data(), act.target_logit.data(), full);
  A* const no_gradient = nullptr;
  ops::crossentropy_from_stats(d, act.losses.data(), no_gradient, act.logits.data(), act.row_max.data(),
                               act.row_sumexp.data(), act.target_logit.data(), targets, 1.0, vocab.begin, V, full,
                               Vl);
}

template <class A>
void head_loss_gradient(const PieceContext& ctx, HeadActivations<A>& act, const int32_t* targets, VocabRange vocab,
                        int V, ModelHooks<A>& hooks, int rows, double dloss) {
  const Device d = ctx.device;
  const int full = hooks.full_rows(rows), Vl = vocab.size();
  invariant(!act.d_logits.empty(), "head_loss_gradient: these head activations were made without d_logits");
  // One pass over the kept logits, from the row statistics head_loss kept (and reduced):
  // the losses it writes are the ones head_loss wrote.
  ops::crossentropy_from_stats(d, act.losses.data(), act.d_logits.data(), act.logits.data(), act.row_max.data(),
                               act.row_sumexp.data(), act.target_logit.data(), targets, dloss, vocab.begin, V, full,
                               Vl);
  ctx.round(act.d_logits.data(), act.d_logits.size());
}

template <class A>
void head_backward(const PieceContext& ctx, const A* x, const A* lnf_w, const A* wte_rows, GradOf<A>* dlnf_w,
                   GradOf<A>* dlnf_b, GradOf<A>* dwte_rows, VocabRange vocab, HeadActivations<A>& act, A* d_x,
                   BlockScratch<A>& s, ModelHooks<A>& hooks, int rows, int C) {
  const Device d = ctx.device;
  const int full = hooks.full_rows(rows);
  const A* lnf = act.lnf_full.empty() ? act.lnf.data() : act.lnf_full.data();
  ops::matmul_backward(d, s.d_full.data(), dwte_rows, static_cast<GradOf<A>*>(nullptr), act.d_logits.data(), lnf,
                       wte_rows, full, C, vocab.size());
  ctx.round(s.d_full.data(), size_t(full) * C);
  A* d_lnf = hooks.reduce_input_grad(Site::Head, s.d_full.data(), s.local.empty() ? s.d_full.data() : s.local.data(),
                                     rows, C);
  ctx.round(d_lnf, size_t(rows) * C);
  device_zero(d, d_x, size_t(rows) * C * sizeof(A));
  ops::layernorm_backward(d, d_x, dlnf_w, dlnf_b, d_lnf, x, lnf_w, act.lnf_mean.data(), act.lnf_rstd.data(), rows,
                          C);
  ctx.round(d_x, size_t(rows) * C);
}

#define GPT_HEAD_INSTANTIATE(A)                                                                               \
  template struct HeadActivations<A>;                                                                         \
  template void head_forward<A>(const PieceContext&, const A*, const A*, const A*, const A*, VocabRange,      \
                                HeadActivations<A>&, ModelHooks<A>&, int, int);                               \
  template void head_loss<A>(const PieceContext&, HeadActivations<A>&, const int32_t*, VocabRange, int,       \
                             ModelHooks<A>&, int);                                                            \
  template void head_loss_gradient<A>(const PieceContext&, HeadActivations<A>&, const int32_t*, VocabRange,   \
                                      int, ModelHooks<A>&, int, double);                                      \
  template void head_backward<A>(const PieceContext&, const A*, const A*, const A*, GradOf<A>*, GradOf<A>*,   \
                                 GradOf<A>*, VocabRange, HeadActivations<A>&, A*, BlockScratch<A>&,           \
                                 ModelHooks<A>&, int, int);
GPT_HEAD_INSTANTIATE(float)
GPT_HEAD_INSTANTIATE(double)
GPT_HEAD_INSTANTIATE(bf16)
#undef GPT_HEAD_INSTANTIATE

}  // namespace gpt
