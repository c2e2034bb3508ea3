/// @file
/// Rank-local layouts: which elements of the global parameter buffer (ParamLayout, the
/// single-device model) a rank holds, and where they sit in its own local buffer.
///
/// A rank holds, of each global tensor it touches, a list of rectangular blocks of the
/// tensor viewed as a matrix (rows x cols; a 1-D tensor of n elements is n x 1). The
/// blocks of a tensor sit one after another in the local buffer, each row-major, and the
/// local tensors follow the global order (so a range of layers stays one range).
/// Tensor parallelism over tp ranks, rank r of heads [h0, h1) (hs = C / n_head, W = C / tp)
/// and hidden units [f0, f1) (F = 4C / tp):
///
/// ```
///   c_attn.weight (3C x C)      rows [h0 hs, h1 hs) of Q, of K and of V: 3 blocks of W x C
///   c_attn.bias   (3C)          the same rows: 3 blocks of W x 1
///   attn.c_proj.weight (C x C)  columns [h0 hs, h1 hs): 1 block of C x W
///   mlp.c_fc.weight (4C x C)    rows [f0, f1): 1 block F x C       (c_fc.bias the same rows)
///   mlp.c_proj.weight (C x 4C)  columns [f0, f1): 1 block C x F
///   wte (Vp x C)                rows [floor(r Vp/tp), floor((r+1) Vp/tp)): its vocabulary range
///   ln_*, the projections' biases, wpe, ln_f: whole, on every rank (replicas)
/// ```
///
/// A pipeline stage holds the blocks of its layers [l0, l1); the first also the
/// embeddings, the last ln_f and wte (the tied LM head), so wte lives on two stages.
///
/// Replicated elements are held by several ranks but COUNTED by one: it writes them in a
/// checkpoint and counts them in the gradient norm; the others have `counted` false.
///
/// Everything element-wise reduces to runs: a run is `length` elements contiguous both in
/// the local buffer (from `local`) and in the global one (from `global`), one row of one
/// block. Initialisation, gather/scatter, weight decay and the gradient norm walk runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/device.h"

#include "common/gpt2_layout.h"

namespace gpt {

/// Rows [row0, row0 + rows) x columns [col0, col0 + cols) of a tensor seen as a matrix.
struct TensorBlock {
  /// The first row of the block, counted from 0 in the tensor's matrix.
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  /// @var rows
  /// The block's height, in rows.
  /// @var col0
  /// The first column of the block, counted from 0 in the tensor's matrix.
  /// @var cols
  /// The block's width, in columns: the length of each of its rows in the local buffer.
  int64_t numel() const { return rows * cols; }  ///< elements in the block, rows x cols
};

/// What a rank holds of one global tensor: its blocks, stored one after another, each
/// row-major, from `offset` in the rank's local buffer.
struct LocalTensor {
  int tensor = 0;  ///< index into ParamLayout::tensors()
  std::vector<TensorBlock> blocks;  ///< in local order; each lies inside the tensor's matrix
  int64_t offset = 0;  ///< in the local buffer
  int64_t numel = 0;  ///< the sum of the blocks' numel(): the elements held
  bool counted = true;  ///< this rank writes it to checkpoints and counts it in norms
};

/// `length` elements contiguous in both buffers: one row of one block, or the part of it
/// inside a requested local range (see the top of this file).
struct LayoutRun {
  /// The run's first element in the local buffer, an index from local element 0 (also
  /// when runs() was given a range that begins later).
  int64_t local = 0, global = 0, length = 0;
  /// @var global
  /// The run's first element in the global buffer (ParamLayout's flat order).
  /// @var length
  /// Elements in the run, at most the block's cols.
  int tensor = 0;  ///< index into ParamLayout::tensors()
  bool counted = true;  ///< the tensor's LocalTensor::counted
};

/// The elements of the global parameter buffer one rank holds, and where they sit in its
/// local buffer (see the top of this file). Keeps a pointer to the global layout, which
/// must outlive it.
class RankLayout {
 public:
  /// An empty layout (holding nothing) over `global`; add() fills it.
  explicit RankLayout(const ParamLayout& global) : global_(&global) {}

  /// The whole model, laid out exactly as the global buffer (stages 01-05).
  static RankLayout whole(const ParamLayout& global);
  /// Tensor-parallel rank `rank` of `tp` (see the top of this file): n_head must divide
  /// by tp (a UserError names the key otherwise); the vocabulary rows split by vocab_range.
  static RankLayout tensor_parallel(const ParamLayout& global, int tp, int rank);
  /// The part of `base` a pipeline stage holding layers [l0, l1) keeps: those blocks, the
  /// embeddings when first, ln_f and wte when last; wte on a last stage that is not also
  /// the first is a replica, not counted.
  static RankLayout pipeline_stage(const RankLayout& base, int l0, int l1, bool first, bool last);

  /// The local elements [begin, end) of this layout as a layout of their own (a ZeRO
  /// shard of the local buffer: rows of blocks cut where the range cuts them); its
  /// elements are counted where they were and `counted` is true.
  RankLayout range(int64_t begin, int64_t end, bool counted) const;

  /// Appends a local tensor (in global order). A UserError when a block leaves the tensor.
  void add(int tensor, std::vector<TensorBlock> blocks, bool counted);

  const ParamLayout& global() const { return *global_; }  ///< the single-device layout this one draws from
  int64_t total() const { return total_; }  ///< elements of the local buffer
  const std::vector<LocalTensor>& tensors() const { return tensors_; }  ///< the local tensors, in global order
  /// This rank's part of the named tensor, or null when it holds none of it.
  const LocalTensor* find(const std::string& name) const;
  /// The runs of the local elements [begin, end) (all of them by default), in local order.
  std::vector<LayoutRun> runs(int64_t begin = 0, int64_t end = -1) const;

  /// Writes the single-device initial values of local elements [begin, end); `local`
  /// points at local element `begin` (a ZeRO shard of the local buffer, or all of it).
  template <class T>
  void init(uint64_t seed, T* local, int64_t begin = 0, int64_t end = -1) const;
  /// Copies the local elements to their places in a global buffer (counted ones only,
  /// or all); scatter() is the way back.
  template <class T>
  void gather(const T* local, T* global, bool counted_only) const;
  /// Fills the whole local buffer from a global buffer (every held element, counted or not).
  template <class T>
  void scatter(const T* global, T* local) const;

  /// Sum of squares of the COUNTED elements of local range [begin, end) (`local` points at
  /// element `begin`), in double: this rank's share of the squared global gradient norm,
  /// a replica counted once.
  /// Each piece's sum is ops::sum_of_squares's (a piece: one tensor's counted runs that
  /// continue each other in local memory, joined; `local` in device memory on the GPU),
  /// added in the pieces' order: the same for every schedule.
  double counted_sum_of_squares(Device d, const float* local, int64_t begin = 0, int64_t end = -1) const;
  /// The same, per tensor: adds the sums of each tensor's pieces, in local order, to
  /// per_tensor[its index in global().tensors()]. A tensor held whole by one rank gets
  /// the same sum whichever rank holds it (a pipeline stage or another).
  void counted_squares_by_tensor(Device d, const float* local, double* per_tensor, int64_t begin = 0,
                                 int64_t end = -1) const;

 private:
  const ParamLayout* global_;
  std::vector<LocalTensor> tensors_;
  int64_t total_ = 0;
};

/// Checks that a set of layouts (one per rank) counts every global element exactly once
/// and that every held element is some rank's counted one; a UserError names the first
/// tensor element counted twice or by nobody.
void check_counted_once(const ParamLayout& global, const std::vector<RankLayout>& ranks);

}  // namespace gpt
