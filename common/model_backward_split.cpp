// A block's and the head's backward in two halves; see model_backward_split.h. The ops,
// their order and their arguments are block_backward's (model_block.cpp) and
// head_backward's (model_head.cpp). The input half runs them all with the weight
// gradients null, and with them the forward inputs only the weight gradients read; the
// weight half runs only the ops that produce weight gradients (the four matmuls' and the
// two layernorms'), with the input gradients null.
#include "common/model_backward_split.h"

#include "kernels/ops.h"

namespace gpt {

namespace {
template <class A>
void keep_copy(Device d, DeviceArray<A>& to, const A* from) {
  device_copy(d, to.data(), d, from, to.bytes());
}
}  // namespace

template <class A>
BlockGradInputs<A>::BlockGradInputs(Device d, const BlockDims& dims, int full, int rows) {
  const size_t C = dims.C, W = dims.attn_width(), F = dims.hidden, N = full, R = rows;
  d_mlp_out = DeviceArray<A>(d, N * C), d_fc = DeviceArray<A>(d, N * F), d_ln2 = DeviceArray<A>(d, R * C);
  d_att_out = DeviceArray<A>(d, N * C), d_qkv = DeviceArray<A>(d, N * 3 * W), d_ln1 = DeviceArray<A>(d, R * C);
}

template <class A>
size_t BlockGradInputs<A>::bytes() const {
  return d_mlp_out.bytes() + d_fc.bytes() + d_ln2.bytes() + d_att_out.bytes() + d_qkv.bytes() + d_ln1.bytes();
}

template <class A>
void block_backward_input(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w, const A* x,
                          const BlockActivations<A>& act, A* d_resid, BlockGradInputs<A>& keep, BlockScratch<A>& s,
                          ModelHooks<A>& hooks, int B, int T, int rows) {
  using G = GradOf<A>;
  G* const none = nullptr;  // the weight gradients: the other half
  const Device d = ctx.device;
  const int C = dims.C, W = dims.attn_width(), F = dims.hidden, N = B * T;
  const size_t RC = size_t(rows) * C, NC = size_t(N) * C;

  // MLP.
  const A* d_out = hooks.gather_output_grad(Site::Mlp, d_resid, s.d_full.data(), rows, C);
  keep_copy(d, keep.d_mlp_out, d_out);
  // No weight gradient, so no input: fch_gelu is the weight half's (under selective
  // recompute it is not even there in this half).
  ops::matmul_backward(d, s.d_fch_gelu.data(), none, none, d_out, static_cast<const A*>(nullptr), w.fcproj_w, N, F, C);
  ctx.round(s.d_fch_gelu.data(), size_t(N) * F);
  ops::gelu_backward(d, s.d_fch.data(), act.fch.data(), s.d_fch_gelu.data(), size_t(N) * F);
  ctx.round(s.d_fch.data(), size_t(N) * F);
  keep_copy(d, keep.d_fc, s.d_fch.data());
  ops::matmul_backward(d, s.d_full.data(), none, none, s.d_fch.data(), static_cast<const A*>(nullptr), w.fc_w, N,
                       C, F);
  ctx.round(s.d_full.data(), NC);
  A* d_ln2 = hooks.reduce_input_grad(Site::Mlp, s.d_full.data(), full_or(s.local, s.d_full), rows, C);
  ctx.round(d_ln2, RC);
  keep_copy(d, keep.d_ln2, d_ln2);
  ops::layernorm_backward(d, d_resid, none, none, d_ln2, act.resid2.data(), w.ln2_w, act.ln2_mean.data(),
                          act.ln2_rstd.data(), rows, C);
  ctx.round(d_resid, RC);

  // Attention.
  d_out = hooks.gather_output_grad(Site::Attention, d_resid, s.d_full.data(), rows, C);
  keep_copy(d, keep.d_att_out, d_out);
  ops::matmul_backward(d, s.d_att.data(), none, none, d_out, act.atty.data(), w.attproj_w, N, W, C);
  ctx.round(s.d_att.data(), size_t(N) * W);
  s.d_qkv.zero();
  hooks.attention_backward(ctx, s.d_qkv.data(), s.d_att.data(), act.qkv.data(), act.atty.data(),
                           act.att_lse.data(), B, T, W, dims.heads);
  ctx.round(s.d_qkv.data(), size_t(N) * 3 * W);
  keep_copy(d, keep.d_qkv, s.d_qkv.data());
  ops::matmul_backward(d, s.d_full.data(), none, none, s.d_qkv.data(), static_cast<const A*>(nullptr), w.qkv_w, N,
                       C, 3 * W);
  ctx.round(s.d_full.data(), NC);
  A* d_ln1 = hooks.reduce_input_grad(Site::Attention, s.d_full.data(), full_or(s.local, s.d_full), rows, C);
  ctx.round(d_ln1, RC);
  keep_copy(d, keep.d_ln1, d_ln1);
  ops::layernorm_backward(d, d_resid, none, none, d_ln1, x, w.ln1_w, act.ln1_mean.data(), act.ln1_rstd.data(),
                          rows, C);
  ctx.round(d_resid, RC);
}

template <class A>
void block_backward_weight(const PieceContext& ctx, const BlockDims& dims, const BlockGrads<A>& g,
                           const BlockWeights<A>& w, const A* x, const BlockActivations<A>& act,
                           const BlockGradInputs<A>& keep, BlockScratch<A>& s, ModelHooks<A>& hooks, int B, int T,
                           int rows) {
  A* const none = nullptr;  // the input gradients: the other half
  const Device d = ctx.device;
  const int C = dims.C, W = dims.attn_width(), F = dims.hidden, N = B * T;
  (void)T;
  ops::matmul_backward(d, none, g.fcproj_w, g.fcproj_b, keep.d_mlp_out.data(), act.fch_gelu.data(), w.fcproj_w, N, F,
                       C);
  // c_fc's weight gradient needs its input on all rows: gathered again under sequence parallelism.
  const A* ln2 = hooks.gather_input(Site::Mlp, act.ln2.data(), full_or(s.gathered, act.ln2), rows, C);
  ops::matmul_backward(d, none, g.fc_w, g.fc_b, keep.d_fc.data(), ln2, w.fc_w, N, C, F);
  ops::layernorm_backward(d, none, g.ln2_w, g.ln2_b, keep.d_ln2.data(), act.resid2.data(), w.ln2_w,
                          act.ln2_mean.data(), act.ln2_rstd.data(), rows, C);
  ops::matmul_backward(d, none, g.attproj_w, g.attproj_b, keep.d_att_out.data(), act.atty.data(), w.attproj_w, N, W,
                       C);
  const A* ln1 = hooks.gather_input(Site::Attention, act.ln1.data(), full_or(s.gathered, act.ln1), rows, C);
  ops::matmul_backward(d, none, g.qkv_w, g.qkv_b, keep.d_qkv.data(), ln1, w.qkv_w, N, C, 3 * W);
  ops::layernorm_backward(d, none, g.ln1_w, g.ln1_b, keep.d_ln1.data(), x, w.ln1_w, act.ln1_mean.data(),
                          act.ln1_rstd.data(), rows, C);
}

template <class A>
void head_backward_input(const PieceContext& ctx, const A* x, const A* lnf_w, const A* wte_rows, VocabRange vocab,
                         HeadActivations<A>& act, A* d_x, DeviceArray<A>& keep_d_lnf,
                         BlockScratch<A>& s, ModelHooks<A>& hooks, int rows, int C) {
  using G = GradOf<A>;
  G* const none = nullptr;
  const Device d = ctx.device;
  const int full = hooks.full_rows(rows);
  ops::matmul_backward(d, s.d_full.data(), none, none, act.d_logits.data(), static_cast<const A*>(nullptr), wte_rows,
                       full, C, vocab.size());
  ctx.round(s.d_full.data(), size_t(full) * C);
  A* d_lnf = hooks.reduce_input_grad(Site::Head, s.d_full.data(), s.local.empty() ? s.d_full.data() : s.local.data(),
                                     rows, C);
  ctx.round(d_lnf, size_t(rows) * C);
  keep_copy(d, keep_d_lnf, d_lnf);
  device_zero(d, d_x, size_t(rows) * C * sizeof(A));
  ops::layernorm_backward(d, d_x, none, none, d_lnf, x, lnf_w, act.lnf_mean.data(), act.lnf_rstd.data(), rows, C);
  ctx.round(d_x, size_t(rows) * C);
}

template <class A>
void head_backward_weight(const PieceContext& ctx, const A* x, const A* lnf_w, const A* wte_rows,
                          GradOf<A>* dlnf_w, GradOf<A>* dlnf_b, GradOf<A>* dwte_rows, VocabRange vocab,
                          const HeadActivations<A>& act, const DeviceArray<A>& keep_d_lnf, int rows, int C) {
  A* const none = nullptr;
  const Device d = ctx.device;
  const int full = int(act.losses.size());  // the logits' rows
  const A* lnf = act.lnf_full.empty() ? act.lnf.data() : act.lnf_full.data();
  ops::matmul_backward(d, none, dwte_rows, static_cast<GradOf<A>*>(nullptr), act.d_logits.data(), lnf, wte_rows, full,
                       C, vocab.size());
  ops::layernorm_backward(d, none, dlnf_w, dlnf_b, keep_d_lnf.data(), x, lnf_w, act.lnf_mean.data(),
                          act.lnf_rstd.data(), rows, C);
}

#define GPT_SPLIT_INSTANTIATE(A)                                                                                    \
  template struct BlockGradInputs<A>;                                                                               \
  template void block_backward_input<A>(const PieceContext&, const BlockDims&, const BlockWeights<A>&, const A*,    \
                                        const BlockActivations<A>&, A*, BlockGradInputs<A>&, BlockScratch<A>&,      \
                                        ModelHooks<A>&, int, int, int);                                             \
  template void block_backward_weight<A>(const PieceContext&, const BlockDims&, const BlockGrads<A>&,               \
                                         const BlockWeights<A>&, const A*, const BlockActivations<A>&,              \
                                         const BlockGradInputs<A>&, BlockScratch<A>&, ModelHooks<A>&, int, int, int); \
  template void head_backward_input<A>(const PieceContext&, const A*, const A*, const A*, VocabRange,               \
                                       HeadActivations<A>&, A*, DeviceArray<A>&, BlockScratch<A>&,                  \
                                       ModelHooks<A>&, int, int);                                                   \
  template void head_backward_weight<A>(const PieceContext&, const A*, const A*, const A*, GradOf<A>*, GradOf<A>*,  \
                                        GradOf<A>*, VocabRange, const HeadActivations<A>&, const DeviceArray<A>&,   \
                                        int, int);
GPT_SPLIT_INSTANTIATE(float)
GPT_SPLIT_INSTANTIATE(double)
GPT_SPLIT_INSTANTIATE(bf16)
#undef GPT_SPLIT_INSTANTIATE

}  // namespace gpt
