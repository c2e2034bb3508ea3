// The whole model gathered from the ranks' slices; see gather_whole.h.
#include "stages/06_tensor_parallel/gather_whole.h"

#include <algorithm>

#include "common/bf16.h"
#include "common/error.h"

namespace gpt {

template <class A>
std::vector<A> gather_whole_model(Communicator& world, const std::vector<LocalPart<A>>& parts, bool counted,
                                  WholeOn on, int64_t window) {
  invariant(!parts.empty(), "gather_whole_model: no local buffer");
  const int64_t total = parts.front().slices->global().total();
  const bool receives = world.rank() == 0 || on == WholeOn::EveryRank;
  std::vector<A> whole(receives ? size_t(total) : 0);
  // The counted runs of this rank's buffers, in global order, so each window takes the
  // ones that reach into it from where the last window stopped.
  struct BufferRun {
    LayoutRun run;
    const A* local;  // the buffer it is in
  };
  std::vector<BufferRun> runs;
  if (counted)
    for (const LocalPart<A>& part : parts)
      for (const LayoutRun& r : part.slices->runs())
        if (r.counted) runs.push_back({r, part.local->data()});
  std::sort(runs.begin(), runs.end(), [](const BufferRun& a, const BufferRun& b) {
    return a.run.global < b.run.global;
  });
  // A window of the global buffer at a time: the other ranks hold one window, not a
  // whole model, and no all-reduce counts more elements than it.
  window = std::clamp<int64_t>(window, 1, total);
  std::vector<A> buffer(static_cast<size_t>(window));
  size_t first = 0;  // the first run that may still reach into the window
  for (int64_t g0 = 0; g0 < total; g0 += window) {
    const int64_t g1 = std::min(total, g0 + window);
    std::fill(buffer.begin(), buffer.end(), A{});  // +0 (bf16{} is its zero bits)
    while (first < runs.size() && runs[first].run.global + runs[first].run.length <= g0) ++first;
    for (size_t i = first; i < runs.size() && runs[i].run.global < g1; ++i) {
      const LayoutRun& r = runs[i].run;
      const int64_t lo = std::max(g0, r.global), hi = std::min(g1, r.global + r.length);
      std::copy(runs[i].local + (r.local + lo - r.global), runs[i].local + (r.local + hi - r.global),
                buffer.begin() + (lo - g0));
    }
    world.all_reduce(buffer.data(), size_t(g1 - g0), dtype_of<A>());
    if (receives) std::copy(buffer.begin(), buffer.begin() + (g1 - g0), whole.begin() + g0);
  }
  return whole;
}

template std::vector<float> gather_whole_model(Communicator&, const std::vector<LocalPart<float>>&, bool, WholeOn,
                                               int64_t);
template std::vector<bf16> gather_whole_model(Communicator&, const std::vector<LocalPart<bf16>>&, bool, WholeOn,
                                              int64_t);

}  // namespace gpt
