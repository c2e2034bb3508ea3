// The formulas of tp_budget.h, written out.
#include "stages/06_tensor_parallel/tp_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/error.h"
#include "common/gpt2_layout.h"

namespace gpt {

namespace {

// make_buckets of grad_sync.cpp on unit sizes (embeddings, blocks, final): the bucket
// sizes in backward order, the embeddings' last.
std::vector<int64_t> buckets(const std::vector<int64_t>& units, double bucket_mb) {
  const int64_t limit = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024 / sizeof(float)));
  std::vector<int64_t> out;
  std::vector<size_t> order = {units.size() - 1};
  for (size_t u = units.size() - 2; u >= 1; --u) order.push_back(u);
  order.push_back(0);
  for (size_t u : order) {
    if (out.empty() || out.back() >= limit) out.push_back(0);
    out.back() += units[u];
  }
  return out;
}

}  // namespace

TpBudget tp_budget(const Config& cfg, int tp, int dp, int tp_rank, int dp_rank, int seq_len) {
  const ModelConfig& m = cfg.model;
  const int64_t C = m.n_embd, L = m.n_layer;
  const int64_t Vr = vocab_range(m, tp, tp_rank).size();
  const int64_t B = cfg.micro_batch_size, T = seq_len > 0 ? seq_len : cfg.seq_len, N = B * T;
  TpBudget budget;

  // Parameters, gradients, optimizer state. A block's local parameters: the four split
  // matrices (c_attn 3W x C, attn.c_proj C x W, c_fc F x C, mlp.c_proj C x F), the split
  // biases (c_attn 3W, c_fc F), and whole on every rank the two layernorms' weights and
  // biases and the two row-parallel biases.
  const int64_t E = Vr * C + int64_t(m.block_size) * C;
  const int64_t split_matrices = 12 * C * C / tp, split_biases = 7 * C / tp, whole_vectors = 6 * C;
  const int64_t Bk = split_matrices + split_biases + whole_vectors;
  std::vector<int64_t> units = {E};
  for (int64_t l = 0; l < L; ++l) units.push_back(Bk);
  units.push_back(2 * C);
  int64_t P = 0;
  for (int64_t u : units) P += u;
  const int64_t S = cfg.zero == 0 ? P : P * (dp_rank + 1) / dp - P * dp_rank / dp;
  const std::vector<int64_t> bucket_sizes = buckets(units, cfg.bucket_mb);
  const int64_t emb_bucket = bucket_sizes.back();
  const int64_t others = int64_t(bucket_sizes.size()) - 1;
  const int64_t largest = others > 0 ? *std::max_element(bucket_sizes.begin(), bucket_sizes.end() - 1) : 0;
  // Bytes of a stored weight or activation (A): 2 in bf16 mode (GPT2<bf16>), else 4.
  // Gradients of weights, master weights, moments and row statistics are fp32 always.
  const bool bf16 = cfg.precision == "bf16";
  const int64_t a = bf16 ? 2 : 4;
  budget.memory = zero_memory({cfg.zero, P, S, emb_bucket, largest, others,
                               zero3_gathered(E, Bk, 2 * C, int(L), cfg.zero3_prefetch), bf16});

  // Activations: the whole model, one micro-batch in flight.
  ActivationShape shape;
  shape.B = B, shape.T = T, shape.tp = tp, shape.tp_rank = tp_rank, shape.sequence_parallel = cfg.sequence_parallel;
  shape.activation_bytes = a, shape.layers = int(L);
  budget.memory.set(MemKind::Activations, size_t(activation_memory(m, shape)));

  // Communication per step through the tp communicator.
  budget.comm = tp_step_traffic(tp_step_of(cfg, tp, N, cfg.grad_accum(dp)), ParamLayout(m, tp, tp_rank));
  return budget;
}

namespace {

// One block's buffers of BlockActivations (common/model_block.h) in the counts above:
// values of a bytes and 4-byte statistics.
struct BlockBytes {
  int64_t values = 0, stats = 0;
};

// Every buffer of a block's BlockActivations: the values (ln1, resid2, ln2, resid3 on R
// rows; qkv and atty on this rank's heads; fch and its GELU on its hidden units) and the
// statistics (layernorm means and rstds; a logsumexp per query and head).
BlockBytes whole_block(const ModelConfig& m, const ActivationShape& s) {
  const int64_t C = m.n_embd, W = C / s.tp, F = 4 * C / s.tp, Hr = m.n_head / s.tp, N = s.B * s.T;
  const int64_t R = s.sequence_parallel ? N / s.tp : N;
  return {4 * R * C + 4 * N * W + 2 * N * F, 4 * R + s.B * Hr * s.T};
}

// What a micro-batch keeps of a block, by recompute mode: all of it; all but ln1, ln2 and
// the GELU (2 R C + N F); or the block's output alone.
BlockBytes kept_block(const ModelConfig& m, const ActivationShape& s) {
  const int64_t C = m.n_embd, F = 4 * C / s.tp, N = s.B * s.T, R = s.sequence_parallel ? N / s.tp : N;
  BlockBytes block = whole_block(m, s);
  if (s.recompute == Recompute::Selective) block.values -= 2 * R * C + N * F;
  if (s.recompute == Recompute::Full) block = {R * C, 0};
  return block;
}

}  // namespace

int64_t block_pool_memory(const ModelConfig& m, const ActivationShape& s, int sets, int layers) {
  const BlockBytes block = kept_block(m, s);
  return int64_t(sets) * layers * (s.activation_bytes * block.values + 4 * block.stats);
}

int64_t recompute_working_set(const ModelConfig& m, const ActivationShape& s) {
  const int64_t C = m.n_embd, F = 4 * C / s.tp, N = s.B * s.T, R = s.sequence_parallel ? N / s.tp : N;
  if (s.recompute == Recompute::None) return 0;
  if (s.recompute == Recompute::Selective) return s.activation_bytes * (2 * R * C + N * F);  // ln1, ln2, fch_gelu
  const BlockBytes block = whole_block(m, s);
  return s.activation_bytes * block.values + 4 * block.stats;
}

int64_t activation_memory(const ModelConfig& m, const ActivationShape& s) {
  const int64_t C = m.n_embd, W = C / s.tp, F = 4 * C / s.tp, N = s.B * s.T;
  const int64_t R = s.sequence_parallel ? N / s.tp : N, Vr = vocab_range(m, s.tp, s.tp_rank).size();
  const int64_t k = s.layers, e = s.embedding, h = s.head;
  // The N x C buffers sequence parallelism adds (the embedding's partial sums, ln_f's
  // gathered rows, the scratch of a gather) exist only where rows are split: tp > 1.
  const int64_t split_rows = R != N;

  BlockBytes block = kept_block(m, s);
  if (s.pooled_blocks) block = {0, 0};  // the pool's (block_pool_memory)
  const BlockBytes head = {R * C + split_rows * N * C + 2 * N * Vr,  // ln_f (+ gathered), logits and their gradient
                           2 * R + N + 3 * N + N};  // ln_f's statistics, losses, row max/sum/target, targets
  const int64_t tokens = N;                        // the embedding's token ids (4 bytes)
  const int64_t kept_grads = s.split_backward ? k * (2 * N * C + 2 * R * C + N * F + 3 * N * W) + h * R * C : 0;
  const int64_t slot_values = R * C + k * block.values + h * head.values + R * C + kept_grads;  // + input, d_resid
  const int64_t slot_stats = k * block.stats + h * head.stats + e * tokens;

  const int64_t scratch = 2 * N * C + 4 * N * W + 2 * N * F + split_rows * (R * C + N * C);
  const int64_t embedding_sums = e * split_rows * N * C;
  const int64_t working_set = s.own_working_set ? recompute_working_set(m, s) : 0;
  return s.slots * (s.activation_bytes * slot_values + 4 * slot_stats) +
         s.activation_bytes * (scratch + embedding_sums) + working_set;
}

MemoryLedger zero_memory(const ZeroMemoryShape& s) {
  const int64_t a = s.bf16 ? 2 : 4;           // bytes of a compute weight
  const int64_t optimizer = s.bf16 ? 12 : 8;  // m, v (and the fp32 master)
  const int64_t live = s.embedding_bucket + std::min<int64_t>(2, s.other_buckets) * s.largest_bucket;
  MemoryLedger ledger;
  ledger.set(MemKind::Params, size_t(a * (s.zero == 3 ? s.S + s.gathered : s.P)));
  ledger.set(MemKind::Grads, size_t(4 * (s.zero <= 1 ? s.P : s.S + live)));
  ledger.set(MemKind::Optimizer, size_t(optimizer * s.S));
  return ledger;
}

int64_t zero3_gathered(int64_t E, int64_t B, int64_t F, int blocks, bool prefetch) {
  if (!prefetch) return E + B;
  return blocks >= 2 ? E + 2 * B : E + B + F;
}

TpStep tp_step_of(const Config& cfg, int tp, int64_t rows, int64_t micro_steps, bool recompute_full) {
  TpStep step;
  step.tp = tp, step.sequence_parallel = cfg.sequence_parallel, step.rows = rows, step.C = cfg.model.n_embd;
  step.activation_bytes = cfg.precision == "bf16" ? 2 : 4;
  step.micro_steps = micro_steps;
  step.layernorm_sums = cfg.zero >= 2 ? micro_steps : 1;
  step.recompute_full = recompute_full;
  return step;
}

CommTally tp_step_traffic(const TpStep& step, const ParamLayout& part) {
  const int64_t k = part.layer_end() - part.layer_begin(), e = part.has_embeddings(), h = part.has_head();
  const int64_t m = step.micro_steps, forwards = step.recompute_full ? 2 : 1;  // a block's forwards a micro-batch
  const int64_t full = step.activation_bytes * step.rows * step.C;  // one N x C tensor
  CommTally traffic;
  auto add = [&](CommOp op, int64_t calls, int64_t bytes_each) {
    traffic.calls[size_t(op)] += calls;
    traffic.bytes[size_t(op)] += calls * bytes_each;
  };
  const int64_t reductions = e + 2 * forwards * k + 2 * k + h;  // the sums of g forward and f backward
  if (!step.sequence_parallel) {
    if (step.tp > 1) add(CommOp::AllReduce, m * reductions, full);
  } else {
    add(CommOp::ReduceScatter, m * reductions, full);
    const int64_t gathers = 2 * forwards * k + h + 2 * k + 2 * k + e;  // f forward; g backward, re-gathers
    add(CommOp::AllGather, m * gathers, full);
    add(CommOp::AllReduce, step.layernorm_sums * (k + h), 0);  // calls; their bytes next
    traffic.bytes[size_t(CommOp::AllReduce)] += step.layernorm_sums * 4 * (4 * k * step.C + 2 * step.C * h);
  }
  if (step.tp > 1 && h) {  // the vocabulary-parallel cross-entropy
    add(CommOp::AllGather, m, 4 * step.rows * step.tp);
    add(CommOp::AllReduce, m, 4 * 2 * step.rows);
  }
  return traffic;
}

std::string TpBudget::memory_table(const MemoryLedger& measured) const {
  std::string s;
  char line[200];
  for (MemKind kind : {MemKind::Params, MemKind::Grads, MemKind::Optimizer, MemKind::Activations}) {
    const double got = double(measured.get(kind)), want = double(memory.get(kind));
    std::snprintf(line, sizeof line, "  %-12s %14.0f | %14.0f bytes  (%+.2f%%)\n", kMemKindNames[size_t(kind)], got, want,
                  want > 0 ? 100.0 * (got - want) / want : 0.0);
    s += line;
  }
  std::snprintf(line, sizeof line, "  %-12s %14zu bytes (communication scratch)\n", "buffers",
                measured.get(MemKind::Buffers));
  return s + line;
}

std::string TpBudget::comm_table(const CommTally& measured) const { return gpt::comm_table(measured, comm); }

}  // namespace gpt
