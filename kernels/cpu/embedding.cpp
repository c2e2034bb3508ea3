// Token + position embedding.  out[b,t,:] = wte[token[b,t],:] + wpe[t,:]
// Backward scatters dout into the rows that were read. Every position writes its
// own row of dwpe's sum over the batch; dwte rows may repeat (same token twice), so
// the scatter is serial over positions and parallel over channels, which keeps it
// deterministic.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_ops.h"

namespace gpt::cpu {

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                       int C) {
#pragma omp parallel for schedule(static)
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
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    for (int bt = 0; bt < B * T_; ++bt) {
      const T g = dout[size_t(bt) * C + c];
      dwte[size_t(tokens[bt]) * C + c] += g;
      dwpe[size_t(bt % T_) * C + c] += g;
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int, int);

}  // namespace gpt::cpu
