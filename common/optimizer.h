/// @file
/// AdamW with fp32 state (double in the fp64 runs), a learning rate warmed up and then
/// decayed by a schedule, global-norm gradient clipping.
///
/// ```
///   lr(s) = lr * (s+1)/warmup                            for s < warmup
///         = lr * (r + (1-r) * left(p)),  p = min(1, (s-warmup)/max(1, steps-warmup)), r = min_lr_ratio
///   left(p) = (1 + cos(pi * p)) / 2                      lr_schedule=cosine (GPT-2, GPT-3)
///           = 1 - p                                      linear
///           = 1 (lr throughout)                          constant
///           = 1 - sqrt(max(0, (p - (1-f)) / f))          wsd, f = lr_decay_fraction
///   clip: grads scaled by min(1, clip / ||g||_2) over all tensors.
/// ```
/// wsd (warmup-stable-decay, as MiniCPM trained) holds lr until the last f of the steps
/// and only then decays, so a run can be extended (more steps) without redoing its
/// decay; the decay's 1 - sqrt shape is the one Hägele et al. (2024, "Scaling Laws and
/// Compute-Optimal Training Beyond Fixed Training Durations") report doing better than a
/// linear cool-down.
/// Weight decay applies only to tensors whose layout entry says `decay` (2-D weights and
/// the embeddings), as GPT-2 training does.
/// optimizer=sgd swaps the update for plain SGD, p -= lr * clip * g (no moments, no weight
/// decay), through the same class and state (m and v stay zero), so every stage runs it
/// unchanged: the equivalence tests' one-step SGD comparison, where a gradient off by a
/// constant factor shows in the weights (AdamW's update is nearly blind to it).
#pragma once
#include <cstdint>
#include <vector>

#include "common/bf16.h"
#include "common/config.h"
#include "common/device.h"
#include "common/device_array.h"
#include "common/gpt2_layout.h"
#include "common/rank_layout.h"

namespace gpt {

/// The learning rate of 0-based step `step` by the schedule above: linear warmup over
/// cfg.warmup_steps, then cfg.lr_schedule's decay to cfg.lr * cfg.min_lr_ratio at cfg.steps.
double learning_rate(const Config& cfg, int64_t step);

/// Clip factor for a gradient of global norm `norm`: min(1, clip / norm); 1 if clip <= 0.
/// A norm that is not finite (a gradient holding inf or nan, which a finite loss does not
/// rule out) is a UserError naming step `step` (1-based): an update on it would make the
/// weights nan, and the run's next checkpoint, then pruned to, would hold them; stopping
/// here leaves the run directory's checkpoints as they were.
double clip_scale(double norm, double clip, int64_t step);

/// AdamW (or SGD with optimizer=sgd) over a contiguous range of the parameters, its
/// state in T: float, or double in the fp64 runs.
template <class T>
class AdamW {
 public:
  /// Owns m, v and (when keep_master) fp32 master weights for elements
  /// [begin, end) of the layout's flat buffer: the whole model in stage 01, a shard later.
  /// The state lives in the memory of `device`.
  AdamW(const ParamLayout& layout, int64_t begin, int64_t end, bool keep_master,
        Device device = Device::CPU);
  /// The same for elements [begin, end) of a rank's LOCAL buffer of `layout` (tensor or
  /// pipeline slices): which elements decay comes from the global tensor each belongs to.
  AdamW(const RankLayout& layout, int64_t begin, int64_t end, bool keep_master, Device device = Device::CPU);

  /// One update of the owned range: params/grads point at element `begin`. With
  /// round_copy_to_bf16 (bf16 emulated in fp32 buffers, the tests' reference)
  /// the master weights are updated and params receives their bf16-rounded copy; without
  /// it (fp32, fp64) params are the weights the update writes.
  void step(Device d, T* params, const T* grads, double lr, double grad_scale, const Config& cfg,
            int step_number, bool round_copy_to_bf16 = false);
  /// The same update for real bf16 storage: the fp32 master weights are updated and params
  /// receives their bf16 rounding. Needs keeps_master() and T = float (else InternalError).
  void step(Device d, bf16* params, const T* grads, double lr, double grad_scale, const Config& cfg,
            int step_number);

  /// The weights the range computes with, from its master weights: at the start and after a
  /// resume (a checkpoint holds the master weights). params (element `begin`) receive their
  /// bf16 rounding. Needs keeps_master() and T = float (else InternalError).
  void weights_from_master(Device d, bf16* params);
  /// In fp32 and fp64 the parameters are themselves the weights each step writes (no master
  /// copy is kept): nothing to do.
  void weights_from_master(Device, T*) {}

  /// The master weights of the range (empty unless keeps_master()); the caller fills them
  /// (initial weights or a checkpoint) before the first step.
  DeviceArray<T>& master() { return master_; }
  DeviceArray<T>& m() { return m_; }  ///< first moments of the range, zero at construction
  DeviceArray<T>& v() { return v_; }  ///< second moments of the range, zero at construction
  bool keeps_master() const { return keep_master_; }  ///< whether master weights are held
  int64_t begin() const { return begin_; }  ///< first element of the range in the flat buffer
  int64_t end() const { return end_; }  ///< one past the range's last element
  /// Memory held by the master weights and moments, in bytes.
  size_t state_bytes() const { return master_.bytes() + m_.bytes() + v_.bytes(); }

 private:
  // bf16 weights are made from fp32 master weights: fails unless this optimizer keeps them.
  void require_fp32_master() const;
  template <class Copy>
  void update(Device d, Copy* params, const T* grads, double lr, double grad_scale,
              const Config& cfg, int step_number, bool round_copy_to_bf16);

  /// Consecutive elements that share the weight-decay rule, relative to begin.
  struct Segment {
    int64_t begin, end;
    bool decay;
  };
  AdamW(std::vector<Segment> segments, int64_t begin, int64_t end, bool keep_master, Device device);

  std::vector<Segment> segments_;
  int64_t begin_, end_;
  bool keep_master_;
  DeviceArray<T> master_, m_, v_;
};

}  // namespace gpt
