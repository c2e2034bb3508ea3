// ZeRO stage 3: shard the weights as well.
//
// After ZeRO-2 every rank still keeps all the weights (4P bytes in fp32, 2P in bf16)
// although a layer needs only its own weights, and only while it runs. ZeRO-3 keeps just this rank's shard of the weights and gathers a unit (a block,
// the embeddings, the final layernorm) from all ranks right before it is used, freeing
// it right after:
//
//   forward:   gather block l  -> compute block l -> free block l
//   backward:  gather block l  -> backward of block l -> free block l
//              -> reduce-scatter its gradient bucket (ZeRO-2)
//   step:      AdamW on the shard; nothing to all-gather afterwards
//
// The price is communication: the blocks are all-gathered twice per micro-step (forward
// and backward), the embeddings and the final layernorm once (kept below), 1.34x the
// traffic of DDP for GPT-2 124M (1.5x if every unit were gathered twice). To hide it,
// the gather of the next unit (l+1 in forward, l-1 in backward) is started on a second
// thread, on a duplicate of the dp communicator, while the current unit computes: a
// prefetch.
// The embeddings are needed at both ends of each pass (the LM head reuses wte), so
// they stay gathered for the whole forward and the whole backward, and from a forward
// into the pass after it (its backward, or the next forward after an evaluation) until
// the weights change (weights_updated(), after the optimizer step); the final layernorm
// stays gathered from a forward into its backward. A unit kept that way is never also
// prefetched, and the update drops any gather still in flight: what a pass gets is
// always gathered from the current shards.
// A prefetch's buffer is allocated when the prefetch starts, on the calling thread, so
// the gathered weights peak at the embeddings and two blocks by construction, whenever
// the prefetch thread happens to run. The embeddings' buffer, released at the end of a
// backward, is kept as a spare and refilled by their next gather (the next step's, which
// weights_updated starts, or the next micro-batch's) instead of being freed and allocated
// again: the embeddings would have been gathered again before anything else of this
// store, so holding their buffer in between raises no peak. A gather of another size
// frees the spare first.
#pragma once
#include <future>
#include <memory>
#include <vector>

#include "common/comm_counter.h"
#include "stages/04_zero2/zero2.h"

namespace gpt {

// One step's traffic on rank `rank` of n, as a CountingCommunicator counts it, for a step
// that starts with nothing gathered (any first step of a run): in each of `micro_steps`
// micro-steps every unit all-gathered in forward, the blocks again in backward (the
// embeddings and the final layernorm are kept from the forward), and each gradient bucket
// reduce-scattered (ring_allreduce.h's closed forms; the gathers in the weights' storage
// type, the gradients in fp32). About (N-1)/N (2 P + P_blocks) elements each way.
CommTally zero3_step_traffic(const ParamLayout& layout, const std::vector<GradBucket>& buckets, int n, int rank,
                             DType weights, int micro_steps);

// The gathers alone of the passes a store runs, in their order, from nothing gathered, by
// the keep rules below: a pass gathers every block, and the embeddings and the final
// layernorm unless a forward ran just before it (a forward keeps both for the next pass; a
// forward still gathers the final layernorm again, dropped at its start). Stage 05
// alternates forward and backward; a pipeline runs several forwards in a row (GPipe), and
// the zero-bubble schedule two backward passes per micro-batch (its input and weight halves).
CommTally zero3_gather_traffic(const ParamLayout& layout, const std::vector<Pass>& passes, int n, int rank,
                               DType weights);

// A is the weights' storage: float, or bf16 (which halves every gather).
template <class A>
class Zero3Store : public Zero2Store<A> {
 public:
  // shard_params: this rank's shard of the compute weights (shard().size() elements),
  // updated in place by the optimizer, in the memory of `device`, where the gathered
  // units go too. prefetch: gather the next unit on the prefetch thread while this one
  // computes (the key zero3_prefetch; false gathers each unit on the calling thread when a
  // pass acquires it). embeddings_alone: as Zero2Store's (a pipeline stage's tied wte).
  Zero3Store(const ParamLayout& layout, Communicator& dp, A* shard_params, double bucket_mb,
             bool prefetch, bool embeddings_alone, Device device);
  ~Zero3Store() override;

  const A* acquire(int unit, Pass pass) override;
  void release(int unit, Pass pass) override;

  // Gathers the whole model into `out` (total elements, host memory): for sampling and
  // tests; a one-off, so it travels through the host whatever the device.
  void gather_all(A* out);
  // The shard's weights changed (the optimizer stepped): units kept gathered between
  // passes are stale and are freed; the embeddings' gather for the next pass starts at
  // once, on the prefetch thread.
  void weights_updated();

 private:
  using Zero2Store<A>::layout_;
  using Zero2Store<A>::dp_;
  using Zero2Store<A>::shard;

  DeviceArray<A> unit_buffer(int unit);  // room for a gathered unit (the spare, if it fits), counted as params
  void gather_into(Communicator& comm, int unit, A* buf) const;
  void start_prefetch(int unit);  // on the prefetch thread, into a buffer made here
  void drop_prefetch();           // waits for the prefetch in flight and discards it
  int next_unit(int unit, Pass pass) const;  // the unit to prefetch, or -1

  std::unique_ptr<Communicator> prefetch_comm_;  // the prefetch thread's own channel
  A* shard_params_;
  bool prefetch_;
  std::vector<DeviceArray<A>> gathered_;      // per unit, while acquired
  DeviceArray<A> spare_;                      // the embeddings' buffer from the last backward, to refill
  std::vector<int> users_;                    // acquisitions not yet released
  std::vector<char> kept_;                    // gathered, not acquired, still current
  int prefetch_unit_ = -1;                    // the unit prefetched_ gathers, or -1
  std::future<DeviceArray<A>> prefetched_;
};

}  // namespace gpt
