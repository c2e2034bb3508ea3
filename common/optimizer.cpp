// AdamW over the layout's tensors, the learning-rate schedule and the clip factor;
// see optimizer.h.
#include "common/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "kernels/ops.h"

namespace gpt {

double learning_rate(const Config& cfg, int64_t step) {
  if (step < cfg.warmup_steps) return cfg.lr * double(step + 1) / double(cfg.warmup_steps);
  if (cfg.lr_schedule == "constant") return cfg.lr;
  const int64_t decay_steps = std::max<int64_t>(1, cfg.steps - cfg.warmup_steps);
  const double progress = std::min(1.0, double(step - cfg.warmup_steps) / double(decay_steps));
  const double r = cfg.min_lr_ratio;
  // The share of the way from lr (1) down to lr * r (0).
  double left = 0;
  if (cfg.lr_schedule == "cosine") {
    left = 0.5 * (1.0 + std::cos(M_PI * progress));
  } else if (cfg.lr_schedule == "linear") {
    left = 1.0 - progress;
  } else {
    invariant(cfg.lr_schedule == "wsd",
              "learning_rate: lr_schedule '" + cfg.lr_schedule + "' (validate() allows no other)");
    const double f = cfg.lr_decay_fraction;
    // The decay's own progress, (p - (1 - f)) / f, with p + f - 1 first: 1 - f rounds
    // (1 - 0.9 is below 0.1 in doubles), and at the decay's start the rate would come out
    // 5e-9 below lr (the root of 3e-17), where p + f = 0.1 + 0.9 rounds to 1 exactly.
    const double over = progress + f - 1.0;
    const double cooled = over <= 0.0 ? 0.0 : std::min(1.0, over / f);
    left = 1.0 - std::sqrt(cooled);
  }
  return cfg.lr * (r + (1.0 - r) * left);
}

double clip_scale(double norm, double clip, int64_t step) {
  if (!std::isfinite(norm))
    fail("step " + std::to_string(step) + ": the gradient norm is " + std::to_string(norm) +
         ": training stops before this step's update, its weights those of step " + std::to_string(step - 1) +
         ", no checkpoint written of them (lower lr?)");
  if (clip <= 0.0 || !(norm > clip)) return 1.0;
  return clip / norm;
}

namespace {
// Appends [begin, end) with its decay flag, merged into the previous segment when it
// continues it with the same flag (one update call then covers both).
template <class Segment>
void append(std::vector<Segment>& out, int64_t begin, int64_t end, bool decay) {
  if (begin >= end) return;
  if (!out.empty() && out.back().end == begin && out.back().decay == decay) out.back().end = end;
  else out.push_back({begin, end, decay});
}
}  // namespace

template <class T>
AdamW<T>::AdamW(std::vector<Segment> segments, int64_t begin, int64_t end, bool keep_master, Device device)
    : segments_(std::move(segments)), begin_(begin), end_(end), keep_master_(keep_master) {
  const MemScope scope(MemKind::Optimizer);
  const size_t n = size_t(end - begin);
  m_ = DeviceArray<T>(device, n);
  v_ = DeviceArray<T>(device, n);
  if (keep_master) master_ = DeviceArray<T>(device, n);
}

template <class T>
AdamW<T>::AdamW(const ParamLayout& layout, int64_t begin, int64_t end, bool keep_master, Device device)
    : AdamW(
          [&] {
            std::vector<Segment> segments;
            for (const ParamTensor& t : layout.tensors())
              append(segments, std::max(begin, t.offset) - begin, std::min(end, t.offset + t.numel) - begin, t.decay);
            return segments;
          }(),
          begin, end, keep_master, device) {}

template <class T>
AdamW<T>::AdamW(const RankLayout& layout, int64_t begin, int64_t end, bool keep_master, Device device)
    : AdamW(
          [&] {
            std::vector<Segment> segments;
            for (const LayoutRun& run : layout.runs(begin, end))
              append(segments, run.local - begin, run.local + run.length - begin,
                     layout.global().tensors()[size_t(run.tensor)].decay);
            return segments;
          }(),
          begin, end, keep_master, device) {}

template <class T>
void AdamW<T>::step(Device d, T* params, const T* grads, double lr, double grad_scale,
                    const Config& cfg, int step_number, bool round_copy_to_bf16) {
  update(d, params, grads, lr, grad_scale, cfg, step_number, round_copy_to_bf16);
}

template <class T>
void AdamW<T>::require_fp32_master() const {
  invariant(keep_master_, "AdamW: bf16 weights are made from fp32 master weights (keep_master)");
  if constexpr (!std::is_same_v<T, float>)
    internal_error("AdamW<double>: bf16 weights are made from fp32 master weights only");
}

template <class T>
void AdamW<T>::step(Device d, bf16* params, const T* grads, double lr, double grad_scale,
                    const Config& cfg, int step_number) {
  require_fp32_master();
  if constexpr (std::is_same_v<T, float>) update(d, params, grads, lr, grad_scale, cfg, step_number, true);
}

template <class T>
void AdamW<T>::weights_from_master(Device d, bf16* params) {
  require_fp32_master();
  if constexpr (std::is_same_v<T, float>) ops::convert_to_bf16(d, params, master_.data(), master_.size());
}

template <class T>
template <class Copy>
void AdamW<T>::update(Device d, Copy* params, const T* grads, double lr, double grad_scale,
                      const Config& cfg, int step_number, bool round_copy_to_bf16) {
  // Segment by segment, because weight decay applies to some tensors only.
  for (const Segment& seg : segments_) {
    const ops::AdamWArgs args{lr,         cfg.beta1,  cfg.beta2,  cfg.adam_eps, seg.decay ? cfg.weight_decay : 0.0,
                              grad_scale, step_number, cfg.optimizer == "sgd"};
    const int64_t i = seg.begin;
    const size_t n = size_t(seg.end - seg.begin);
    if (keep_master_) {
      ops::adamw_update(d, master_.data() + i, grads + i, m_.data() + i, v_.data() + i, n, args, params + i,
                        round_copy_to_bf16);
    } else if constexpr (std::is_same_v<Copy, T>) {
      ops::adamw_update(d, params + i, grads + i, m_.data() + i, v_.data() + i, n, args);
    }
  }
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace gpt
