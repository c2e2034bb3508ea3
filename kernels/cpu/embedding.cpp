// Token + position embedding.  out[b,t,:] = wte[token[b,t],:] + wpe[t,:]
// Backward scatters dout into the rows that were read. Every position writes its
// own row of dwpe's sum over the batch; dwte rows may repeat (same token twice), so
// the scatter is serial over positions and parallel over channels, which keeps it
// deterministic.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                       int C) {
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(B) * T_ * C))
  for (int bt = 0; bt < B * T_; ++bt) {
    const T* tok = wte + size_t(tokens[bt]) * C;
    const T* pos = wpe + size_t(bt % T_) * C;
    T* o = out + size_t(bt) * C;
    for (int c = 0; c < C; ++c) o[c] = tok[c] + pos[c];
  }
}

template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_,
                        int C) {
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(B) * T_ * C))
  for (int c = 0; c < C; ++c) {
    for (int bt = 0; bt < B * T_; ++bt) {
      const T g = dout[size_t(bt) * C + c];
      dwte[size_t(tokens[bt]) * C + c] += g;
      dwpe[size_t(bt % T_) * C + c] += g;
    }
  }
}

// A rank's share of the embedding: it holds rows [v0, v1) of wte (wte_rows[0] is row
// v0) and the positions of this chunk start at pos0:
//   out[b,t,:] = (v0 <= tok < v1 ? wte[tok,:] : 0) + (wpe ? wpe[pos0 + t,:] : 0)
// so the sum over ranks that split the vocabulary is the whole embedding (tensor
// parallelism adds the positions on one rank only, by passing wpe on that rank).
template <class T>
void embedding_range_forward(T* out, const int32_t* tokens, const T* wte_rows, int v0, int v1,
                             const T* wpe, int pos0, int B, int T_, int C) {
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(B) * T_ * C))
  for (int bt = 0; bt < B * T_; ++bt) {
    const int tok = tokens[bt];
    const T* row = tok >= v0 && tok < v1 ? wte_rows + size_t(tok - v0) * C : nullptr;
    const T* pos = wpe ? wpe + size_t(pos0 + bt % T_) * C : nullptr;
    T* o = out + size_t(bt) * C;
    for (int c = 0; c < C; ++c) o[c] = (row ? row[c] : T(0)) + (pos ? pos[c] : T(0));
  }
}

// Its backward: the rows of the range receive their tokens' gradients, the positions
// pos0 .. pos0+T-1 the batch's sums (dwpe may be null: no positions on this rank).
template <class T>
void embedding_range_backward(T* dwte_rows, T* dwpe, const T* dout, const int32_t* tokens, int v0,
                              int v1, int pos0, int B, int T_, int C) {
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(B) * T_ * C))
  for (int c = 0; c < C; ++c) {
    for (int bt = 0; bt < B * T_; ++bt) {
      const T g = dout[size_t(bt) * C + c];
      const int tok = tokens[bt];
      if (tok >= v0 && tok < v1) dwte_rows[size_t(tok - v0) * C + c] += g;
      if (dwpe) dwpe[size_t(pos0 + bt % T_) * C + c] += g;
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int, int);

template void embedding_range_forward<float>(float*, const int32_t*, const float*, int, int, const float*, int, int, int, int);
template void embedding_range_forward<double>(double*, const int32_t*, const double*, int, int, const double*, int, int, int, int);
template void embedding_range_backward<float>(float*, float*, const float*, const int32_t*, int, int, int, int, int, int);
template void embedding_range_backward<double>(double*, double*, const double*, const int32_t*, int, int, int, int, int, int);
}  // namespace gpt::cpu
