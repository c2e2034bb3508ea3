// The pipeline's measurements; see pipeline_report.h.
#include "stages/07_pipeline_gpipe/pipeline_report.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>

#include "stages/02_ddp/ring_allreduce.h"
#include "stages/06_tensor_parallel/tp_budget.h"

namespace gpt {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void BubbleMeter::start() {
  pp_.barrier();
  start_s_ = now_s();
}

void BubbleMeter::stop(double busy_s) {
  double span = now_s() - start_s_;
  std::vector<double> spans(size_t(pp_.size()));
  pp_.all_gather(&span, spans.data(), 1, DType::F64);
  busy_s_.push_back(busy_s);
  makespan_s_.push_back(*std::max_element(spans.begin(), spans.end()));
}

std::string BubbleMeter::report(const Theory& theory_of, const PipeCosts& my_costs) {
  // No step ran (steps=0, or a resume of a finished run): nothing was measured, and a
  // theory of zero costs is 0/0. Every rank ran the same steps, so all return here.
  if (busy_s_.empty()) return "";
  double costs[3] = {my_costs.forward, my_costs.backward_input, my_costs.backward_weight};
  pp_.all_reduce(costs, 3, DType::F64);
  const double p = double(pp_.size());
  const PipeCosts costs_mean{costs[0] / p, costs[1] / p, costs[2] / p};
  const double theory = theory_of(costs_mean);
  const size_t first = busy_s_.size() > 1 ? 1 : 0;
  double busy = 0, makespan = 0;
  for (size_t i = first; i < busy_s_.size(); ++i) busy += busy_s_[i], makespan += makespan_s_[i];
  double mine = makespan > 0 ? 1.0 - busy / makespan : 0.0;
  std::vector<double> all(size_t(pp_.size()));
  pp_.all_gather(&mine, all.data(), 1, DType::F64);
  std::string out = "pipeline bubble (idle share of the step, " + std::to_string(busy_s_.size() - first) +
                    " steps measured):";
  double mean = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    char cell[48];
    std::snprintf(cell, sizeof cell, " pp rank %zu %.1f%%", r, 100.0 * all[r]);  // the pipeline rank
    out += cell;
    mean += all[r] / double(all.size());
  }
  char tail[192];
  char weights[64] = "";
  if (costs_mean.backward_weight > 0)
    std::snprintf(weights, sizeof weights, " + weights %.2f ms", 1e3 * costs_mean.backward_weight);
  // The costs are printed whatever the theory: GPipe's and 1F1B's ignore them, the
  // zero-bubble schedule's takes them (stage 09).
  std::snprintf(tail, sizeof tail, " | mean %.1f%% | theory %.1f%% | measured mean costs: forward %.2f ms, backward %.2f ms%s\n",
                100.0 * mean, 100.0 * theory, 1e3 * costs_mean.forward, 1e3 * costs_mean.backward_input, weights);
  return out + tail;
}

template <class A>
std::string in_flight_line(int world_rank, int pp_rank, int pp, int expected, int measured,
                           const std::vector<const GPT2<A>*>& chunks, const MemoryLedger& mem,
                           size_t shared_bytes) {
  size_t bytes = shared_bytes;
  int slots = 0;
  std::string by_chunk;  // "2 + 1": each chunk's slots, in chunk order
  for (const GPT2<A>* c : chunks) {
    bytes += c->activation_bytes(), slots += c->in_flight();
    by_chunk += (by_chunk.empty() ? "" : " + ") + std::to_string(c->in_flight());
  }
  // The block pool the chunks share (common/block_pool.h), counted once: its sets hold the
  // slots' blocks.
  const BlockPool<A>* pool = chunks.front()->slice().block_pool;
  if (pool) bytes += pool->bytes();
  // With several chunks a rank counts (micro-batch, chunk) pairs: one micro-batch in
  // flight through two of its chunks is two chunk activations.
  const char* what = chunks.size() > 1 ? "chunk activations" : "micro-batches";
  if (chunks.size() > 1) by_chunk = ": " + by_chunk + " by chunk";
  else by_chunk.clear();
  if (pool) by_chunk += ", blocks' activations in " + std::to_string(pool->size()) + " shared sets";
  char head[192], tail[64];
  std::snprintf(head, sizeof head,
                "rank %d (pipeline rank %d of %d): %s in flight %d (schedule's bound %d), "
                "activations %.2f MiB (%d slot%s",
                world_rank, pp_rank, pp, what, measured, expected, double(bytes) / (1 << 20), slots,
                slots == 1 ? "" : "s");
  std::snprintf(tail, sizeof tail, "), peak memory %.2f MiB\n", double(mem.total()) / (1 << 20));
  return head + by_chunk + tail;
}

std::string memory_line(const MemoryLedger& mem, const MemoryLedger& formula) {
  std::string s = "  memory peaks (allocated | formula):";
  for (MemKind kind : {MemKind::Params, MemKind::Grads, MemKind::Optimizer, MemKind::Activations}) {
    const size_t want = formula.get(kind);
    s += std::string(kind == MemKind::Params ? " " : ", ") + kMemKindNames[size_t(kind)] + " " +
         std::to_string(mem.get(kind)) + " | " + (want > 0 ? std::to_string(want) : "-");
  }
  s += "; buffers " + std::to_string(mem.get(MemKind::Buffers));
  if (mem.get(MemKind::Eval) > 0) s += ", eval " + std::to_string(mem.get(MemKind::Eval));
  return s + " bytes\n";
}

template <class A>
MemoryLedger with_activations(MemoryLedger formula, const std::vector<const GPT2<A>*>& chunks) {
  int64_t bytes = 0;
  bool shared_working_set = false;
  ActivationShape shape;
  for (const GPT2<A>* c : chunks) {
    const ModelSlice<A>& slice = c->slice();
    invariant(!slice.inference_only, "with_activations: the formula counts a training model's activations");
    shape.B = c->batch(), shape.T = c->max_seq_len(), shape.tp = slice.tp, shape.tp_rank = slice.rank;
    shape.sequence_parallel = slice.sequence_parallel, shape.activation_bytes = int64_t(sizeof(A));
    shape.layers = c->layout().layer_end() - c->layout().layer_begin();
    shape.embedding = c->first_stage(), shape.head = c->last_stage(), shape.slots = c->in_flight();
    shape.recompute = slice.recompute, shape.split_backward = slice.split_backward;
    shape.own_working_set = slice.working_block == nullptr;
    shape.pooled_blocks = slice.block_pool != nullptr;
    shared_working_set = shared_working_set || !shape.own_working_set;
    bytes += activation_memory(c->model(), shape);
  }
  // The block pool the chunks share: as many sets as the schedule keeps micro-batches in
  // flight on the rank, each of the most layers a chunk runs (model_chunks.cpp). The depth
  // comes from the chunks' layers, not from pool->layers(): the formula says what the pool
  // should hold, and a pool made deeper than that then shows as a difference.
  if (const BlockPool<A>* pool = chunks.front()->slice().block_pool) {
    int most_layers = 0;
    for (const GPT2<A>* c : chunks)
      most_layers = std::max(most_layers, c->layout().layer_end() - c->layout().layer_begin());
    bytes += block_pool_memory(chunks.front()->model(), shape, pool->size(), most_layers);
  }
  // One block runs at a time on a rank, so its chunks can share one working set.
  if (shared_working_set) bytes += recompute_working_set(chunks.front()->model(), shape);
  formula.set(MemKind::Activations, size_t(bytes));
  return formula;
}

template MemoryLedger with_activations(MemoryLedger, const std::vector<const GPT2<float>*>&);
template MemoryLedger with_activations(MemoryLedger, const std::vector<const GPT2<bf16>*>&);

template std::string in_flight_line(int, int, int, int, int, const std::vector<const GPT2<float>*>&,
                                    const MemoryLedger&, size_t);
template std::string in_flight_line(int, int, int, int, int, const std::vector<const GPT2<bf16>*>&,
                                    const MemoryLedger&, size_t);

void print_from_every_rank(Communicator& world, const std::string& line) {
  constexpr size_t kWidth = 1024;  // a few lines of text
  std::vector<char> mine(kWidth, '\0'), all(kWidth * size_t(world.size()));
  std::copy_n(line.begin(), std::min(line.size(), kWidth - 1), mine.begin());
  world.all_gather(mine.data(), all.data(), kWidth, DType::Byte);
  if (world.rank() != 0) return;
  for (int r = 0; r < world.size(); ++r) std::fputs(all.data() + size_t(r) * kWidth, stdout);
}

CommTally pipeline_traffic(int p, int v, int m, int rank, size_t message, DType activations, size_t wte_count,
                           DType gradients) {
  CommTally traffic;
  const int virtual_stages = v * p;
  for (int chunk = 0; chunk < v; ++chunk) {
    const int s = chunk * p + rank;
    const int64_t messages = int64_t(m) * ((s > 0 ? 2 : 0) + (s < virtual_stages - 1 ? 2 : 0));
    traffic.calls[size_t(CommOp::PointToPoint)] += messages;
    traffic.bytes[size_t(CommOp::PointToPoint)] += messages * int64_t(message * dtype_size(activations));
  }
  if (p > 1 && (rank == 0 || rank == p - 1))  // the tied wte's two holders: group ranks 0 and 1
    traffic += ring_all_reduce_traffic(wte_count, 2, rank == 0 ? 0 : 1, gradients);
  return traffic;
}

void print_traffic_by_rank(Communicator& world, const char* kind, int64_t step, const CommTally& counted,
                           const CommTally& formula) {
  if (world.rank() == 0)
    std::printf("%s communication in step %lld, rank 0 (counted | formula, README):\n%s", kind,
                static_cast<long long>(step), comm_table(counted, formula).c_str());
  const auto sum = [](const std::array<int64_t, size_t(CommOp::kCount)>& per_op) {
    int64_t all = 0;
    for (const int64_t x : per_op) all += x;
    return static_cast<long long>(all);
  };
  char line[200];
  std::snprintf(line, sizeof line, "  rank %d: %lld | %lld calls  %lld | %lld bytes\n", world.rank(),
                sum(counted.calls), sum(formula.calls), sum(counted.bytes), sum(formula.bytes));
  if (world.rank() == 0)
    std::printf("%s communication in step %lld by rank, all operations (counted | formula):\n", kind,
                static_cast<long long>(step));
  print_from_every_rank(world, line);
}

std::vector<Pass> chunk_passes(const PipeSchedule& schedule, int chunk) {
  std::vector<Pass> passes;
  for (const PipeAction& a : schedule) {
    if (a.chunk != chunk) continue;
    if (a.op == PipeOp::Forward) passes.push_back(Pass::Forward);
    if (a.op == PipeOp::Backward || a.op == PipeOp::BackwardInput || a.op == PipeOp::BackwardWeight)
      passes.push_back(Pass::Backward);
  }
  return passes;
}

}  // namespace gpt
