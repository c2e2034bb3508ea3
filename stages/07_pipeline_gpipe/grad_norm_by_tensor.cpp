// The layout-independent gradient norm; see grad_norm_by_tensor.h.
#include "stages/07_pipeline_gpipe/grad_norm_by_tensor.h"

#include <cmath>

#include "common/trace.h"

namespace gpt {

template <class A>
double grad_norm_by_tensor(Communicator& world, const std::vector<LocalZero<A>*>& chunks, size_t n_tensors) {
  Span span("grad_norm");
  std::vector<double> per_tensor(n_tensors, 0.0);
  for (const LocalZero<A>* c : chunks) c->add_squares_by_tensor(per_tensor);
  // Gathered, not all-reduced: an all-reduce groups the ranks' terms as its library
  // chooses, and so may round a tensor held by ranks {0, 1, 2} differently from the same
  // tensor held by ranks {3, 4, 5}. Here every rank adds them in world-rank order.
  const size_t ranks = size_t(world.size());
  std::vector<double> all(ranks * n_tensors);
  world.all_gather(per_tensor.data(), all.data(), n_tensors, DType::F64);
  double sum = 0;
  for (size_t t = 0; t < n_tensors; ++t) {
    double s_t = 0;
    for (size_t r = 0; r < ranks; ++r) s_t += all[r * n_tensors + t];
    sum += s_t;
  }
  return std::sqrt(sum);
}

template double grad_norm_by_tensor(Communicator&, const std::vector<LocalZero<float>*>&, size_t);
template double grad_norm_by_tensor(Communicator&, const std::vector<LocalZero<bf16>*>&, size_t);

}  // namespace gpt
