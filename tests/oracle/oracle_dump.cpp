// oracle_dump: runs our GPT-2 on a fixed problem and writes everything the PyTorch
// oracle (torch_gpt2.py) needs to redo the same computation and judge ours.
//
//   oracle_dump OUT_DIR n_layer n_embd n_head seq_len batch vocab_size
//
// The problem: initial weights from the layout's counter-based initialiser, and 10
// micro-batches of `batch` rows of seq_len+1 random tokens (inputs are a row's first
// seq_len tokens, targets the last seq_len). It is run in three precisions:
//   f64   GPT2<double>, fp32 mode: the same math in double, for the ground-truth check;
//   f32   GPT2<float>,  fp32 mode: the mode stage equivalence is proven in;
//   bf16  GPT2<float>,  bf16 mode: bf16 weights copy and activations, fp32 master
//         weights and AdamW state.
// Each run does
//   (a) forward + backward(1) on micro-batch 0: logits, loss, every parameter gradient;
//   (b) from the same initial weights, 5 AdamW steps with gradient accumulation 2
//       (step s uses micro-batches 2s and 2s+1, each backward with loss_scale 1/2),
//       global-norm clipping and the warmup + cosine schedule: the mean loss and the
//       gradient norm of each step, the final (master) weights and AdamW's two moments.
// Output, all little-endian: tokens.bin (int32, 10 x batch x (seq_len+1)),
// init_f64.bin and init_f32.bin, and per mode {mode}_logits.bin, {mode}_loss.bin,
// {mode}_grads.bin, {mode}_step_losses.bin, {mode}_grad_norms.bin,
// {mode}_final_params.bin, {mode}_adam_m.bin, {mode}_adam_v.bin (float64, whatever the
// precision the run computed in), plus
// meta.json: shapes, hyper-parameters, the learning rate of each step and the
// parameter table (name, offset, shape).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/gpt2.h"
#include "common/gpt2_layout.h"
#include "common/optimizer.h"
#include "common/rng.h"
#include "kernels/ops.h"

namespace {

using namespace gpt;

constexpr int kMicroBatches = 10;
constexpr int kSteps = 5;
constexpr int kAccum = 2;
constexpr uint64_t kDataSeed = 20240520;

struct Problem {
  Config cfg;               // model shape + optimiser hyper-parameters
  int B = 0, T = 0;         // micro-batch rows and sequence length
  std::vector<int32_t> tokens;  // kMicroBatches x B x (T+1)

  // Inputs and targets of micro-batch k, as the model wants them: (B, T) each.
  void micro_batch(int k, std::vector<int32_t>& in, std::vector<int32_t>& tg) const {
    in.resize(size_t(B) * T);
    tg.resize(size_t(B) * T);
    for (int b = 0; b < B; ++b) {
      const int32_t* row = tokens.data() + (size_t(k) * B + b) * (T + 1);
      for (int t = 0; t < T; ++t) {
        in[size_t(b) * T + t] = row[t];
        tg[size_t(b) * T + t] = row[t + 1];
      }
    }
  }
};

template <class T>
void write_f64(const std::filesystem::path& path, const T* data, size_t n) {
  std::vector<double> d(data, data + n);  // everything goes out as float64
  std::ofstream f(path, std::ios::binary);
  require(bool(f), "cannot create " + path.string());
  f.write(reinterpret_cast<const char*>(d.data()), std::streamsize(d.size() * sizeof(double)));
  require(bool(f), "cannot write " + path.string());
}

// One precision mode, both experiments (a) and (b); see the file comment.
template <class T>
void run_mode(const Problem& pb, const std::string& mode, Precision precision,
              const std::filesystem::path& dir, nlohmann::json& meta) {
  const Config& cfg = pb.cfg;
  const bool bf16 = precision == Precision::BF16;
  GPT2<T> model(cfg.model, pb.B, pb.T, Device::CPU, precision);
  const ParamLayout& layout = model.layout();
  const int64_t total = layout.total();

  // The initial weights: fp32 numbers in every precision (widened for double), as every run starts.
  std::vector<T> init(static_cast<size_t>(total));
  layout.init_range(cfg.seed, 0, total, init.data());
  model.set_params(init.data());  // in bf16 mode the compute copy is rounded here

  std::vector<int32_t> in, tg;
  const size_t N = size_t(pb.B) * pb.T;

  // (a) one forward and backward on micro-batch 0.
  pb.micro_batch(0, in, tg);
  model.zero_grads();
  const T loss = model.forward(in.data(), tg.data());
  model.backward(T(1));
  write_f64(dir / (mode + "_logits.bin"), model.logits(), N * size_t(cfg.model.padded_vocab()));
  write_f64(dir / (mode + "_loss.bin"), &loss, 1);
  write_f64(dir / (mode + "_grads.bin"), model.grads().data(), size_t(total));

  // (b) 5 optimizer steps from the same initial weights (the forward/backward of (a)
  // changed no weights). In bf16 mode the optimizer owns fp32 master weights, the
  // model's params are their bf16-rounded copy; in fp32/double it updates the params.
  AdamW<T> opt(layout, 0, total, /*keep_master=*/bf16);
  if (bf16) opt.master().copy_from_host(init.data(), init.size());
  std::vector<double> step_losses, grad_norms, lrs;
  for (int s = 0; s < kSteps; ++s) {
    model.zero_grads();
    double loss_sum = 0;
    for (int k = 0; k < kAccum; ++k) {
      pb.micro_batch(kAccum * s + k, in, tg);
      loss_sum += double(model.forward(in.data(), tg.data()));
      model.backward(T(1.0 / kAccum));  // gradient of the mean over the accumulated micro-batches
    }
    const double norm = std::sqrt(ops::sum_of_squares(Device::CPU, model.grads().data(), size_t(total)));
    const double lr = learning_rate(cfg, s);
    opt.step(Device::CPU, model.params().data(), model.grads().data(), lr,
             clip_scale(norm, cfg.grad_clip, s + 1), cfg, /*step_number=*/s + 1,
             /*round_copy_to_bf16=*/bf16);
    step_losses.push_back(loss_sum / kAccum);
    grad_norms.push_back(norm);
    lrs.push_back(lr);
  }
  write_f64(dir / (mode + "_step_losses.bin"), step_losses.data(), step_losses.size());
  write_f64(dir / (mode + "_grad_norms.bin"), grad_norms.data(), grad_norms.size());
  const DeviceArray<T>& final_params = bf16 ? opt.master() : model.params();
  write_f64(dir / (mode + "_final_params.bin"), final_params.data(), final_params.size());
  // The moments see what the update hides: m / sqrt(v) is unchanged when every clipped
  // gradient is off by the same factor, m and v are not.
  write_f64(dir / (mode + "_adam_m.bin"), opt.m().data(), opt.m().size());
  write_f64(dir / (mode + "_adam_v.bin"), opt.v().data(), opt.v().size());

  if (mode == "f64") {
    write_f64(dir / "init_f64.bin", init.data(), init.size());
    meta["lrs"] = lrs;
  }
  if (mode == "f32") write_f64(dir / "init_f32.bin", init.data(), init.size());
  std::printf("%-5s loss %.6f  step losses", mode.c_str(), double(loss));
  for (double l : step_losses) std::printf(" %.6f", l);
  std::printf("  grad norms");
  for (double g : grad_norms) std::printf(" %.4f", g);
  std::printf("\n");
}

int parse_int(const char* s, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  require(end != s && *end == '\0' && v > 0, std::string(what) + ": '" + s + "' is not a positive integer");
  require(v < 1000000, std::string(what) + ": " + s + " is too large for a test problem (at most 999999)");
  return int(v);
}

int oracle_main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: %s OUT_DIR n_layer n_embd n_head seq_len batch vocab_size\n"
                 "Writes our GPT-2's logits, loss, gradients and 5 AdamW steps in f64, f32 and\n"
                 "bf16 for tests/oracle/torch_gpt2.py to check against PyTorch (the files it\n"
                 "writes in OUT_DIR, made if missing, replace any of the same name).\n",
                 argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    fail("OUT_DIR " + dir.string() + " exists and is not a directory");
  Problem pb;
  Config& cfg = pb.cfg;
  cfg.model.n_layer = parse_int(argv[2], "n_layer");
  cfg.model.n_embd = parse_int(argv[3], "n_embd");
  cfg.model.n_head = parse_int(argv[4], "n_head");
  pb.T = parse_int(argv[5], "seq_len");
  pb.B = parse_int(argv[6], "batch");
  cfg.model.vocab_size = parse_int(argv[7], "vocab_size");
  require(cfg.model.n_embd % cfg.model.n_head == 0, "n_head must divide n_embd");
  cfg.model.block_size = std::max(64, pb.T);
  cfg.seq_len = pb.T;
  cfg.micro_batch_size = pb.B;
  cfg.batch_size = pb.B * kAccum;
  // Optimiser: lr large enough that 5 steps move the weights measurably; warmup 2 and
  // a cosine over the remaining 3 steps, so every branch of the schedule is used.
  cfg.steps = kSteps;
  cfg.warmup_steps = 2;
  cfg.lr = 1e-2;
  cfg.min_lr_ratio = 0.1;
  cfg.weight_decay = 0.1;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.adam_eps = 1e-8;
  cfg.grad_clip = 1.0;
  cfg.seed = 1337;

  // Tokens: uniform in [0, V) from the counter-based RNG (fixed seed: the same problem
  // on every machine).
  const int V = cfg.model.vocab_size;
  pb.tokens.resize(size_t(kMicroBatches) * pb.B * (pb.T + 1));
  for (size_t i = 0; i < pb.tokens.size(); ++i)
    pb.tokens[i] = int32_t(bits64_at(kDataSeed, stream_id("oracle.tokens"), i) % uint64_t(V));

  std::filesystem::create_directories(dir, ec);
  if (ec) fail("OUT_DIR " + dir.string() + ": cannot create it: " + ec.message());
  {
    std::ofstream f(dir / "tokens.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(pb.tokens.data()),
            std::streamsize(pb.tokens.size() * sizeof(int32_t)));
    require(bool(f), "cannot write " + (dir / "tokens.bin").string());
  }

  nlohmann::json meta;
  run_mode<double>(pb, "f64", Precision::FP32, dir, meta);
  run_mode<float>(pb, "f32", Precision::FP32, dir, meta);
  run_mode<float>(pb, "bf16", Precision::BF16, dir, meta);

  const ModelConfig& m = cfg.model;
  meta["model"] = {{"n_layer", m.n_layer},       {"n_embd", m.n_embd},
                   {"n_head", m.n_head},         {"block_size", m.block_size},
                   {"vocab_size", m.vocab_size}, {"padded_vocab", m.padded_vocab()}};
  meta["seq_len"] = pb.T;
  meta["batch"] = pb.B;
  meta["micro_batches"] = kMicroBatches;
  meta["tokens"] = {{"file", "tokens.bin"},
                    {"dtype", "int32"},
                    {"shape", {kMicroBatches, pb.B, pb.T + 1}}};
  meta["train"] = {{"steps", kSteps},           {"grad_accum", kAccum},
                   {"lr", cfg.lr},              {"warmup_steps", cfg.warmup_steps},
                   {"min_lr_ratio", cfg.min_lr_ratio}, {"lr_schedule", cfg.lr_schedule},
                   {"weight_decay", cfg.weight_decay},
                   {"beta1", cfg.beta1},        {"beta2", cfg.beta2},
                   {"eps", cfg.adam_eps},       {"grad_clip", cfg.grad_clip},
                   {"seed", cfg.seed}};
  meta["modes"] = {"f64", "f32", "bf16"};
  const ParamLayout layout(m);
  meta["total_params"] = layout.total();
  nlohmann::json table = nlohmann::json::array();
  for (const ParamTensor& t : layout.tensors())
    table.push_back({{"name", t.name}, {"offset", t.offset}, {"shape", t.shape}});
  meta["params"] = table;
  std::ofstream meta_file(dir / "meta.json");
  meta_file << meta.dump(1) << "\n";
  require(bool(meta_file), "cannot write " + (dir / "meta.json").string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("oracle_dump", [&] { return oracle_main(argc, argv); });
}
