// What a tensor-parallel rank should hold and send, from the model's shape alone: the
// formulas of this stage's README, printed beside what the memory tracker and the
// counting communicator measured.
//
// Local sizes of tp rank r (C = n_embd, W = C/tp, F = 4C/tp, Vr = its vocabulary rows,
// Tb = block_size, L = n_layer):
//   embeddings  E = Vr C + Tb C;   block  Bk = 12 C^2/tp + 7 C/tp + 6 C;   final  2C
//   P_local = E + L Bk + 2C;  S = its dp shard of P_local (the ring's chunk rule)
// Memory (bytes) by zero stage, exactly as stages 02-05 with P replaced by P_local;
// a = the bytes of a stored weight or activation, 4 in fp32 and 2 in bf16 mode:
//   zero  params             grads                     optimizer
//   0     a P_local          4 P_local                 (8|12) P_local
//   1     a P_local          4 P_local                 (8|12) S
//   2     a P_local          4 (S + live buckets)      (8|12) S
//   3     a (S + gathered)   4 (S + live buckets)      (8|12) S
// Activations (N = B T rows, R = N/tp with sequence parallelism else N; Hr = n_head/tp):
// per layer  a (4 R C + 4 N W + 2 N F) + 4 (4 R + B Hr T)  (Korthikanti et al.'s count
// for this model: no dropout, flash attention keeps no T x T scores; the layernorm
// outputs and residuals are the R C terms sequence parallelism divides; the row
// statistics stay fp32), plus the embedding, the head and the scratch shared by the
// layers (README, "Memory"). The tp collectives move a bytes an activation.
// Communication per step, over its micro-batches (bytes through the tp communicator, payload sizes as
// comm_counter.h defines them): see tp_budget.cpp and the README.
#pragma once
#include <cstdint>
#include <string>

#include "common/comm_counter.h"
#include "common/config.h"
#include "common/memory.h"

namespace gpt {

struct TpBudget {
  MemoryLedger memory;  // expected bytes per kind (params, grads, optimizer, activations)
  CommTally comm;       // expected tp calls and bytes per step
  std::string memory_table(const MemoryLedger& measured) const;
  std::string comm_table(const CommTally& measured) const;
};

TpBudget tp_budget(const Config& cfg, int tp, int dp, int tp_rank, int dp_rank);

}  // namespace gpt
