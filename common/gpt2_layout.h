/// @file
/// The GPT-2 parameter layout: every parameter tensor by name, shape and offset in
/// one flat buffer, and how it is initialised.
///
/// Order (layer-contiguous, so a pipeline stage or a ZeRO-3 gather takes one range):
/// ```
///   wte [Vp,C]  wpe [block_size,C]
///   for each layer l:  h.l.ln_1.{weight,bias} [C]   h.l.attn.c_attn.{weight [3C,C], bias [3C]}
///                      h.l.attn.c_proj.{weight [C,C], bias [C]}   h.l.ln_2.{weight,bias} [C]
///                      h.l.mlp.c_fc.{weight [4C,C], bias [4C]}    h.l.mlp.c_proj.{weight [C,4C], bias [C]}
///   ln_f.{weight,bias} [C]
/// ```
/// Linear weights are (out, in), as in PyTorch's nn.Linear. The embedding is tied: wte
/// is also the language-model head. Rows V..Vp-1 of wte are padding, initialised to 0.
///
/// Initialisation (GPT-2): weights and embeddings N(0, 0.02); the two residual
/// projections (c_proj) N(0, 0.02/sqrt(2 n_layer)); biases 0; layernorm weight 1.
/// Element i of tensor `name` is drawn at (seed, stream_id(name), i) by the
/// counter-based RNG, so it does not depend on how the tensor is sharded.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"

namespace gpt {

/// How a tensor's elements start: Normal draws N(0, init_std) (for rows below init_rows;
/// the rest 0), Zeros is 0 (biases, wte's padding), Ones is 1 (layernorm weights).
enum class Init { Normal, Zeros, Ones };

/// Layers [begin, end) of the model a pipeline stage runs; end -1 means n_layer (all). The
/// stage holding layer 0 also holds the embeddings, the one holding the last layer ln_f
/// and the tied LM head (wte, which so lives on the first and the last stage).
struct LayerRange {
  /// begin: the stage's first layer, in [0, n_layer).
  int begin = 0, end = -1;  ///< end: one past the stage's last layer; -1 = n_layer
};

/// Rows [begin, end) of the padded vocabulary (of wte, of the logits' columns).
struct VocabRange {
  /// begin: the first row held, in [0, Vp).
  int begin = 0, end = 0;  ///< end: one past the last row held, at most Vp
  int size() const { return end - begin; }  ///< rows held
};
/// The rows tensor-parallel rank `rank` of `tp` holds: [floor(r Vp / tp), floor((r+1) Vp / tp)),
/// the ring's chunk rule, so any tp works and sizes differ by at most one row.
inline VocabRange vocab_range(const ModelConfig& m, int tp, int rank) {
  const int64_t Vp = m.padded_vocab();
  return {int(Vp * rank / tp), int(Vp * (rank + 1) / tp)};
}

/// The parameters of the whole model with wte's `padded_vocab` rows (the layout's total at
/// tp = pp = 1): wte and wpe, 12 C^2 + 13 C a block, ln_f's 2 C. In double, so that a huge
/// shape (a corrupt header's) cannot overflow before it is compared with what is there.
inline double gpt2_param_count(const ModelConfig& m, int64_t padded_vocab) {
  const double C = m.n_embd;
  return double(padded_vocab) * C + double(m.block_size) * C + double(m.n_layer) * (12 * C * C + 13 * C) + 2 * C;
}

/// A tensor's shape as text: [768, 3072].
std::string shape_text(const std::vector<int64_t>& shape);

/// One parameter tensor of a layout: where it lies in the flat buffer and how it starts.
struct ParamTensor {
  std::string name;  ///< the GPT-2 checkpoint name ("wte", "h.3.attn.c_attn.weight", ...)
  std::vector<int64_t> shape;  ///< as this layout holds it (a tensor-parallel slice is smaller)
  int64_t offset = 0;  ///< elements from the start of the flat buffer
  int64_t numel = 0;  ///< elements: the product of shape
  int layer = -1;       ///< transformer block index, -1 for embeddings and ln_f
  bool decay = false;   ///< weight decay applies (2-D weights and embeddings)
  Init init = Init::Zeros;  ///< how its elements start
  double init_std = 0.0;  ///< standard deviation of an Init::Normal tensor (0.02, c_proj 0.02/sqrt(2 n_layer))
  int64_t init_rows = 0;  ///< for wte: rows [0, vocab) get the normal init, the padding stays 0
};

/// Offsets of one transformer block's tensors within the flat buffer.
struct BlockParams {
  int64_t ln1_w, ln1_b, qkv_w, qkv_b, attproj_w, attproj_b;
  int64_t ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  // Shapes under tensor parallelism over tp ranks: W = C/tp, F = 4C/tp (tp = 1: W = C, F = 4C).
  /// @var ln1_w
  /// offset of h.l.ln_1.weight [C]
  /// @var ln1_b
  /// offset of h.l.ln_1.bias [C]
  /// @var qkv_w
  /// offset of h.l.attn.c_attn.weight [3W, C]: this rank's rows of q, then of k, then of v
  /// @var qkv_b
  /// offset of h.l.attn.c_attn.bias [3W], in the same order
  /// @var attproj_w
  /// offset of h.l.attn.c_proj.weight [C, W]
  /// @var attproj_b
  /// offset of h.l.attn.c_proj.bias [C]
  /// @var ln2_w
  /// offset of h.l.ln_2.weight [C]
  /// @var ln2_b
  /// offset of h.l.ln_2.bias [C]
  /// @var fc_w
  /// offset of h.l.mlp.c_fc.weight [F, C]
  /// @var fc_b
  /// offset of h.l.mlp.c_fc.bias [F]
  /// @var fcproj_w
  /// offset of h.l.mlp.c_proj.weight [C, F]
  /// @var fcproj_b
  /// offset of h.l.mlp.c_proj.bias [C]
};

/// A unit is a contiguous range of the flat buffer that the model uses as a whole:
/// unit 0 the embeddings (wte, wpe), units 1..L the blocks, unit L+1 the final layernorm.
/// The model asks for weights and hands back gradients one unit at a time (WeightStore in
/// gpt2.h), which is where ZeRO-3 gathers a layer's weights and ZeRO-2 shards its grads.
struct Unit {
  /// begin: offset of the unit's first element in the flat buffer.
  int64_t begin = 0, end = 0;  ///< end: one past the unit's last element; == begin for an empty unit
  int64_t size() const { return end - begin; }  ///< elements; 0 where a stage holds none of it
};

/// The parameter table of a model, of one tensor-parallel rank's slice of it or of one
/// pipeline stage's part: the tensors in order with their offsets, the per-block offsets,
/// and the units. Built once from a ModelConfig; read-only afterwards.
class ParamLayout {
 public:
  /// The whole model, as one process holds it (tp 1, every layer); validate() has checked
  /// the shape.
  explicit ParamLayout(const ModelConfig& m);
  /// The tensors as tensor-parallel rank `tp_rank` of `tp` holds them in its local buffer
  /// (RankLayout::tensor_parallel puts the slices there in this order): the same names,
  /// smaller shapes (c_attn [3C/tp, C], attn.c_proj [C, C/tp], c_fc [4C/tp, C],
  /// mlp.c_proj [C, 4C/tp], wte [its vocabulary rows, C]) and so smaller units. Stores,
  /// buckets and shards that work on units of a flat buffer work on it unchanged. It
  /// cannot initialise (the values are the global tensors': RankLayout::init does).
  ParamLayout(const ModelConfig& m, int tp, int tp_rank);
  /// The tensors of a pipeline stage running `layers` (of tensor-parallel rank tp_rank of
  /// tp): wte if it is the first or the last stage, wpe if the first, its blocks, ln_f if
  /// the last, in the global order (RankLayout::pipeline_stage puts them there). The units
  /// keep their meaning: unit 0 the embeddings this stage holds (possibly none), one unit
  /// per block it runs, the last unit its final layernorm (possibly none).
  ParamLayout(const ModelConfig& m, int tp, int tp_rank, LayerRange layers);
  int tp() const { return tp_; }  ///< tensor-parallel ranks the tensors are sliced over; 1 = unsliced
  /// The layers this layout holds: [layer_begin(), layer_end()); all of them unless it is
  /// a pipeline stage's.
  int layer_begin() const { return l0_; }
  int layer_end() const { return l1_; }  ///< one past the last layer held
  bool has_embeddings() const { return l0_ == 0; }       ///< holds wpe (and wte): it runs layer 0
  bool has_head() const { return l1_ == model_.n_layer; }  ///< holds ln_f (and wte): it runs the last layer
  /// Every tensor, unsliced: the layout init_range can initialise.
  bool is_whole() const { return tp_ == 1 && has_embeddings() && has_head(); }

  const std::vector<ParamTensor>& tensors() const { return tensors_; }  ///< in buffer order
  int64_t total() const { return total_; }  ///< elements of the flat buffer
  const ParamTensor& find(const std::string& name) const;  ///< UserError if absent

  /// Offsets of the named tensors; on a pipeline stage only those it holds are valid.
  int64_t wte() const { return wte_; }
  int64_t wpe() const { return wpe_; }  ///< offset of wpe [block_size, C]; valid where has_embeddings()
  int64_t lnf_w() const { return lnf_w_; }  ///< offset of ln_f.weight [C]; valid where has_head()
  int64_t lnf_b() const { return lnf_b_; }  ///< offset of ln_f.bias [C]; valid where has_head()
  /// The offsets of global layer l's tensors; l in [layer_begin, layer_end) (unchecked).
  const BlockParams& block(int l) const { return blocks_[size_t(l - l0_)]; }

  /// Units of this layout: 2 + the layers it holds (the first and last possibly empty).
  int num_units() const { return int(units_.size()); }
  const Unit& unit(int u) const { return units_[u]; }  ///< u in [0, num_units()), unchecked
  static constexpr int kEmbeddingUnit = 0;  ///< the unit of wte and wpe
  int block_unit(int l) const { return 1 + l - l0_; }  ///< the unit of global layer l (of those held)
  int final_unit() const { return num_units() - 1; }  ///< the unit of ln_f
  const ModelConfig& model() const { return model_; }  ///< the whole model's shape, also for a slice or a stage

  /// Writes the initial value of elements [begin, end) of the flat buffer (any range:
  /// a shard gets exactly the values the whole buffer has there). The values are fp32
  /// numbers whatever T is: a double buffer gets them widened, so that the fp64 ground
  /// truth starts where the fp32 runs start, and its distance from one is what their
  /// arithmetic does, not where they began.
  template <class T>
  void init_range(uint64_t seed, int64_t begin, int64_t end, T* out) const;

 private:
  int64_t add(const std::string& name, std::vector<int64_t> shape, int layer, bool decay, Init init,
              double std = 0.0);
  ModelConfig model_;
  int tp_ = 1;
  int l0_ = 0, l1_ = 0;
  std::vector<ParamTensor> tensors_;
  std::vector<BlockParams> blocks_;
  std::vector<Unit> units_;
  int64_t total_ = 0, wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
};

}  // namespace gpt
