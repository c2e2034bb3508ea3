// Driver pieces every data-parallel stage (02-05) shares.
#pragma once
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "common/comm.h"
#include "common/data.h"
#include "common/error.h"
#include "common/gpt2.h"

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
    const double loss = model.forward(inputs.data(), targets.data());
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

}  // namespace gpt
