// The layout-independent gradient norm; see grad_norm_by_tensor.h.
#include "stages/07_pipeline_gpipe/grad_norm_by_tensor.h"

#include <cmath>

#include "common/trace.h"

namespace gpt {

double grad_norm_by_tensor(Communicator& world, const std::vector<LocalZero*>& chunks, size_t n_tensors) {
  Span span("grad_norm");
  std::vector<double> per_tensor(n_tensors, 0.0);
  for (const LocalZero* c : chunks) c->add_squares_by_tensor(per_tensor);
  world.all_reduce(per_tensor.data(), per_tensor.size(), DType::F64);
  double sum = 0;
  for (double s : per_tensor) sum += s;
  return std::sqrt(sum);
}

}  // namespace gpt
