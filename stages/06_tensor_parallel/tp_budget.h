// What a tensor-parallel rank should hold and send, from the model's shape alone: the
// formulas of this stage's README, printed beside what the memory tracker and the
// counting communicator measured.
//
// Local sizes of tp rank r (C = n_embd, W = C/tp, F = 4C/tp, Vr = its vocabulary rows,
// Tb = block_size, L = n_layer):
//   embeddings  E = Vr C + Tb C;   block  Bk = 12 C^2/tp + 7 C/tp + 6 C;   final  2C
//   P_local = E + L Bk + 2C;  S = its dp shard of P_local (the ring's chunk rule)
// Memory (bytes) by zero stage, exactly as stages 02-05 with P replaced by P_local;
// a = the bytes of a stored weight or activation, 4 in fp32 and 2 in bf16 mode:
//   zero  params             grads                     optimizer
//   0     a P_local          4 P_local                 (8|12) P_local
//   1     a P_local          4 P_local                 (8|12) S
//   2     a P_local          4 (S + live buckets)      (8|12) S
//   3     a (S + gathered)   4 (S + live buckets)      (8|12) S
// Activations (N = B T rows, R = N/tp with sequence parallelism else N; Hr = n_head/tp):
// per layer  a (4 R C + 4 N W + 2 N F) + 4 (4 R + B Hr T)  (Korthikanti et al.'s count
// for this model: no dropout, flash attention keeps no T x T scores; the layernorm
// outputs and residuals are the R C terms sequence parallelism divides; the row
// statistics stay fp32), plus the embedding, the head and the scratch shared by the
// layers (README, "Memory"; activation_memory below, for any part of the model). The tp
// collectives move a bytes an activation.
// Communication per step, over its micro-batches (bytes through the tp communicator, payload sizes as
// comm_counter.h defines them): tp_step_traffic below, and the README.
#pragma once
#include <cstdint>
#include <string>

#include "common/comm_counter.h"
#include "common/config.h"
#include "common/gpt2_layout.h"
#include "common/memory.h"
#include "common/recompute.h"

namespace gpt {

// The shape of a step as the tp collectives see it.
struct TpStep {
  int tp = 1;
  bool sequence_parallel = false;
  int64_t rows = 0;              // a micro-batch's B T rows (B T / cp under cp), before sp splits them
  int64_t C = 0;                 // n_embd
  int64_t activation_bytes = 4;  // of a stored activation: 2 in bf16 mode
  int64_t micro_steps = 1;       // micro-batches a step runs through this model part
  // How often a step sums the layernorm gradients (sequence parallelism): once, or every
  // micro-batch where ZeRO-2 and -3 reduce every backward's gradients.
  int64_t layernorm_sums = 1;
  bool recompute_full = false;  // each block's forward runs again before its backward
};

// One step's traffic through the tp communicator of a model part (a whole model, or a
// pipeline stage's chunk: its blocks, with the embedding where it runs layer 0 and the
// head where it runs the last). Every hook moves one N x C tensor, N = rows, a = bytes:
//   per micro-batch       all-reduce (reduce-scatter with sequence parallelism)   all-gather (sp only)
//   embedding             forward's sum                                           its output gradient
//   each block            2 forward, 2 backward (+2 recomputed)                   2 forward, 2 backward
//                                                                                 + 2 re-gathered (+2 recomputed)
//   head                  its input gradient                                      its input
// (none at tp = 1 without sp: a group of one), plus at the head with tp > 1 the vocabulary-
// parallel cross-entropy's row maxes gathered (4 N tp bytes) and (sum, target) all-reduced
// (4 2N), and with sp the layernorm gradients summed, one all-reduce per unit holding
// layernorms (each block; ln_f at the head): 4 (4 C per block + 2 C at the head) bytes.
// Selective recompute rebuilds only what needs no communication.
CommTally tp_step_traffic(const TpStep& step, const ParamLayout& part);
// A run's TpStep: cfg's sequence_parallel, n_embd, precision and zero level (ZeRO-2 and -3
// sum the layernorm gradients every micro-batch), at `rows` rows and `micro_steps`
// micro-batches a step.
TpStep tp_step_of(const Config& cfg, int tp, int64_t rows, int64_t micro_steps, bool recompute_full = false);

// What a ZeRO level holds of a rank's buffer of P weights (local_zero.h has the table):
// the sizes it depends on, in elements.
struct ZeroMemoryShape {
  int zero = 0;
  int64_t P = 0, S = 0;                // the buffer; this rank's shard of it (P under ZeRO-0)
  int64_t embedding_bucket = 0;        // the gradient bucket holding the embeddings
  int64_t largest_bucket = 0;          // the largest of the other buckets,
  int64_t other_buckets = 0;           //   and how many there are
  int64_t gathered = 0;                // ZeRO-3: the units gathered at the peak (zero3_gathered)
  bool bf16 = false;                   // 2-byte weights, and the optimizer's fp32 master copy
};
// The peak bytes of weights, gradients and optimizer state (the other kinds stay 0).
MemoryLedger zero_memory(const ZeroMemoryShape& shape);
// ZeRO-3's units gathered at the peak, of a part holding embeddings E, `blocks` blocks of
// B each and ln_f F (stage 05): the embeddings, a block and its prefetched successor (with
// one block, ln_f in its place); without the prefetch the embeddings and one block.
int64_t zero3_gathered(int64_t E, int64_t B, int64_t F, int blocks, bool prefetch);

// A model part as its activations see it: the whole model (stage 06), or a pipeline
// stage's chunk of it with micro-batches in flight (stages 07-11).
struct ActivationShape {
  int64_t B = 1, T = 1;             // a micro-batch: B sequences of T tokens (T/cp under cp)
  int tp = 1, tp_rank = 0;          // the tp rank holds its heads, hidden units and vocabulary rows
  bool sequence_parallel = false;   // R = B T / tp residual rows, else B T
  int64_t activation_bytes = 4;     // a: of a stored activation, 2 in bf16 mode (statistics: 4)
  int layers = 0;                   // k: the part's blocks
  bool embedding = true, head = true;  // runs the embedding (layer 0); the head and the loss
  int slots = 1;                    // s: micro-batches kept between their forward and backward
  Recompute recompute = Recompute::None;
  bool split_backward = false;      // zero-bubble: the input half keeps what the weight half reads
  bool own_working_set = true;      // counts recompute's working set (false: the rank's chunks share one)
  bool pooled_blocks = false;       // the slots' blocks come from a pool the rank's chunks share
};
// Its bytes of activations, as GPT2 allocates them for training (common/gpt2.h; an
// inference-only model keeps no gradients and is not counted here). Elements of a bytes
// unless marked (4): with W = C/tp, F = 4C/tp, Vr its vocabulary rows,
//   per slot    input R C; the residual gradient R C
//               each block, by recompute mode:
//                 none       4 R C + 4 N W + 2 N F, and (4) 4 R + B Hr T statistics
//                 selective  2 R C + 4 N W +   N F, and the same statistics (ln_1, ln_2
//                            and the GELU are rebuilt)
//                 full       R C (its output only)
//               embedding: (4) N token ids; head: R C (ln_f) + 2 N Vr (logits, their
//               gradient), + N C gathered under sp, and (4) 2 R + N + 3 N + N targets
//               split backward: each block 2 N C + 2 R C + N F + 3 N W (the gradients the
//               weight half reads), the head R C
//   per part    the blocks' scratch 2 N C + 4 N W + 2 N F (+ R C + N C where rows are
//               split: tp > 1 with sp); the embedding's partial sums N C where rows are
//               split; recompute's working set (recompute_working_set) if it owns one
//   bytes = s (per slot) + (per part); with pooled_blocks the slots keep no block's, which
//   block_pool_memory counts once for the rank.
int64_t activation_memory(const ModelConfig& m, const ActivationShape& shape);
// The block pool an interleaved rank's chunks share (common/block_pool.h): `sets` sets of
// `layers` blocks, each what a slot keeps of a block under shape's recompute mode.
int64_t block_pool_memory(const ModelConfig& m, const ActivationShape& shape, int sets, int layers);
// The one block's buffers a recomputing part writes and loses: all of a block's
// (full), or ln_1, ln_2 and the GELU, 2 R C + N F (selective); 0 without recompute.
int64_t recompute_working_set(const ModelConfig& m, const ActivationShape& shape);

struct TpBudget {
  MemoryLedger memory;  // expected bytes per kind (params, grads, optimizer, activations)
  CommTally comm;       // expected tp calls and bytes per step
  std::string memory_table(const MemoryLedger& measured) const;
  std::string comm_table(const CommTally& measured) const;
};

// The budget of tp rank tp_rank, dp rank dp_rank of dp (the ranks ZeRO shards over), on
// sequences of seq_len tokens (0: cfg.seq_len; stage 10 gives its T/cp).
TpBudget tp_budget(const Config& cfg, int tp, int dp, int tp_rank, int dp_rank, int seq_len = 0);

}  // namespace gpt
