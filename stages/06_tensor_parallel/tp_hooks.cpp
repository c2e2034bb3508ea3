// The conjugate operators f and g of tensor parallelism; see tp_hooks.h.
#include "stages/06_tensor_parallel/tp_hooks.h"

#include "common/trace.h"

namespace gpt {

// A group of one rank (tp = 1: the pipeline and context-parallel stages run without
// tensor parallelism) has nothing to sum: the all-reduces of f and g are skipped, which
// on a GPU saves the MPI backend's copy of every activation to the host and back.

template <class A>
const A* TensorParallelHooks<A>::gather_input(Site, const A* x, A* full, int rows, int C) {
  if (!sp_) return x;  // every rank already holds every row
  Span span("tp_all_gather", "comm");
  tp_.all_gather(x, full, size_t(rows) * C, dtype_of<A>());
  return full;
}

template <class A>
A* TensorParallelHooks<A>::reduce_input_grad(Site, A* d_full, A* local, int rows, int C) {
  if (!sp_ && tp_.size() == 1) return d_full;
  Span span(sp_ ? "tp_reduce_scatter" : "tp_all_reduce", "comm");
  if (!sp_) {
    tp_.all_reduce(d_full, size_t(rows) * C, dtype_of<A>());
    return d_full;
  }
  tp_.reduce_scatter(d_full, local, size_t(rows) * C, dtype_of<A>());
  return local;
}

template <class A>
A* TensorParallelHooks<A>::reduce_output(Site, A* partial, A* local, int rows, int C) {
  if (!sp_ && tp_.size() == 1) return partial;
  Span span(sp_ ? "tp_reduce_scatter" : "tp_all_reduce", "comm");
  if (!sp_) {
    tp_.all_reduce(partial, size_t(rows) * C, dtype_of<A>());
    return partial;
  }
  tp_.reduce_scatter(partial, local, size_t(rows) * C, dtype_of<A>());
  return local;
}

template <class A>
const A* TensorParallelHooks<A>::gather_output_grad(Site, const A* d_local, A* full, int rows, int C) {
  if (!sp_) return d_local;
  Span span("tp_all_gather", "comm");
  tp_.all_gather(d_local, full, size_t(rows) * C, dtype_of<A>());
  return full;
}

template class TensorParallelHooks<float>;
template class TensorParallelHooks<double>;
template class TensorParallelHooks<bf16>;

}  // namespace gpt
