/// @file
/// Generation with a key/value cache: the model runs one new token per step, and each
/// layer's attention reads the keys and values of the earlier positions from a cache
/// instead of computing them again.
/// ```
///   step t (token x_t at position t), in each layer l:
///     [q_t | k_t | v_t] = c_attn(ln_1(h_t))               one row, not t + 1
///     K_l[t], V_l[t]    = k_t, v_t                         appended to layer l's cache
///     a_t = softmax(q_t K_l[0..t]^T / sqrt(hs)) V_l[0..t]  per head
/// ```
/// It is context parallelism with the past in the place of the other ranks: a GPT2 of one
/// token whose position moves along the sequence (GPT2::set_positions), and whose
/// attention hook attends to the cache through the key-block op the ring attention uses
/// (ops::attention_block_forward). Attention is causal, so step t's logits are those of
/// row t of the whole window's forward, up to rounding. On the CPU they are the same bits:
/// every op computes a row on its own, in an order that does not depend on the other rows
/// (the GEMM sums over k in fixed blocks, the flash attention tiles a row's keys from
/// position 0 either way). A step costs one row's work where the window's forward costs
/// t + 1 rows: sampling 200 tokens of GPT-2 124M is 200 rows, not 20,100.
///
/// A context longer than the window slides it: the model sees the last capacity() tokens,
/// each now at another position, so no cached key stays valid. Those tokens run through a
/// second model of the whole window (window_step), which reads the first model's weights:
/// the plain sampler's work, and only once the context has outgrown the window. So does
/// every token of a model whose heads are wider than the GPU's key-block kernels take
/// (uses_cache() false: kGpuBlockMaxHeadSize).
/// The cache is kept in GradOf<A> (fp32 in bf16 mode: the key-block op's type there).
#pragma once
#include <memory>
#include <vector>

#include "common/device_array.h"
#include "common/gpt2.h"
#include "common/model_reader.h"

namespace gpt {

/// A model of batch 1 and one token, and the keys and values of up to capacity() earlier
/// positions of each layer.
template <class A>
class CachedDecoder {
 public:
  using G = GradOf<A>;  ///< the cache's type
  /// Room for `capacity` positions (at most model.block_size), on `device` in `precision`.
  CachedDecoder(const ModelConfig& model, int capacity, Device device, Precision precision);
  CachedDecoder(const CachedDecoder&) = delete;  ///< the model points at the hooks
  CachedDecoder& operator=(const CachedDecoder&) = delete;

  /// The model whose weights the steps use: set them with model().set_params() (or copy
  /// compute weights into model().params()). Run it through step() only: its own forward
  /// would attend with the hook's last position.
  GPT2<A>& model() { return model_; }
  /// Whether step() can run: false on the GPU for heads wider than kGpuBlockMaxHeadSize,
  /// where every token takes window_step.
  bool uses_cache() const { return uses_cache_; }
  int capacity() const { return capacity_; }  ///< positions the cache holds at most
  int length() const { return length_; }      ///< positions in the cache now: the next step's position

  /// Empties the cache: the next step is position 0.
  void reset() { length_ = 0; }
  /// Runs `token` at position length(), appending its keys and values, and writes its
  /// logits (the whole model's Vp values, as float) to host memory at `logits`.
  void step(int token, float* logits);
  /// Runs the `count` (1..capacity()) tokens at `tokens` (host memory) as one window at
  /// positions 0.., without the cache, and writes the last one's logits as step() does.
  void window_step(const int* tokens, int count, float* logits);

 private:
  /// The attention of the one running token to the cache of the layer being run.
  class CacheHooks : public ModelHooks<A> {
   public:
    CacheHooks(const ModelConfig& model, int capacity, Device device);
    void attention_forward(const PieceContext& ctx, A* out, G* lse, const A* qkv, int B, int T, int width,
                           int heads) override;
    void attention_backward(const PieceContext&, A*, const A*, const A*, const A*, const G*, int, int, int,
                            int) override;
    int layer = 0;     ///< the next layer to call the hook (the blocks run in order)
    int position = 0;  ///< the running token's position

   private:
    std::vector<DeviceArray<G>> cache_;  ///< per layer: capacity rows of [k | v], 2C values each
    DeviceArray<G> qkv_wide_, out_wide_;  ///< bf16 mode: the row widened, the output before rounding
  };
  int capacity_;
  Precision precision_;
  bool uses_cache_;
  int length_ = 0;
  CacheHooks hooks_;  ///< before model_: the model's slice points at it
  GPT2<A> model_;
  /// window_step's model, made when first needed: batch 1, capacity() tokens, reading
  /// model_'s weights.
  std::unique_ptr<ModelReader<A>> window_;
};

}  // namespace gpt
