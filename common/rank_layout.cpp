// Rank-local layouts; see rank_layout.h.
#include "common/rank_layout.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "kernels/ops.h"

namespace gpt {
namespace {

// A tensor seen as a matrix: its first dimension by the rest (a vector: n x 1).
int64_t rows_of(const ParamTensor& t) { return t.shape[0]; }
int64_t cols_of(const ParamTensor& t) { return t.numel / t.shape[0]; }

TensorBlock whole_block(const ParamTensor& t) { return {0, rows_of(t), 0, cols_of(t)}; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void RankLayout::add(int tensor, std::vector<TensorBlock> blocks, bool counted) {
  const ParamTensor& t = global_->tensors().at(size_t(tensor));
  invariant(tensors_.empty() || tensors_.back().tensor < tensor,
            "RankLayout::add: tensors must come in the global order (" + t.name + ")");
  LocalTensor local{tensor, std::move(blocks), total_, 0, counted};
  for (const TensorBlock& b : local.blocks) {
    require(b.row0 >= 0 && b.rows >= 0 && b.row0 + b.rows <= rows_of(t) && b.col0 >= 0 && b.cols >= 0 &&
                b.col0 + b.cols <= cols_of(t),
            "layout: a block [" + std::to_string(b.row0) + "+" + std::to_string(b.rows) + ", " +
                std::to_string(b.col0) + "+" + std::to_string(b.cols) + "] leaves tensor " + t.name + " (" +
                std::to_string(rows_of(t)) + " x " + std::to_string(cols_of(t)) + ")");
    local.numel += b.numel();
  }
  total_ += local.numel;
  tensors_.push_back(std::move(local));
}

RankLayout RankLayout::whole(const ParamLayout& global) {
  RankLayout r(global);
  for (size_t i = 0; i < global.tensors().size(); ++i) r.add(int(i), {whole_block(global.tensors()[i])}, true);
  return r;
}

RankLayout RankLayout::tensor_parallel(const ParamLayout& global, int tp, int rank) {
  const ModelConfig& m = global.model();
  require(tp >= 1 && m.n_head % tp == 0, "tp=" + std::to_string(tp) + " must divide n_head=" +
                                             std::to_string(m.n_head) + " (each rank takes whole heads)");
  invariant(rank >= 0 && rank < tp, "tensor_parallel: rank " + std::to_string(rank) + " of tp " + std::to_string(tp));
  const int64_t C = m.n_embd, W = C / tp, F = 4 * C / tp;
  const VocabRange vocab = vocab_range(m, tp, rank);
  const int64_t h0 = rank * W, f0 = rank * F;
  RankLayout r(global);
  for (size_t i = 0; i < global.tensors().size(); ++i) {
    const ParamTensor& t = global.tensors()[i];
    const std::string& n = t.name;
    const int64_t cols = cols_of(t);
    if (ends_with(n, "attn.c_attn.weight") || ends_with(n, "attn.c_attn.bias"))
      r.add(int(i), {{h0, W, 0, cols}, {C + h0, W, 0, cols}, {2 * C + h0, W, 0, cols}}, true);
    else if (ends_with(n, "attn.c_proj.weight"))
      r.add(int(i), {{0, C, h0, W}}, true);
    else if (ends_with(n, "mlp.c_fc.weight") || ends_with(n, "mlp.c_fc.bias"))
      r.add(int(i), {{f0, F, 0, cols}}, true);
    else if (ends_with(n, "mlp.c_proj.weight"))
      r.add(int(i), {{0, C, f0, F}}, true);
    else if (n == "wte")
      r.add(int(i), {{vocab.begin, vocab.size(), 0, cols}}, true);
    else  // layernorms, the row-parallel biases, wpe, ln_f: replicas, counted on rank 0
      r.add(int(i), {whole_block(t)}, rank == 0);
  }
  return r;
}

RankLayout RankLayout::pipeline_stage(const RankLayout& base, int l0, int l1, bool first, bool last) {
  RankLayout r(base.global());
  for (const LocalTensor& lt : base.tensors_) {
    const ParamTensor& t = base.global().tensors()[size_t(lt.tensor)];
    bool keep = false, counted = lt.counted;
    if (t.layer >= 0) keep = t.layer >= l0 && t.layer < l1;
    else if (t.name == "wte") keep = first || last, counted = lt.counted && first;  // the tied head's copy
    else if (t.name == "wpe") keep = first;
    else keep = last;  // ln_f
    if (keep) r.add(lt.tensor, lt.blocks, counted);
  }
  return r;
}

RankLayout RankLayout::range(int64_t begin, int64_t end, bool counted) const {
  invariant(0 <= begin && begin <= end && end <= total_, "RankLayout::range: [" + std::to_string(begin) + ", " +
                                                             std::to_string(end) + ") of " + std::to_string(total_));
  RankLayout r(*global_);
  for (const LocalTensor& lt : tensors_) {
    if (lt.offset + lt.numel <= begin || lt.offset >= end) continue;
    std::vector<TensorBlock> pieces;
    int64_t local = lt.offset;  // of the block's first element
    for (const TensorBlock& b : lt.blocks) {
      // The block's elements [lo, hi) inside the range, relative to the block: a partial
      // first row, whole rows, a partial last row.
      const int64_t lo = std::clamp(begin - local, int64_t(0), b.numel()), hi = std::clamp(end - local, int64_t(0), b.numel());
      local += b.numel();
      if (lo >= hi) continue;
      int64_t at = lo;
      if (at % b.cols != 0) {  // the tail of a row
        const int64_t row = at / b.cols, c = at % b.cols, n = std::min(b.cols - c, hi - at);
        pieces.push_back({b.row0 + row, 1, b.col0 + c, n});
        at += n;
      }
      if (hi - at >= b.cols) {  // whole rows
        const int64_t rows = (hi - at) / b.cols;
        pieces.push_back({b.row0 + at / b.cols, rows, b.col0, b.cols});
        at += rows * b.cols;
      }
      if (at < hi) pieces.push_back({b.row0 + at / b.cols, 1, b.col0, hi - at});  // the head of a row
    }
    r.add(lt.tensor, std::move(pieces), lt.counted && counted);
  }
  return r;
}

const LocalTensor* RankLayout::find(const std::string& name) const {
  for (const LocalTensor& lt : tensors_)
    if (global_->tensors()[size_t(lt.tensor)].name == name) return &lt;
  return nullptr;
}

std::vector<LayoutRun> RankLayout::runs(int64_t begin, int64_t end) const {
  if (end < 0) end = total_;
  std::vector<LayoutRun> out;
  for (const LocalTensor& lt : tensors_) {
    if (lt.offset + lt.numel <= begin || lt.offset >= end) continue;
    const ParamTensor& t = global_->tensors()[size_t(lt.tensor)];
    const int64_t cols = cols_of(t);
    int64_t local = lt.offset;
    for (const TensorBlock& b : lt.blocks)
      for (int64_t row = 0; row < b.rows; ++row, local += b.cols) {
        const int64_t lo = std::max(local, begin), hi = std::min(local + b.cols, end);
        if (lo >= hi) continue;
        const int64_t global = t.offset + (b.row0 + row) * cols + b.col0 + (lo - local);
        out.push_back({lo, global, hi - lo, lt.tensor, lt.counted});
      }
  }
  return out;
}

template <class T>
void RankLayout::init(uint64_t seed, T* local, int64_t begin, int64_t end) const {
  for (const LayoutRun& run : runs(begin, end))
    global_->init_range(seed, run.global, run.global + run.length, local + (run.local - begin));
}

template <class T>
void RankLayout::gather(const T* local, T* global, bool counted_only) const {
  for (const LayoutRun& run : runs())
    if (run.counted || !counted_only) std::memcpy(global + run.global, local + run.local, size_t(run.length) * sizeof(T));
}

template <class T>
void RankLayout::scatter(const T* global, T* local) const {
  for (const LayoutRun& run : runs()) std::memcpy(local + run.local, global + run.global, size_t(run.length) * sizeof(T));
}

namespace {
// The counted runs, those of one tensor that continue each other in local memory joined
// (a slice's rows are runs of their own): one sum per contiguous piece, so a tensor's sum
// depends on how its elements are grouped into pieces, never on how its rows are stored;
// and one launch and one synchronisation per piece on the GPU instead of one per row.
// Each piece is summed by ops::sum_of_squares on either device. On the CPU its fixed lanes
// (kernels/cpu/lanes.h) depend on the piece's length alone, so a piece gets the same bits
// wherever it lies in memory, and it runs at memory speed: an element-by-element sum in
// double waits on each addition, about 0.1 s a step for GPT-2 124M's gradients.
std::vector<LayoutRun> counted_pieces(const std::vector<LayoutRun>& runs) {
  std::vector<LayoutRun> pieces;
  for (const LayoutRun& run : runs) {
    if (!run.counted) continue;
    if (!pieces.empty() && pieces.back().tensor == run.tensor && pieces.back().local + pieces.back().length == run.local)
      pieces.back().length += run.length;
    else
      pieces.push_back(run);
  }
  return pieces;
}
}  // namespace

double RankLayout::counted_sum_of_squares(Device d, const float* local, int64_t begin, int64_t end) const {
  double sum = 0;
  for (const LayoutRun& piece : counted_pieces(runs(begin, end)))
    sum += ops::sum_of_squares(d, local + (piece.local - begin), size_t(piece.length));
  return sum;
}

void RankLayout::counted_squares_by_tensor(Device d, const float* local, double* per_tensor, int64_t begin,
                                           int64_t end) const {
  for (const LayoutRun& piece : counted_pieces(runs(begin, end)))
    per_tensor[piece.tensor] += ops::sum_of_squares(d, local + (piece.local - begin), size_t(piece.length));
}

void check_counted_once(const ParamLayout& global, const std::vector<RankLayout>& ranks) {
  std::vector<int> counted(size_t(global.total()), 0), held(size_t(global.total()), 0);
  for (const RankLayout& r : ranks)
    for (const LayoutRun& run : r.runs())
      for (int64_t g = run.global; g < run.global + run.length; ++g) {
        counted[size_t(g)] += run.counted;
        held[size_t(g)] += 1;
      }
  for (const ParamTensor& t : global.tensors())
    for (int64_t g = t.offset; g < t.offset + t.numel; ++g)
      if (counted[size_t(g)] != 1)
        fail("layout: element " + std::to_string(g - t.offset) + " of " + t.name + " is counted by " +
             std::to_string(counted[size_t(g)]) + " ranks (held by " + std::to_string(held[size_t(g)]) +
             "), not exactly one");
}

template void RankLayout::init<float>(uint64_t, float*, int64_t, int64_t) const;
template void RankLayout::init<double>(uint64_t, double*, int64_t, int64_t) const;
template void RankLayout::gather<float>(const float*, float*, bool) const;
template void RankLayout::gather<double>(const double*, double*, bool) const;
template void RankLayout::scatter<float>(const float*, float*) const;
template void RankLayout::scatter<double>(const double*, double*) const;

}  // namespace gpt
