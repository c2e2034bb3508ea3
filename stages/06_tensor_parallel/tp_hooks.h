// Tensor parallelism (Shoeybi et al., "Megatron-LM", 2019) with sequence parallelism
// (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
// 2022): the communication of a transformer split over the tp ranks of a group.
//
// A linear Y = X A splits two ways. Column-parallel: A = [A_1 .. A_p] by output
// columns, rank r computes Y_r = X A_r from the whole X (no communication in forward;
// in backward dX = sum_r dY_r A_r^T, an all-reduce). Row-parallel: A = [A_1; ..; A_p] by
// input rows, rank r holds X_r and computes X_r A_r, a partial sum: Y = sum_r X_r A_r is
// an all-reduce in forward, and dX_r = dY A_r^T needs nothing in backward. So the two
// conjugate operators around a column-then-row pair are
//
//   f = identity forward, all-reduce backward    (before the column-parallel linear)
//   g = all-reduce forward, identity backward    (after the row-parallel linear)
//
// Attention: c_attn is column-parallel by heads (rank r takes its heads' rows of Q, of K
// and of V, so its attention needs no other rank), attn.c_proj row-parallel over the
// same heads. MLP: c_fc column-parallel over 4C/tp hidden units (GELU is elementwise),
// mlp.c_proj row-parallel. One all-reduce per sub-block in forward, one in backward.
//
// Sequence parallelism: the layernorms, dropout-free residuals and everything elementwise
// run on 1/tp of the B*T rows instead of all of them on every rank. An all-reduce is a
// reduce-scatter followed by an all-gather, so the same bytes move (plus, in backward, the
// re-gather of each column-parallel linear's input for its weight gradient) as
//
//   f = all-gather forward, reduce-scatter backward   (rows -> full rows before the column linear)
//   g = reduce-scatter forward, all-gather backward   (partial sums -> this rank's rows after the row linear)
//
// and the activations between the sub-blocks shrink by tp. The weights a rank applies to
// its rows only (layernorms) get a partial gradient: sequence_parallel_grads.h sums it.
//
// The embedding is a row-parallel product (each rank's vocabulary rows of wte give a
// partial sum; vocab_parallel.cpp), and the LM head a column-parallel one (each rank its
// vocabulary's logits), so they use the same hooks (Site::Embedding, Site::Head).
#pragma once
#include <vector>

#include "common/comm.h"
#include "common/device.h"
#include "common/model_pieces.h"

namespace gpt {

template <class A>
class TensorParallelHooks : public ModelHooks<A> {
 public:
  using G = GradOf<A>;
  // tp: the tensor-parallel group. With sequence_parallel each rank holds rows/tp rows.
  // device: where the model's activations (and the loss's row statistics) live.
  TensorParallelHooks(Communicator& tp, bool sequence_parallel, Device device)
      : tp_(tp), sp_(sequence_parallel), device_(device) {}

  int full_rows(int rows) const override { return sp_ ? rows * tp_.size() : rows; }
  // f forward.
  const A* gather_input(Site, const A* x, A* full, int rows, int C) override;
  // f backward.
  A* reduce_input_grad(Site, A* d_full, A* local, int rows, int C) override;
  // g forward.
  A* reduce_output(Site, A* partial, A* local, int rows, int C) override;
  // g backward.
  const A* gather_output_grad(Site, const A* d_local, A* full, int rows, int C) override;

  bool vocab_parallel() const override { return tp_.size() > 1; }
  void vocab_reduce(G* row_max, G* row_sumexp, G* target_logit, int rows) override;  // vocab_parallel.cpp

 private:
  // The reduction of vocab_reduce on statistics in host memory.
  void reduce_stats_on_host(G* row_max, G* row_sumexp, G* target_logit, int rows);

  Communicator& tp_;
  bool sp_;
  Device device_;
  std::vector<G> maxes_, sums_;  // vocab_reduce's scratch, in host memory
  std::vector<G> staged_;        // on the GPU: the three rows of statistics, copied to the host
};

}  // namespace gpt
