// The attention ops of kernels/cuda/cuda_ops.h: which rung of the ladder training runs.
//
//   fp32 storage:  v2 flash forward, v3 flash backward (CUDA cores, fp32 throughout).
//   bf16 storage:  forward v5 (WGMMA + TMA) on Hopper, v4 (mma.sync) elsewhere;
//                  backward v4.
// Every flash version saves the row logsumexps (B, NH, T) and nothing else; that is all
// the `stats` buffer the model allocates (ops::attention_stats_size).
//
// The flash kernels are compiled for head sizes 64 and 128 (GPT-2's is 64). Other head
// sizes (the small models of the tests) take v1, the naive version: its forward needs
// the (B, NH, T, T) probabilities, which the model does not keep, so the backward
// recomputes them with a second v1 forward into scratch. Slow and memory-hungry, but
// exact, and only for toy shapes.
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/scratch.h"

namespace gpt::cuda {
namespace {

bool flash_head_size(int C, int NH) {
  const int hs = C / NH;
  return C % NH == 0 && (hs == 64 || hs == 128);
}

// v5 runs where it can: a Hopper GPU, and a build that has its sm_90a code (without it
// the kernel body is a trap). Asked of the current device at every call, as the GEMM
// asks (its cache per device): a process may drive GPUs of different kinds.
bool v5_forward_available() {
#ifdef GPT_HAVE_SM90A
  return current_capability() / 10 == 9;
#else
  return false;
#endif
}

// The naive version's probabilities (other head sizes) and the flash backward's D rows.
ScratchBuffer& scratch() {
  static ScratchBuffer s;  // kernels/cuda/scratch.h
  return s;
}

}  // namespace

template <class A>
void attention_forward(A* out, float* lse, const A* qkv, int B, int T, int C, int NH) {
  auto* o = device_ptr(out);
  const auto* x = device_ptr(qkv);
  if (!flash_head_size(C, NH)) {
    attention_forward_v1(o, scratch().as<float>(size_t(B) * NH * T * T), x, B, T, C, NH, lse);
  } else if constexpr (std::is_same_v<A, float>) {
    attention_forward_v2(o, lse, x, B, T, C, NH);
  } else if (v5_forward_available()) {
    attention_forward_v5(o, lse, x, B, T, C, NH);
  } else {
    attention_forward_v4(o, lse, x, B, T, C, NH);
  }
  GPT_CUDA_CHECK_LAUNCH();
}

template <class A>
void attention_backward(A* dqkv, const A* dout, const A* qkv, const A* out, const float* lse, int B,
                        int T, int C, int NH) {
  auto* dx = device_ptr(dqkv);
  const auto *dy = device_ptr(dout), *x = device_ptr(qkv), *y = device_ptr(out);
  if (!flash_head_size(C, NH)) {
    // v1 needs the probabilities (and dP scratch): recompute the forward, its output
    // going to scratch too (an element of A fits in a float's place).
    const size_t n = size_t(B) * NH * T * T;
    float* att = scratch().as<float>(2 * n + size_t(B) * T * C);
    attention_forward_v1(reinterpret_cast<DeviceType<A>*>(att + 2 * n), att, x, B, T, C, NH);
    attention_backward_v1(dx, att + n, dy, x, att, B, T, C, NH);
    (void)y;
  } else {
    float* dsum = scratch().as<float>(size_t(B) * NH * T);
    if constexpr (std::is_same_v<A, float>)
      attention_backward_v3(dx, dsum, dy, x, y, lse, B, T, C, NH);
    else
      attention_backward_v4(dx, dsum, dy, x, y, lse, B, T, C, NH);
  }
  GPT_CUDA_CHECK_LAUNCH();
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<gpt::bf16>(gpt::bf16*, float*, const gpt::bf16*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, const float*,
                                        int, int, int, int);
template void attention_backward<gpt::bf16>(gpt::bf16*, const gpt::bf16*, const gpt::bf16*,
                                            const gpt::bf16*, const float*, int, int, int, int);

}  // namespace gpt::cuda
