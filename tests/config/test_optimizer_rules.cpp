// The training rules every stage shares with stage 01, stated here outright: the
// learning-rate schedule, the clip factor and which tensors take weight decay
// (common/optimizer.h, common/gpt2_layout.h). The equivalence tests cannot see a
// mistake in these, since the stage they compare with makes the same one; the torch
// oracle can, but only where PyTorch is installed. Each value below is worked out by
// hand from the rule in its comment.
#include <catch2/catch.hpp>
#include <cmath>

#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/gpt2_layout.h"
#include "common/optimizer.h"

using namespace gpt;

TEST_CASE("optimizer: the learning rate warms up linearly, then follows a cosine down to min_lr_ratio",
          "[optimizer]") {
  Config cfg;
  cfg.lr = 1e-3, cfg.warmup_steps = 4, cfg.steps = 14, cfg.min_lr_ratio = 0.1;
  // Warmup: step s (counted from 0) takes lr (s + 1) / warmup_steps, so the first step
  // already moves the weights and step warmup_steps - 1 reaches lr.
  CHECK(learning_rate(cfg, 0) == Approx(2.5e-4).epsilon(1e-12));
  CHECK(learning_rate(cfg, 1) == Approx(5e-4).epsilon(1e-12));
  CHECK(learning_rate(cfg, 3) == Approx(1e-3).epsilon(1e-12));
  // Then over steps - warmup_steps = 10 steps, lr (r + (1 - r) (1 + cos(pi p)) / 2) with
  // p = (s - 4) / 10 and r = 0.1: p = 0 gives lr, p = 1/2 gives lr (r + (1 - r) / 2),
  // p = 1 and beyond (a run extended past its schedule) stay at lr r.
  CHECK(learning_rate(cfg, 4) == Approx(1e-3).epsilon(1e-12));
  CHECK(learning_rate(cfg, 6) == Approx(1e-3 * (0.1 + 0.9 * 0.5 * (1.0 + 0.80901699437494742))).epsilon(1e-12));
  CHECK(learning_rate(cfg, 9) == Approx(5.5e-4).epsilon(1e-12));
  CHECK(learning_rate(cfg, 14) == Approx(1e-4).epsilon(1e-12));
  CHECK(learning_rate(cfg, 1000) == Approx(1e-4).epsilon(1e-12));
  // No warmup: step 0 is already the top of the cosine.
  cfg.warmup_steps = 0;
  CHECK(learning_rate(cfg, 0) == Approx(1e-3).epsilon(1e-12));
}

TEST_CASE("optimizer: lr_schedule linear, constant and wsd after the same warmup", "[optimizer]") {
  Config cfg;
  cfg.lr = 1e-3, cfg.warmup_steps = 4, cfg.steps = 14, cfg.min_lr_ratio = 0.1;
  // The warmup is the schedule's in every case: step 0 takes lr / 4.
  for (const char* schedule : {"cosine", "linear", "constant", "wsd"}) {
    cfg.lr_schedule = schedule;
    INFO("lr_schedule=" << schedule);
    CHECK(learning_rate(cfg, 0) == Approx(2.5e-4).epsilon(1e-12));
    CHECK(learning_rate(cfg, 4) == Approx(1e-3).epsilon(1e-12));  // p = 0: lr, whatever the schedule
  }
  // linear: lr (r + (1 - r)(1 - p)), p = (s - 4) / 10: halfway (s = 9) lr (0.1 + 0.45),
  // and from p = 1 on lr r.
  cfg.lr_schedule = "linear";
  CHECK(learning_rate(cfg, 6) == Approx(1e-3 * (0.1 + 0.9 * 0.8)).epsilon(1e-12));
  CHECK(learning_rate(cfg, 9) == Approx(5.5e-4).epsilon(1e-12));
  CHECK(learning_rate(cfg, 14) == Approx(1e-4).epsilon(1e-12));
  CHECK(learning_rate(cfg, 1000) == Approx(1e-4).epsilon(1e-12));
  // constant: lr after the warmup, min_lr_ratio unused.
  cfg.lr_schedule = "constant";
  CHECK(learning_rate(cfg, 9) == 1e-3);
  CHECK(learning_rate(cfg, 1000) == 1e-3);
  // wsd with f = 0.2: stable (exactly lr) while p <= 0.8, i.e. steps 4..12; then, over the
  // decay's own progress q = (p - 0.8) / 0.2, lr (r + (1 - r)(1 - sqrt(q))): at step 13
  // q = 1/2, 1 - sqrt(1/2) = 0.29289321881345254; at step 14 q = 1: lr r.
  cfg.lr_schedule = "wsd";
  cfg.lr_decay_fraction = 0.2;
  for (int64_t s = 4; s <= 12; ++s) CHECK(learning_rate(cfg, s) == 1e-3);
  CHECK(learning_rate(cfg, 13) == Approx(1e-3 * (0.1 + 0.9 * 0.29289321881345254)).epsilon(1e-12));
  CHECK(learning_rate(cfg, 14) == Approx(1e-4).epsilon(1e-12));
  CHECK(learning_rate(cfg, 1000) == Approx(1e-4).epsilon(1e-12));
  // Extending the run (steps 14 -> 24, a resume with more steps) keeps step 13 in the stable
  // phase: the point of wsd. The cosine's rate at step 13 would instead rise (control).
  Config longer = cfg;
  longer.steps = 24;
  CHECK(learning_rate(longer, 13) == 1e-3);
  Config cosine = cfg, cosine_longer = longer;
  cosine.lr_schedule = cosine_longer.lr_schedule = "cosine";
  CHECK(learning_rate(cosine_longer, 13) > learning_rate(cosine, 13));
  // The decay's start is stable exactly, whatever f: at f = 0.9 and p = 0.1 (step 5 of 10
  // decay steps after a warmup of 4), (p - (1 - f)) / f rounds to 3e-17 in doubles, whose
  // root would put the rate 5e-9 below lr.
  Config nine = cfg;
  nine.lr_decay_fraction = 0.9, nine.warmup_steps = 4, nine.steps = 14;
  CHECK(learning_rate(nine, 5) == 1e-3);
  CHECK(learning_rate(nine, 6) < 1e-3);
  // f = 1: the decay takes every step after the warmup; halfway, q = p = 1/2.
  cfg.lr_decay_fraction = 1.0;
  CHECK(learning_rate(cfg, 5) < 1e-3);
  CHECK(learning_rate(cfg, 9) == Approx(1e-3 * (0.1 + 0.9 * 0.29289321881345254)).epsilon(1e-12));
}

TEST_CASE("optimizer: the clip factor scales a gradient whose global norm passes grad_clip down to it",
          "[optimizer]") {
  CHECK(clip_scale(4.0, 1.0, 1) == 0.25);  // norm 4 -> 1: exactly clip / norm
  CHECK(clip_scale(1.0, 1.0, 1) == 1.0);   // at the limit: untouched
  CHECK(clip_scale(0.5, 1.0, 1) == 1.0);   // below it: untouched, never scaled up
  CHECK(clip_scale(4.0, 0.0, 1) == 1.0);   // grad_clip 0 turns clipping off
  CHECK(clip_scale(0.0, 1.0, 1) == 1.0);   // a zero gradient: nothing to scale
}

TEST_CASE("optimizer: a gradient norm that is not finite stops the step, clipping or not", "[optimizer]") {
  // nan would clip nothing (nan > clip is false), and inf would scale by 0, 0 x inf = nan:
  // either update would make the weights nan.
  for (const double clip : {1.0, 0.0}) {
    CHECK_THROWS_WITH(clip_scale(std::nan(""), clip, 7),
                      Catch::Contains("step 7: the gradient norm is nan") && Catch::Contains("step 6"));
    CHECK_THROWS_WITH(clip_scale(INFINITY, clip, 7), Catch::Contains("step 7: the gradient norm is inf"));
  }
  CHECK_THROWS_AS(clip_scale(-INFINITY, 1.0, 3), gpt::UserError);
}

namespace {
// The convention written independently of the layout's own flags: weight decay on
// every matrix (attention and MLP weights) and on both embeddings, never on a bias or
// a layernorm's weight or bias.
bool should_decay(const std::string& name) {
  if (name == "wte" || name == "wpe") return true;
  const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  const bool layernorm = name.find("ln_") != std::string::npos;
  return !bias && !layernorm;
}
}  // namespace

TEST_CASE("optimizer: weight decay falls on the matrices and embeddings, never on biases or layernorms",
          "[optimizer]") {
  ModelConfig m;
  m.n_layer = 3, m.n_embd = 32, m.n_head = 4, m.block_size = 16, m.vocab_size = 200;
  int decayed = 0, kept = 0;
  // The whole model, and each rank's slices under tensor parallelism and pipeline cuts.
  const auto check = [&](const ParamLayout& layout, const std::string& where) {
    for (const ParamTensor& t : layout.tensors()) {
      INFO(where << ": " << t.name);
      CHECK(t.decay == should_decay(t.name));
      CHECK(t.decay == (t.shape.size() == 2));  // the same rule by shape: the 2-D tensors
      (t.decay ? decayed : kept) += 1;
    }
  };
  check(ParamLayout(m), "tp 1");
  for (int r = 0; r < 2; ++r) check(ParamLayout(m, 2, r), "tp 2 rank " + std::to_string(r));
  check(ParamLayout(m, 4, 3, LayerRange{1, 3}), "tp 4 rank 3, layers 1-2");
  // 3 + 3 + 3 + 2 = 11 blocks of 4 matrices and 8 vectors; outside the blocks wte and wpe
  // on the first three layouts and wte alone on the last (it holds no layer 0), and ln_f's
  // two vectors on all four.
  CHECK(decayed == 4 * 11 + (2 + 2 + 2 + 1));
  CHECK(kept == 8 * 11 + 2 * 4);
}

// The flags above are the layout's; this is the update's use of them. With a zero
// gradient AdamW's moments stay zero, so an element moves by its decay alone:
// p <- p - lr * wd * p where it decays, and not at all where it does not. Checked on
// the whole model and on a range that starts and ends inside tensors (a ZeRO shard),
// whose segments are cut from the tensors it overlaps; elements outside it stay put.
TEST_CASE("optimizer: the update decays exactly the elements of decayed tensors, in any range", "[optimizer]") {
  ModelConfig m;
  m.n_layer = 2, m.n_embd = 16, m.n_head = 2, m.block_size = 8, m.vocab_size = 64;
  const ParamLayout layout(m);
  Config cfg;
  cfg.weight_decay = 0.25;
  const double lr = 0.5, decayed_value = 1.0 - lr * (cfg.weight_decay * 1.0);
  const auto& tensors = layout.tensors();
  const std::pair<int64_t, int64_t> ranges[] = {
      {0, layout.total()}, {tensors[1].offset + 3, tensors[6].offset + 7}};
  for (const auto& [begin, end] : ranges) {
    INFO("range [" << begin << ", " << end << ") of " << layout.total());
    std::vector<double> params(size_t(layout.total()), 1.0), grads(params.size(), 0.0);
    AdamW<double> opt(layout, begin, end, /*keep_master=*/false);
    opt.step(Device::CPU, params.data() + begin, grads.data() + begin, lr, 1.0, cfg, /*step_number=*/1);
    int64_t wrong = 0, moved = 0;
    for (const ParamTensor& t : tensors)
      for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
        const bool inside = i >= begin && i < end;
        const double want = inside && should_decay(t.name) ? decayed_value : 1.0;
        wrong += params[size_t(i)] != want;
        moved += params[size_t(i)] != 1.0;
      }
    CHECK(wrong == 0);
    CHECK(moved > 0);  // the control: the decay did act somewhere
  }
}
