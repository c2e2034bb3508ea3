// Driver pieces every data-parallel stage (02-05) shares.
#pragma once
#include <cstdint>
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <exception>
#include <vector>

#include "common/comm.h"
#include "common/config.h"
#include "common/data.h"
#include "common/error.h"
#include "common/gpt2.h"
#include "common/precision.h"

namespace gpt {

// Mean loss over val_batches fixed validation batches; rank r evaluates batches
// r, r+dp, ... and the sums are added across ranks. Every rank runs the same number of
// forwards (a rank past the end repeats batch 0 and ignores it), because a forward
// may communicate (ZeRO-3 gathers weights in it).
inline double validation_loss(GPT2<float>& model, const DataLoader& val, int batches, Communicator& dp) {
  const size_t n = size_t(model.batch()) * model.seq_len();
  std::vector<int32_t> inputs(n), targets(n);
  double sum = 0;
  const int rounds = (batches + dp.size() - 1) / dp.size();
  for (int i = 0; i < rounds; ++i) {
    const int k = i * dp.size() + dp.rank();
    val.sequential_batch(k < batches ? k : 0, model.batch(), inputs.data(), targets.data());
    const double loss = model.evaluate(inputs.data(), targets.data());
    if (k < batches) sum += loss;
  }
  dp.all_reduce(&sum, 1, DType::F64);
  return batches > 0 ? sum / batches : 0.0;
}

// Error handling. An error on one rank must not leave the others blocked in a
// collective forever: the failing rank prints its message (naming itself) and aborts
// the whole job; with one rank the error just propagates to run_main, which turns it
// into exit status 2 (bad input) or 1 (bug).
template <class F>
int run_ranks(const char* program, Communicator& world, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (world.size() == 1) throw;
    const bool user = dynamic_cast<const UserError*>(&e) != nullptr;
    std::fprintf(stderr, "%s: rank %d: %s: %s\n", program, world.rank(), user ? "error" : "internal error", e.what());
    std::fflush(stderr);
    world.abort(user ? 2 : 1);
    return user ? 2 : 1;
  }
}

// In stages 02-05 every rank is a data-parallel rank: dp must be 0 (all ranks) or the
// job's size, and the batch must split over the ranks.
inline void require_pure_data_parallel(const Config& cfg, const Communicator& world, const char* stage) {
  require(cfg.dp == 0 || cfg.dp == world.size(),
          "dp=" + std::to_string(cfg.dp) + " but the job has " + std::to_string(world.size()) +
              " ranks (stage " + stage + " is pure data parallelism)");
  validate(cfg, world.size());
}

// The entry of a data-parallel stage: parse the config, pick the device, join the job,
// then run `train_ranks` on every rank, an error on one rank aborting them all.
using TrainRanks = int (*)(Config& cfg, Communicator& world, Device device, Precision precision);
inline int data_parallel_main(int argc, char** argv, TrainRanks train_ranks) {
  return run_main("train", [&] {
    Config cfg;
    if (!parse_args(argc, argv, cfg, "train")) return 0;
    if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
    // The data-parallel stages run on CPU ranks; GPU ranks need device-side shards and
    // buckets (not written yet), so auto means cpu here and cuda is refused.
    require(cfg.device != "cuda",
            "device=cuda: the data-parallel stages (02-05) run on CPU ranks only so far; use "
            "device=cpu (stage 01 trains on the GPU)");
    const Device device = resolve_device(cfg.device == "auto" ? "cpu" : cfg.device);
    const Precision precision = parse_precision(cfg.precision);
    std::unique_ptr<Communicator> world = make_world(&argc, &argv, {cfg.comm, device, cfg.comm_timeout_s});
    return run_ranks("train", *world, [&] { return train_ranks(cfg, *world, device, precision); });
  });
}

}  // namespace gpt
