// A transformer block; see model_block.h. With full = rows and the default hooks every
// step below is stage 01's original sequence of ops, so the single-device model's bits
// do not depend on the pieces being pieces.
#include "common/model_block.h"

#include "common/trace.h"
#include "kernels/ops.h"

namespace gpt {

template <class A>
BlockActivations<A>::BlockActivations(Device d, const BlockDims& dims, int B, int T, int rows, BlockBuffers which) {
  const size_t C = dims.C, W = dims.attn_width(), F = dims.hidden, R = rows, N = size_t(B) * T;
  if (which != BlockBuffers::AllButCheap) {
    ln1 = DeviceArray<A>(d, R * C), ln2 = DeviceArray<A>(d, R * C);
    fch_gelu = DeviceArray<A>(d, N * F);
  }
  if (which == BlockBuffers::Cheap) return;
  ln1_mean = DeviceArray<G>(d, R), ln1_rstd = DeviceArray<G>(d, R);
  qkv = DeviceArray<A>(d, N * 3 * W), atty = DeviceArray<A>(d, N * W);
  att_lse = DeviceArray<G>(d, ops::attention_stats_size(d, B, T, dims.heads));
  resid2 = DeviceArray<A>(d, R * C);
  ln2_mean = DeviceArray<G>(d, R), ln2_rstd = DeviceArray<G>(d, R);
  fch = DeviceArray<A>(d, N * F);
  resid3 = DeviceArray<A>(d, R * C);
}

template <class A>
size_t BlockActivations<A>::bytes() const {
  size_t n = 0;
  for (const DeviceArray<A>* v : {&ln1, &qkv, &atty, &resid2, &ln2, &fch, &fch_gelu, &resid3})
    n += v->bytes();
  for (const DeviceArray<G>* v : {&ln1_mean, &ln1_rstd, &att_lse, &ln2_mean, &ln2_rstd}) n += v->bytes();
  return n;
}

template <class A>
BlockScratch<A>::BlockScratch(Device d, const BlockDims& dims, int full, int rows) {
  const size_t C = dims.C, W = dims.attn_width(), F = dims.hidden, N = full;
  partial = DeviceArray<A>(d, N * C);
  if (full != rows) local = DeviceArray<A>(d, size_t(rows) * C), gathered = DeviceArray<A>(d, N * C);
  d_full = DeviceArray<A>(d, N * C);
  d_att = DeviceArray<A>(d, N * W);
  d_qkv = DeviceArray<A>(d, N * 3 * W);
  d_fch_gelu = DeviceArray<A>(d, N * F), d_fch = DeviceArray<A>(d, N * F);
}

template <class A>
size_t BlockScratch<A>::bytes() const {
  return partial.bytes() + local.bytes() + gathered.bytes() + d_full.bytes() + d_att.bytes() + d_qkv.bytes() +
         d_fch_gelu.bytes() + d_fch.bytes();
}

template <class A>
void block_forward(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w, const A* x,
                   BlockActivations<A>& act, BlockScratch<A>& s, ModelHooks<A>& hooks, int B, int T, int rows) {
  const Device d = ctx.device;
  const int C = dims.C, W = dims.attn_width(), F = dims.hidden, N = B * T;
  const size_t RC = size_t(rows) * C, NC = size_t(N) * C;

  // Attention sub-block.
  ops::layernorm_forward(d, act.ln1.data(), act.ln1_mean.data(), act.ln1_rstd.data(), x, w.ln1_w, w.ln1_b,
                         rows, C);
  ctx.round(act.ln1.data(), RC);
  const A* ln1 = hooks.gather_input(Site::Attention, act.ln1.data(), full_or(s.gathered, act.ln1), rows, C);
  ops::matmul_forward(d, act.qkv.data(), ln1, w.qkv_w, w.qkv_b, N, C, 3 * W);
  ctx.round(act.qkv.data(), size_t(N) * 3 * W);
  hooks.attention_forward(ctx, act.atty.data(), act.att_lse.data(), act.qkv.data(), B, T, W, dims.heads);
  ctx.round(act.atty.data(), size_t(N) * W);
  ops::matmul_forward(d, s.partial.data(), act.atty.data(), w.attproj_w, w.attproj_b, N, W, C);
  ctx.round(s.partial.data(), NC);
  A* attproj = hooks.reduce_output(Site::Attention, s.partial.data(), full_or(s.local, s.partial), rows, C);
  ctx.round(attproj, RC);
  ops::residual_forward(d, act.resid2.data(), x, attproj, RC);
  ctx.round(act.resid2.data(), RC);

  // MLP sub-block. c_fc and its GELU in one call (fused on the GPU).
  ops::layernorm_forward(d, act.ln2.data(), act.ln2_mean.data(), act.ln2_rstd.data(), act.resid2.data(),
                         w.ln2_w, w.ln2_b, rows, C);
  ctx.round(act.ln2.data(), RC);
  const A* ln2 = hooks.gather_input(Site::Mlp, act.ln2.data(), full_or(s.gathered, act.ln2), rows, C);
  ops::matmul_forward(d, act.fch.data(), ln2, w.fc_w, w.fc_b, N, C, F, act.fch_gelu.data());
  ctx.round(act.fch.data(), size_t(N) * F);
  ctx.round(act.fch_gelu.data(), size_t(N) * F);
  ops::matmul_forward(d, s.partial.data(), act.fch_gelu.data(), w.fcproj_w, w.fcproj_b, N, F, C);
  ctx.round(s.partial.data(), NC);
  A* fcproj = hooks.reduce_output(Site::Mlp, s.partial.data(), full_or(s.local, s.partial), rows, C);
  ctx.round(fcproj, RC);
  ops::residual_forward(d, act.resid3.data(), act.resid2.data(), fcproj, RC);
  ctx.round(act.resid3.data(), RC);
}

template <class A>
void block_rebuild_cheap(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w, const A* x,
                         BlockActivations<A>& act, int B, int T, int rows) {
  const Device d = ctx.device;
  const int C = dims.C;
  const size_t RC = size_t(rows) * C, NF = size_t(B) * T * dims.hidden;
  // The statistics are written again too, with the bits they already hold.
  ops::layernorm_forward(d, act.ln1.data(), act.ln1_mean.data(), act.ln1_rstd.data(), x, w.ln1_w, w.ln1_b,
                         rows, C);
  ctx.round(act.ln1.data(), RC);
  ops::layernorm_forward(d, act.ln2.data(), act.ln2_mean.data(), act.ln2_rstd.data(), act.resid2.data(),
                         w.ln2_w, w.ln2_b, rows, C);
  ctx.round(act.ln2.data(), RC);
  ops::gelu_forward(d, act.fch_gelu.data(), act.fch.data(), NF);
  ctx.round(act.fch_gelu.data(), NF);
}

template <class A>
void block_backward(const PieceContext& ctx, const BlockDims& dims, const BlockWeights<A>& w,
                    const BlockGrads<A>& g, const A* x, const BlockActivations<A>& act, A* d_resid,
                    BlockScratch<A>& s, ModelHooks<A>& hooks, int B, int T, int rows) {
  const Device d = ctx.device;
  const int C = dims.C, W = dims.attn_width(), F = dims.hidden, N = B * T;
  const size_t RC = size_t(rows) * C, NC = size_t(N) * C;

  // MLP: d_resid holds d resid3; the residual passes it to resid2 unchanged, and the
  // branch adds its part through ln_2.
  const A* d_out = hooks.gather_output_grad(Site::Mlp, d_resid, s.d_full.data(), rows, C);
  ops::matmul_backward(d, s.d_fch_gelu.data(), g.fcproj_w, g.fcproj_b, d_out, act.fch_gelu.data(), w.fcproj_w,
                       N, F, C);
  ctx.round(s.d_fch_gelu.data(), size_t(N) * F);
  ops::gelu_backward(d, s.d_fch.data(), act.fch.data(), s.d_fch_gelu.data(), size_t(N) * F);
  ctx.round(s.d_fch.data(), size_t(N) * F);
  // c_fc's weight gradient needs its input on all rows: under sequence parallelism the
  // gathered copy was not kept (it would cost N x C per layer), so it is gathered again.
  const A* ln2 = hooks.gather_input(Site::Mlp, act.ln2.data(), full_or(s.gathered, act.ln2), rows, C);
  ops::matmul_backward(d, s.d_full.data(), g.fc_w, g.fc_b, s.d_fch.data(), ln2, w.fc_w, N, C, F);
  ctx.round(s.d_full.data(), NC);
  A* d_ln2 = hooks.reduce_input_grad(Site::Mlp, s.d_full.data(), full_or(s.local, s.d_full), rows, C);
  ctx.round(d_ln2, RC);
  ops::layernorm_backward(d, d_resid, g.ln2_w, g.ln2_b, d_ln2, act.resid2.data(), w.ln2_w, act.ln2_mean.data(),
                          act.ln2_rstd.data(), rows, C);
  ctx.round(d_resid, RC);

  // Attention: d_resid now holds d resid2.
  d_out = hooks.gather_output_grad(Site::Attention, d_resid, s.d_full.data(), rows, C);
  ops::matmul_backward(d, s.d_att.data(), g.attproj_w, g.attproj_b, d_out, act.atty.data(), w.attproj_w, N, W,
                       C);
  ctx.round(s.d_att.data(), size_t(N) * W);
  s.d_qkv.zero();
  hooks.attention_backward(ctx, s.d_qkv.data(), s.d_att.data(), act.qkv.data(), act.atty.data(),
                           act.att_lse.data(), B, T, W, dims.heads);
  ctx.round(s.d_qkv.data(), size_t(N) * 3 * W);
  const A* ln1 = hooks.gather_input(Site::Attention, act.ln1.data(), full_or(s.gathered, act.ln1), rows, C);
  ops::matmul_backward(d, s.d_full.data(), g.qkv_w, g.qkv_b, s.d_qkv.data(), ln1, w.qkv_w, N, C, 3 * W);
  ctx.round(s.d_full.data(), NC);
  A* d_ln1 = hooks.reduce_input_grad(Site::Attention, s.d_full.data(), full_or(s.local, s.d_full), rows, C);
  ctx.round(d_ln1, RC);
  ops::layernorm_backward(d, d_resid, g.ln1_w, g.ln1_b, d_ln1, x, w.ln1_w, act.ln1_mean.data(),
                          act.ln1_rstd.data(), rows, C);
  ctx.round(d_resid, RC);
}

#define GPT_BLOCK_INSTANTIATE(A)                                                                            \
  template struct BlockActivations<A>;                                                                      \
  template struct BlockScratch<A>;                                                                          \
  template void block_forward<A>(const PieceContext&, const BlockDims&, const BlockWeights<A>&, const A*,   \
                                 BlockActivations<A>&, BlockScratch<A>&, ModelHooks<A>&, int, int, int);    \
  template void block_rebuild_cheap<A>(const PieceContext&, const BlockDims&, const BlockWeights<A>&,       \
                                       const A*, BlockActivations<A>&, int, int, int);                      \
  template void block_backward<A>(const PieceContext&, const BlockDims&, const BlockWeights<A>&,            \
                                  const BlockGrads<A>&, const A*, const BlockActivations<A>&, A*,           \
                                  BlockScratch<A>&, ModelHooks<A>&, int, int, int);
GPT_BLOCK_INSTANTIATE(float)
GPT_BLOCK_INSTANTIATE(double)
GPT_BLOCK_INSTANTIATE(bf16)
#undef GPT_BLOCK_INSTANTIATE

}  // namespace gpt
