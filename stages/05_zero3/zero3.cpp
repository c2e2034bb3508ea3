// ZeRO stage 3: the weights sharded too, each unit gathered when it runs; see zero3.h.
#include "stages/05_zero3/zero3.h"

#include <algorithm>
#include <string>

#include "common/device.h"
#include "common/device_array.h"
#include "common/error.h"
#include "common/trace.h"
#include "stages/02_ddp/ring_allreduce.h"
#include "stages/03_zero1/zero1.h"

namespace gpt {

CommTally zero3_gather_traffic(const ParamLayout& layout, const std::vector<Pass>& passes, int n, int rank,
                               DType weights) {
  CommTally traffic;
  const auto gather = [&](int unit) {
    const Unit& u = layout.unit(unit);
    traffic += ring_all_gather_traffic(shard_bounds_within(u.begin, u.end, layout.total(), n), rank, weights);
  };
  bool after_forward = false;  // the embeddings and the final layernorm kept from a forward
  for (const Pass pass : passes) {
    if (!after_forward) gather(ParamLayout::kEmbeddingUnit);
    for (int l = layout.layer_begin(); l < layout.layer_end(); ++l) gather(layout.block_unit(l));
    if (pass == Pass::Forward || !after_forward) gather(layout.final_unit());
    after_forward = pass == Pass::Forward;
  }
  return traffic;
}

CommTally zero3_step_traffic(const ParamLayout& layout, const std::vector<GradBucket>& buckets, int n, int rank,
                             DType weights, int micro_steps) {
  std::vector<Pass> passes;  // forward, backward, forward, backward, ...
  for (int i = 0; i < micro_steps; ++i) passes.insert(passes.end(), {Pass::Forward, Pass::Backward});
  CommTally traffic = zero3_gather_traffic(layout, passes, n, rank, weights);
  traffic += bucket_reduce_scatter_traffic(buckets, layout.total(), n, rank,
                                           [&](const GradBucket&) { return micro_steps; });
  return traffic;
}

template <class A>
Zero3Store<A>::Zero3Store(const ParamLayout& layout, Communicator& dp, A* shard_params, double bucket_mb,
                          bool prefetch, bool embeddings_alone, Device device)
    : Zero2Store<A>(layout, dp, nullptr, bucket_mb, embeddings_alone, device),
      prefetch_comm_(dp.split(0, dp.rank())), shard_params_(shard_params), prefetch_(prefetch),
      gathered_(layout.num_units()), users_(layout.num_units(), 0), kept_(layout.num_units(), 0) {}

template <class A>
Zero3Store<A>::~Zero3Store() {
  if (prefetched_.valid()) prefetched_.wait();  // never leave a gather running
}

template <class A>
DeviceArray<A> Zero3Store<A>::unit_buffer(int unit) {
  const size_t n = size_t(layout_.unit(unit).size());
  // The embeddings' buffer from the last backward, when this is their gather: no new
  // allocation, which on the CPU would zero-fill 158 MB at GPT-2 124M and fault it in
  // again (the C library hands buffers that large back to the kernel when freed). The
  // gather overwrites every element, so what the spare held does not matter. On the GPU
  // the refill is ordered after the kernels that last read the buffer, as a fresh
  // stream-ordered allocation would be: every copy and collective of a gather starts
  // after the work queued on the default stream (device_array.h, comm_nccl.cpp).
  if (spare_.size() == n) return std::move(spare_);  // spare_ is left empty
  spare_ = DeviceArray<A>();  // another size: free it before allocating, never hold both
  const MemScope scope(MemKind::Params);  // gathered weights
  return DeviceArray<A>(this->device(), n);
}

template <class A>
void Zero3Store<A>::gather_into(Communicator& comm, int unit, A* buf) const {
  Span span("gather_unit", "comm", &comm == &dp_ ? 0 : 1);
  const Unit& u = layout_.unit(unit);
  // Our part of the unit goes to its place; the ring brings everyone else's.
  const Shard& s = shard();
  const int64_t lo = std::max(u.begin, s.begin), hi = std::min(u.end, s.end);
  if (lo < hi)
    device_copy(this->device(), buf + (lo - u.begin), this->device(), shard_params_ + (lo - s.begin),
                size_t(hi - lo) * sizeof(A));
  ring_all_gather_v(comm, buf, shard_bounds_within(u.begin, u.end, layout_.total(), comm.size()), dtype_of<A>());
}

template <class A>
void Zero3Store<A>::start_prefetch(int unit) {
  invariant(prefetch_unit_ < 0 && users_[unit] == 0 && !kept_[unit],
            "Zero3Store: prefetch of unit " + std::to_string(unit) + " while one is in flight or it is gathered");
  // The buffer is made here, on the main thread, not by the prefetch thread: the unit
  // counts as gathered from the moment its prefetch starts, so the memory peak does not
  // depend on when the thread gets to run.
  DeviceArray<A> buf = unit_buffer(unit);
  prefetch_unit_ = unit;
  prefetched_ = std::async(std::launch::async, [this, unit, gpu = current_gpu(), buf = std::move(buf)]() mutable {
    use_gpu(gpu);  // the GPU is per host thread: this rank's, not GPU 0
    const TraceLane lane(1);  // the gather's spans on the communication row
    gather_into(*prefetch_comm_, unit, buf.data());
    return std::move(buf);
  });
}

template <class A>
void Zero3Store<A>::drop_prefetch() {
  if (prefetched_.valid()) prefetched_.get();  // wait for it, then free its buffer
  prefetch_unit_ = -1;
}

// The order of acquisitions (gpt2.h): forward embeddings, blocks 1..L, final;
// backward embeddings, final, blocks L..1.
template <class A>
int Zero3Store<A>::next_unit(int unit, Pass pass) const {
  const int embed = ParamLayout::kEmbeddingUnit, final = layout_.final_unit();
  if (pass == Pass::Forward) return unit == final ? -1 : unit + 1;
  if (unit == embed) return -1;  // backward takes the final layernorm next: tiny, no prefetch
  if (unit == final) return final - 1 > embed ? final - 1 : -1;
  return unit - 1 > embed ? unit - 1 : -1;
}

template <class A>
const A* Zero3Store<A>::acquire(int unit, Pass pass) {
  if (users_[unit]++ == 0) {
    const int final = layout_.final_unit();
    if (pass == Pass::Forward && unit == ParamLayout::kEmbeddingUnit && kept_[final]) {
      // A forward needs the final layernorm only at its end, and the last block's
      // prefetch brings it then. Kept from an earlier forward (an evaluation pass has no
      // backward to take it), it would sit beside the embeddings and two blocks through
      // the whole pass, one unit above the peak this store promises.
      kept_[final] = 0;
      gathered_[final] = DeviceArray<A>();
    }
    if (kept_[unit]) {  // still gathered from the last pass, and the weights are the same
      kept_[unit] = 0;
    } else if (prefetch_unit_ == unit) {  // started while the previous unit computed (and counted then)
      Span span("wait_prefetch", "comm");
      gathered_[unit] = prefetched_.get();
      prefetch_unit_ = -1;
    } else {
      if (prefetched_.valid()) prefetched_.wait();  // keep one gather in flight at a time
      gathered_[unit] = unit_buffer(unit);
      gather_into(dp_, unit, gathered_[unit].data());
    }
    // Prefetch only a unit that is not gathered already, acquired or kept. A prefetch of a
    // kept unit would never be collected (acquire takes the kept copy first) and would
    // linger as the in-flight gather until a later pass collected it, after the
    // optimizer had changed the weights: stale weights in training.
    const int next = next_unit(unit, pass);
    if (prefetch_ && next >= 0 && users_[next] == 0 && !kept_[next] && prefetch_unit_ < 0) start_prefetch(next);
  }
  return gathered_[unit].data();
}

template <class A>
void Zero3Store<A>::release(int unit, Pass pass) {
  if (--users_[unit] > 0) return;
  // The embeddings and the final layernorm start the backward that follows a forward
  // (and the next forward): keep them until then instead of gathering them again.
  const bool starts_a_pass = unit == ParamLayout::kEmbeddingUnit || unit == layout_.final_unit();
  if (pass == Pass::Forward && starts_a_pass) {
    kept_[unit] = 1;
    return;
  }
  // The embeddings end a backward, and their gather is this store's next (the forward
  // that follows starts with them): keep the buffer for it.
  if (pass == Pass::Backward && unit == ParamLayout::kEmbeddingUnit) {
    spare_ = std::move(gathered_[unit]);
    return;
  }
  gathered_[unit] = DeviceArray<A>();  // free the gathered weights
}

template <class A>
void Zero3Store<A>::weights_updated() {
  for (size_t u = 0; u < kept_.size(); ++u) {
    invariant(users_[u] == 0, "Zero3Store: the weights changed while unit " + std::to_string(u) + " is acquired");
    if (kept_[u]) {
      kept_[u] = 0;
      gathered_[u] = DeviceArray<A>();
    }
  }
  // Whatever a prefetch gathered before the update is stale as well. In the model's
  // order none is left after a backward; drop one all the same rather than hand it out.
  drop_prefetch();
  // The next pass starts with the embeddings: start gathering them now, while the step
  // ends (metrics, data for the next step) instead of when the forward asks.
  if (prefetch_) start_prefetch(ParamLayout::kEmbeddingUnit);
}

template <class A>
void Zero3Store<A>::gather_all(A* out) {
  const Shard& s = shard();
  device_copy(Device::CPU, out + s.begin, this->device(), shard_params_, size_t(s.size()) * sizeof(A));
  ring_all_gather(dp_, out, size_t(layout_.total()), dtype_of<A>());
}

template class Zero3Store<float>;
template class Zero3Store<bf16>;

}  // namespace gpt
