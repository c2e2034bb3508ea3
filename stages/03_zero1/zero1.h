// ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", SC 2020): shard the optimizer state.
//
// With data parallelism every rank runs the same AdamW on the same gradient: dp copies
// of the optimizer state: both fp32 moments, and in bf16 mode the fp32 master weights
// (8 of the 16 bytes per parameter in fp32, 12 of the 18 in bf16).
// ZeRO-1 gives each rank one shard of that state and has it update only its shard:
//
//   grads:   reduce-scatter   rank r receives sum over ranks of shard r   (N-1)/N of P
//   norm:    all-reduce of the shards' sums of squares (one number)
//   AdamW:   on shard r only (master weights, m, v of shard r)
//   params:  all-gather       every rank receives every updated shard    (N-1)/N of P
//
// Reduce-scatter + all-gather move exactly what one ring all-reduce moves (that
// all-reduce *is* a reduce-scatter followed by an all-gather), so the communication
// is unchanged while the optimizer memory per rank drops from 12 P (or 8 P in fp32
// mode) bytes to 12 P / N (8 P / N).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "common/checkpoint.h"
#include "common/comm.h"
#include "common/comm_counter.h"
#include "common/config.h"
#include "common/device.h"
#include "common/optimizer.h"
#include "stages/02_ddp/grad_sync.h"
#include "stages/03_zero1/shard.h"

namespace gpt {

// The gradient norm over all ranks when each holds the summed gradient of its shard.
double sharded_grad_norm(Communicator& dp, Device d, const float* shard_grads, int64_t n);

// The optimizer step of ZeRO-1 and ZeRO-2: AdamW on this rank's shard (shard_grads points
// at the shard's gradient), the result written into params[shard] (in bf16 mode the fp32
// master shard is updated and params[shard] receives its rounding), then all-gathered so
// every rank has the whole updated model in `params`. A is the weights' storage: float,
// or bf16, which halves the all-gather. `norm` is the global gradient norm used for
// clipping.
template <class A>
void sharded_adamw_step(Communicator& dp, Device d, AdamW<float>& opt, const Shard& shard, A* params,
                        const float* shard_grads, int64_t total, double norm, double lr, const Config& cfg,
                        int step_number);

// One step's traffic on rank `rank` of n, as a CountingCommunicator counts it: each
// gradient bucket reduce-scattered into the shards (fp32) `reductions` times (once in
// ZeRO-1; in ZeRO-2 once per micro-step, with no full gradient left to accumulate into),
// then the P updated weights all-gathered in their storage type (ring_allreduce.h's
// closed forms; the 8-byte norm sum is not counted). In fp32, once, that is stage 02's
// ring all-reduce to the element when the buckets are one; in bf16 the gather moves
// 2-byte weights.
CommTally sharded_step_traffic(const std::vector<GradBucket>& buckets, int64_t total, int n, int rank, DType weights,
                               int reductions);

// The reduce-scatters alone: each bucket's range of the flat buffer of `total` elements,
// cut along the n shards, `times(bucket)` times, in fp32, on rank `rank` (what ZeRO-2 and
// -3 reduce once per micro-step, and a pipeline stage's tied wte once a step).
CommTally bucket_reduce_scatter_traffic(const std::vector<GradBucket>& buckets, int64_t total, int n, int rank,
                                        const std::function<int(const GradBucket&)>& times);

// A shard's checkpoint, in host memory (common/checkpoint.h): its master weights and its
// moments; `begin` is the shard's place in the layout. The master weights are the
// optimizer's fp32 copy when the weights are stored as bf16, else `weights` from element
// `offset` (the fp32 compute weights are the master).
template <class A>
CheckpointMirror shard_checkpoint(AdamW<float>& opt, DeviceArray<A>& weights, size_t offset, int64_t begin);

}  // namespace gpt
