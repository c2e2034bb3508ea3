/// @file
/// The head piece: the final layernorm, the logits over this rank's vocabulary range
/// (the LM head is the tied wte, so a rank holding rows [v0, v1) of wte computes those
/// columns of the logits), and the cross-entropy.
///
/// ```
///   logits[:, v0:v1] = ln_f(x) . wte[v0:v1]^T
///   loss_i = log sum_{j<V} e^{z_ij} - z_i,target          (padding columns j >= V excluded)
/// ```
///
/// The loss keeps, per row, the max m of the logits, the sum s of exponentials relative
/// to it and the target's logit; the loss log s - (z_target - m) follows, and in the
/// backward the gradient softmax - onehot = e^(z - m) / s - onehot is one more pass over
/// the logits (the statistics are not computed twice). With the vocabulary split
/// (hooks.vocab_parallel()) each rank computes them over its columns and
/// hooks.vocab_reduce combines them across ranks, so the full logits never exist on one
/// rank (kernels/cpu/crossentropy.cpp has the equations; on one rank they give the fused
/// softmax_crossentropy's numbers bit for bit).
#pragma once
#include <cstdint>

#include "common/device_array.h"
#include "common/model_block.h"
#include "common/model_embedding.h"
#include "common/model_pieces.h"

namespace gpt {

/// The head's buffers for one micro-batch. Which exist depends on the constructor's
/// flags; the others are empty arrays.
template <class A>
struct HeadActivations {
  using G = GradOf<A>;  ///< the type of the statistics and losses: float, or double when A is double
  HeadActivations() = default;
  /// rows of the residual stream, full = hooks.full_rows(rows) rows of logits; vocab
  /// columns; d_logits only when the model trains.
  HeadActivations(Device d, int C, int rows, int full, VocabRange vocab, bool train);

  /// ln_f(x) of this rank's rows (rows, C).
  DeviceArray<A> lnf, lnf_full;  ///< ln_f(x) (rows, C) and all-gathered (full, C; only if full != rows)
  /// ln_f's mean of each row (rows), kept for the backward.
  DeviceArray<G> lnf_mean, lnf_rstd;  ///< ln_f's reciprocal standard deviation of each row (rows)
  DeviceArray<A> logits;         ///< (full, vocab.size())
  DeviceArray<G> losses;         ///< (full)
  DeviceArray<A> d_logits;       ///< the backward's d loss / d logits (head_loss_gradient)
  /// @var row_max
  /// per row (full), the max logit over this rank's columns; after hooks.vocab_reduce,
  /// over the whole vocabulary
  /// @var row_sumexp
  /// per row (full), the sum of exp(logit - row_max) over this rank's columns; after
  /// vocab_reduce, over the whole vocabulary
  /// @var target_logit
  /// per row (full), the target's logit, 0 where the target is another rank's column;
  /// after vocab_reduce, summed over the ranks
  DeviceArray<G> row_max, row_sumexp, target_logit;

  size_t bytes() const;  ///< memory held by all the arrays, in bytes
};

/// ln_f and the logits of x (rows x C).
template <class A>
void head_forward(const PieceContext& ctx, const A* x, const A* lnf_w, const A* lnf_b, const A* wte_rows,
                  VocabRange vocab, HeadActivations<A>& act, ModelHooks<A>& hooks, int rows, int C);

/// The per-row losses of the last head_forward against targets (full rows, device
/// memory), into act.losses; the row statistics (reduced, when the vocabulary is split)
/// stay in act for the gradient. V is the real vocabulary (columns >= V are padding).
template <class A>
void head_loss(const PieceContext& ctx, HeadActivations<A>& act, const int32_t* targets, VocabRange vocab, int V,
               ModelHooks<A>& hooks, int rows);

/// The first step of the backward: act.d_logits = dloss * (softmax(logits) - onehot(target)),
/// from the logits and targets of the last head_loss, with dloss the gradient of the loss
/// that one row's loss carries (the mean over rows and the accumulation factor). Written
/// here rather than with the loss, so that the scale enters before the one rounding to
/// the storage type: a bf16 gradient written at dloss = 1 and scaled afterwards would be
/// rounded twice.
template <class A>
void head_loss_gradient(const PieceContext& ctx, HeadActivations<A>& act, const int32_t* targets, VocabRange vocab,
                        int V, ModelHooks<A>& hooks, int rows, double dloss);

/// Backward from act.d_logits (head_loss_gradient): writes the gradient of x into d_x
/// (rows x C, overwritten) and ACCUMULATES into the gradients of wte's rows and ln_f.
template <class A>
void head_backward(const PieceContext& ctx, const A* x, const A* lnf_w, const A* wte_rows, GradOf<A>* dlnf_w,
                   GradOf<A>* dlnf_b, GradOf<A>* dwte_rows, VocabRange vocab, HeadActivations<A>& act, A* d_x,
                   BlockScratch<A>& scratch, ModelHooks<A>& hooks, int rows, int C);

}  // namespace gpt
