/// @file
/// Every op of GPT-2 training, forward and backward: one signature per op.
///
/// Shapes use llm.c's names: B batch, T sequence, C channels, NH heads, OC output
/// channels, N = B*T rows, V real vocabulary, Vp padded vocabulary. Tensors are
/// row-major and contiguous. Linear weights are stored (OC, C), as PyTorch does:
/// out = inp . w^T + bias.
///
/// Conventions that every implementation follows:
/// ```
///  - forward ops overwrite their outputs;
///  - backward ops ACCUMULATE (+=) into parameter gradients and into input gradients,
///    so a tensor used twice (the residual stream, tied embeddings) just receives two
///    contributions; callers zero the parameter gradients once per optimizer step, and
///    an input gradient that is a scratch buffer (the attention's dqkv) before each op
///    that adds into it. Two input gradients are written instead (=): matmul_backward's
///    dinp and gelu_backward's, each the scratch of one pass, read only by the next op;
///  - templated on the storage type A of weights and activations: float (training),
///    double (the ground truth, CPU only) and bf16 (the bf16 mode; on the CPU each op
///    widens to fp32, computes and rounds back: kernels/cpu/bf16_ops.h). G = GradOf<A>
///    is the type of parameter gradients and statistics: float for bf16, A otherwise.
/// ```
///
/// Each op records a trace span (when tracing is on) and dispatches on the device:
/// kernels/cpu/ (the reference) or kernels/cuda/ (cuda_ops.h); the pointers must be
/// in that device's memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "common/bf16.h"
#include "common/device.h"
#include "common/trace.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/flash_attention.h"
#ifdef GPT_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace gpt::ops {

/// Runs the CPU reference or the CUDA kernel of `op`. double storage exists only on the
/// CPU (the ground truth); asking for it on the GPU is an error naming the op. bf16
/// storage runs on both: the CPU calls the overloads of kernels/cpu/bf16_ops.h.
#ifdef GPT_HAVE_CUDA
#define GPT_DISPATCH(op, A, cpu_call, cuda_call)                                              \
  do {                                                                                        \
    Span span_(op, "op");                                                                     \
    if (d == Device::CPU) {                                                                   \
      cpu_call;                                                                               \
    } else {                                                                                  \
      if constexpr (std::is_same_v<A, double>) unsupported(op, d, "double is CPU only");          \
      else cuda_call;                                                                         \
    }                                                                                         \
  } while (0)
#else
#define GPT_DISPATCH(op, A, cpu_call, cuda_call)                                              \
  do {                                                                                        \
    Span span_(op, "op");                                                                     \
    if (d != Device::CPU) unsupported(op, d, "this build has no CUDA");                        \
    cpu_call;                                                                                 \
  } while (0)
#endif

/// Throws a UserError naming the op, the device and why it cannot run there (a storage
/// type, or a device this build lacks).
[[noreturn]] inline void unsupported(const char* op, Device d, const char* why) {
  fail(std::string("op '") + op + "' on device " + device_name(d) + ": " + why);
}

/// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. Every token must be a row of wte, in
/// [0, padded vocabulary): neither device checks (the tokens may be device data; the
/// model checks them on the host before they are uploaded, common/gpt2.cpp). Outside it,
/// the CPU reads (and the backward writes) out of wte's bounds; the GPU, which runs the
/// range kernel over [0, INT_MAX), gives a negative token a zero row and no gradient, and
/// reads and writes out of bounds for one at or past the padded vocabulary.
template <class A>
void embedding_forward(Device d, A* out, const int32_t* tokens, const A* wte, const A* wpe, int B,
                       int T_, int C) {
  GPT_DISPATCH("embedding_forward", A, cpu::embedding_forward(out, tokens, wte, wpe, B, T_, C),
               cuda::embedding_forward(out, tokens, wte, wpe, B, T_, C));
}
/// dwte[tokens[b,t],:] += dout[b,t,:];  dwpe[t,:] += sum_b dout[b,t,:]
template <class A>
void embedding_backward(Device d, GradOf<A>* dwte, GradOf<A>* dwpe, const A* dout,
                        const int32_t* tokens, int B, int T_, int C) {
  GPT_DISPATCH("embedding_backward", A, cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T_, C),
               cuda::embedding_backward(dwte, dwpe, dout, tokens, B, T_, C));
}

/// A vocabulary range [v0, v1) of wte (wte_rows holds those rows) and positions from
/// pos0: out[b,t,:] = (v0 <= tok < v1 ? wte[tok,:] : 0) + (wpe ? wpe[pos0+t,:] : 0).
template <class A>
void embedding_range_forward(Device d, A* out, const int32_t* tokens, const A* wte_rows, int v0, int v1,
                             const A* wpe, int pos0, int B, int T_, int C) {
  GPT_DISPATCH("embedding_range_forward", A,
               cpu::embedding_range_forward(out, tokens, wte_rows, v0, v1, wpe, pos0, B, T_, C),
               cuda::embedding_range_forward(out, tokens, wte_rows, v0, v1, wpe, pos0, B, T_, C));
}
/// Its backward: dwte_rows (rows [v0, v1) of dwte) += the gradients of the tokens in the
/// range; dwpe[pos0+t,:] += sum_b dout[b,t,:] when dwpe is non-null.
template <class A>
void embedding_range_backward(Device d, GradOf<A>* dwte_rows, GradOf<A>* dwpe, const A* dout,
                              const int32_t* tokens, int v0, int v1, int pos0, int B, int T_, int C) {
  GPT_DISPATCH("embedding_range_backward", A,
               cpu::embedding_range_backward(dwte_rows, dwpe, dout, tokens, v0, v1, pos0, B, T_, C),
               cuda::embedding_range_backward(dwte_rows, dwpe, dout, tokens, v0, v1, pos0, B, T_, C));
}

/// out = (x - mean) * rstd * w + b, per row of C; saves mean and rstd for backward.
template <class A>
void layernorm_forward(Device d, A* out, GradOf<A>* mean, GradOf<A>* rstd, const A* inp, const A* w,
                       const A* b, int N, int C) {
  GPT_DISPATCH("layernorm_forward", A, cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C),
               cuda::layernorm_forward(out, mean, rstd, inp, w, b, N, C));
}
/// Its backward from the saved mean and rstd: dinp += the input gradient, dw += dout * xhat,
/// db += dout. Either half may be null and is skipped: dinp, or dw and db together.
template <class A>
void layernorm_backward(Device d, A* dinp, GradOf<A>* dw, GradOf<A>* db, const A* dout, const A* inp,
                        const A* w, const GradOf<A>* mean, const GradOf<A>* rstd, int N, int C) {
  GPT_DISPATCH("layernorm_backward", A,
               cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C),
               cuda::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C));
}

/// out[N,OC] = inp[N,C] . w[OC,C]^T + bias[OC]  (bias may be null).
/// With gelu_out non-null also gelu_out = gelu(out): the GPU fuses it into the GEMM's
/// epilogue, the CPU runs gelu_forward after the product.
template <class A>
void matmul_forward(Device d, A* out, const A* inp, const A* w, const A* bias, int N, int C, int OC,
                    A* gelu_out = nullptr) {
  GPT_DISPATCH("matmul_forward", A,
               cpu::matmul_forward(out, inp, w, bias, N, C, OC, gelu_out),
               cuda::matmul_forward(out, inp, w, bias, N, C, OC, gelu_out));
}
/// dinp = dout . w;  dw += dout^T . inp;  dbias += column sums of dout. Any of dinp, dw
/// and dbias may be null and is skipped (a zero-bubble schedule computes dinp and the
/// weight gradients apart). The input's gradient is written: it is the scratch of one
/// pass, and a += would need it zeroed first (a pass over memory) and read again by the
/// product. The parameters' gradients are accumulated, over the micro-batches of a step.
template <class A>
void matmul_backward(Device d, A* dinp, GradOf<A>* dw, GradOf<A>* dbias, const A* dout, const A* inp,
                     const A* w, int N, int C, int OC) {
  GPT_DISPATCH("matmul_backward", A, cpu::matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC),
               cuda::matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC));
}

/// Causal multi-head attention. qkv is (B,T,3C): q, then k, then v, head h in
/// columns [h*hs, (h+1)*hs) of each. out is (B,T,C). `stats` keeps what the backward
/// needs besides qkv and out: the row logsumexps (B,NH,T) of flash attention, on both
/// devices (the CPU runs kernels/cpu/flash_attention.cpp, the GPU the kernels of
/// kernels/cuda/attention/); attention_stats_size says how many.
/// (The Device is not used: both devices keep the same statistics. It stays in the
/// signature so that a kernel needing other statistics on one device changes no caller.)
inline size_t attention_stats_size(Device, int B, int T_, int NH) { return size_t(B) * NH * T_; }
/// The CPU's flash tiles: 64 x 64 scores (a 64-row query tile's state and one key and
/// value tile stay in a core's L1/L2 at head sizes up to 128).
constexpr int kCpuFlashTile = 64;
/// out (B,T,C) from qkv (B,T,3C); stats receives attention_stats_size elements.
template <class A>
void attention_forward(Device d, A* out, GradOf<A>* stats, const A* qkv, int B, int T_, int C, int NH) {
  GPT_DISPATCH("attention_forward", A,
               (void)cpu::flash_attention_forward(out, stats, qkv, B, T_, C, NH, kCpuFlashTile, kCpuFlashTile),
               cuda::attention_forward(out, stats, qkv, B, T_, C, NH));
}
/// Its backward from qkv, the forward's out and stats: accumulates into dqkv (B,T,3C).
template <class A>
void attention_backward(Device d, A* dqkv, const A* dout, const A* qkv, const A* out,
                        const GradOf<A>* stats, int B, int T_, int C, int NH) {
  GPT_DISPATCH("attention_backward", A,
               (void)cpu::flash_attention_backward(dqkv, dout, qkv, out, stats, B, T_, C, NH,
                                                   kCpuFlashTile, kCpuFlashTile),
               cuda::attention_backward(dqkv, dout, qkv, out, stats, B, T_, C, NH));
}

#ifdef GPT_HAVE_CUDA
/// The call on the GPU for fp32 views (other types: an error naming the op).
template <class A, class Call>
void block_on_gpu(const char* op, Device d, const AttentionView<A>& a, Call&& call) {
  if constexpr (std::is_same_v<A, float>)
    call(a);
  else
    unsupported(op, d, "key blocks are fp32 only");
}
/// attention_merge on the GPU for fp32 (other types: an error naming the op).
template <class A>
void merge_on_gpu(Device d, A* out, A* lse, size_t out_stride, const A* out_b, const A* lse_b, size_t b_stride,
                  size_t rows, int hs) {
  if constexpr (std::is_same_v<A, float>)
    cuda::attention_merge(out, lse, out_stride, out_b, lse_b, b_stride, rows, hs);
  else
    unsupported("attention_merge", d, "key blocks are fp32 only");
}
#endif
/// One block of a larger attention (context parallelism): queries at positions
/// q_pos0 + t against keys and values at k_pos0 + u, causal by position, given as strided
/// views (kernels/attention_view.h: AttentionView). Forward overwrites out and lse;
/// backward takes the merged out and lse and accumulates into dq, dk, dv; merge folds a
/// second block's (out, lse) into the first. On the GPU in fp32 (the multi-rank stages'
/// buffers; kernels/cuda/attention/block_attention.cu).
template <class A>
void attention_block_forward(Device d, const AttentionView<A>& view, A* out, A* lse) {
  GPT_DISPATCH("attention_block_forward", A,
               (void)cpu::flash_attention_forward(view, out, lse, kCpuFlashTile, kCpuFlashTile),
               block_on_gpu("attention_block_forward", d, view, [&](const cuda::BlockView& v) {
                 cuda::attention_block_forward(v, out, lse);
               }));
}
/// The backward of a block (see attention_block_forward): from the merged out and lse,
/// accumulates into dq, dk and dv.
template <class A>
void attention_block_backward(Device d, const AttentionView<A>& view, A* dq, A* dk, A* dv,
                              const A* dout, const A* out, const A* lse) {
  GPT_DISPATCH("attention_block_backward", A,
               (void)cpu::flash_attention_backward(view, dq, dk, dv, dout, out, lse, kCpuFlashTile,
                                                   kCpuFlashTile),
               block_on_gpu("attention_block_backward", d, view, [&](const cuda::BlockView& v) {
                 cuda::attention_block_backward(v, dq, dk, dv, dout, out, lse);
               }));
}
/// Folds a second block's (out_b, lse_b) into (out, lse) in place, for `rows` rows of hs
/// values (row i of out at i*out_stride, of out_b at i*b_stride; one lse per row).
template <class A>
void attention_merge(Device d, A* out, A* lse, size_t out_stride, const A* out_b, const A* lse_b,
                     size_t b_stride, size_t rows, int hs) {
  GPT_DISPATCH("attention_merge", A,
               cpu::flash_attention_merge(out, lse, out_stride, out_b, lse_b, b_stride, rows, hs),
               merge_on_gpu(d, out, lse, out_stride, out_b, lse_b, b_stride, rows, hs));
}

/// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class A>
void gelu_forward(Device d, A* out, const A* inp, size_t n) {
  GPT_DISPATCH("gelu_forward", A, cpu::gelu_forward(out, inp, n), cuda::gelu_forward(out, inp, n));
}
/// dinp = gelu'(inp) * dout (written, as matmul_backward's dinp)
template <class A>
void gelu_backward(Device d, A* dinp, const A* inp, const A* dout, size_t n) {
  GPT_DISPATCH("gelu_backward", A, cpu::gelu_backward(dinp, inp, dout, n),
               cuda::gelu_backward(dinp, inp, dout, n));
}

/// out = a + b. Its backward is "add dout to both inputs' gradients": residual_backward.
/// The model does not call that: a block adds the residual's gradient into the slot's
/// d_resid as it goes (model_block.cpp); the op is kept for the op tests, which check
/// every op on both devices, and for the benchmarks.
template <class A>
void residual_forward(Device d, A* out, const A* a, const A* b, size_t n) {
  GPT_DISPATCH("residual_forward", A, cpu::residual_forward(out, a, b, n),
               cuda::residual_forward(out, a, b, n));
}
/// da += dout;  db += dout
template <class A>
void residual_backward(Device d, A* da, A* db, const A* dout, size_t n) {
  GPT_DISPATCH("residual_backward", A, cpu::residual_backward(da, db, dout, n),
               cuda::residual_backward(da, db, dout, n));
}

/// x *= s
template <class A>
void scale(Device d, A* x, size_t n, double s) {
  GPT_DISPATCH("scale", A, cpu::scale(x, n, GradOf<A>(s)), cuda::scale(x, n, float(s)));
}

/// Fused softmax + cross-entropy over the first V of Vp logit columns (the padding
/// columns are ignored: probability 0, gradient 0). losses[i] = -log p[i, targets[i]].
/// When dlogits is non-null it is overwritten with dloss * (p - onehot(target)), so
/// the probabilities never need to be stored.
template <class A>
void softmax_crossentropy(Device d, GradOf<A>* losses, A* dlogits, const A* logits,
                          const int32_t* targets, double dloss, int N, int V, int Vp) {
  GPT_DISPATCH("softmax_crossentropy", A,
               cpu::softmax_crossentropy(losses, dlogits, logits, targets, GradOf<A>(dloss), N, V, Vp),
               cuda::softmax_crossentropy(losses, dlogits, logits, targets, float(dloss), N, V, Vp));
}

/// The cross-entropy of a vocabulary range of the logits (N rows of Vl columns, global
/// columns [v0, v0+Vl), real below V), split around the caller's reduction across the
/// ranks holding the other ranges (kernels/cpu/crossentropy.cpp has the equations; the
/// model's head runs it on one rank too, without a reduction, so that the backward makes
/// the gradient from the forward's statistics):
/// crossentropy_stats writes each row's max, sum of exponentials and target logit over
/// its columns; after the reduction, crossentropy_from_stats writes the losses and, when
/// dlogits is non-null, dloss * (p - onehot) on the range.
template <class A>
void crossentropy_stats(Device d, GradOf<A>* row_max, GradOf<A>* row_sumexp, GradOf<A>* target_logit,
                        const A* logits, const int32_t* targets, int v0, int V, int N, int Vl) {
  GPT_DISPATCH("crossentropy_stats", A,
               cpu::crossentropy_stats(row_max, row_sumexp, target_logit, logits, targets, v0, V, N, Vl),
               cuda::crossentropy_stats(row_max, row_sumexp, target_logit, logits, targets, v0, V, N, Vl));
}
/// The second half, from the reduced statistics: losses (N) and, when dlogits is non-null,
/// dlogits = dloss * (p - onehot) on the range (overwritten; 0 in padding columns).
template <class A>
void crossentropy_from_stats(Device d, GradOf<A>* losses, A* dlogits, const A* logits,
                             const GradOf<A>* row_max, const GradOf<A>* row_sumexp,
                             const GradOf<A>* target_logit, const int32_t* targets, double dloss,
                             int v0, int V, int N, int Vl) {
  GPT_DISPATCH("crossentropy_from_stats", A,
               cpu::crossentropy_from_stats(losses, dlogits, logits, row_max, row_sumexp, target_logit,
                                            targets, GradOf<A>(dloss), v0, V, N, Vl),
               cuda::crossentropy_from_stats(losses, dlogits, logits, row_max, row_sumexp, target_logit, targets,
                                             float(dloss), v0, V, N, Vl));
}

/// Sum of squares of g (accumulated in double); the global norm is the root of the
/// sum over every gradient tensor (and, later, over every rank).
template <class G>
double sum_of_squares(Device d, const G* g, size_t n) {
  double result = 0;
  GPT_DISPATCH("sum_of_squares", G, result = cpu::sum_of_squares(g, n),
               result = cuda::sum_of_squares(g, n));
  return result;
}

/// AdamW on fp32 master weights (Loshchilov & Hutter, decoupled weight decay):
/// ```
///   g = grad * grad_scale          (grad_scale applies global-norm clipping)
///   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
///   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd p )
/// ```
/// When `copy` is non-null the updated weight is also written there (the compute copy:
/// a float copy is rounded to bf16 values when copy_bf16 is set; a bf16 copy always is).
template <class G, class A = G>
void adamw_update(Device d, G* params, const G* grads, G* m, G* v, size_t n, const AdamWArgs& a,
                  A* copy = nullptr, bool copy_bf16 = false) {
  static_assert(std::is_same_v<A, G> || std::is_same_v<A, bf16>, "copy is G or bf16");
  GPT_DISPATCH("adamw_update", A, cpu::adamw_update(params, grads, m, v, n, a, copy, copy_bf16),
               cuda::adamw_update(params, grads, m, v, n, a, copy, copy_bf16));
}

/// Rounds every element to the nearest bf16 value (ties to even), in place: the bf16
/// storage of the bf16 mode, emulated in fp32 buffers.
inline void round_to_bf16(Device d, float* x, size_t n) {
  GPT_DISPATCH("round_to_bf16", float, cpu::round_to_bf16(x, n), cuda::round_to_bf16(x, n));
}
inline void round_to_bf16(Device, double*, size_t) {}  ///< a no-op: the ground truth is never rounded

/// dst = src converted to bf16 (round to nearest even); the bf16 compute copy of weights.
inline void convert_to_bf16(Device d, bf16* dst, const float* src, size_t n) {
  GPT_DISPATCH("convert_to_bf16", bf16, cpu::convert(dst, src, n), cuda::convert(dst, src, n));
}
/// dst = the fp32 values of bf16 src (exact): bf16 operands widened for fp32 arithmetic.
inline void convert_to_float(Device d, float* dst, const bf16* src, size_t n) {
  GPT_DISPATCH("convert_to_float", bf16, cpu::convert(dst, src, n), cuda::convert(dst, src, n));
}

/// Which GEMM the GPU's matmuls run (config key `gemm`: hand, cublas, v1..v5); the CPU
/// has one GEMM (kernels/cpu/gemm.cpp) and ignores the choice.
inline void set_gemm(Device d, const std::string& name) {
#ifdef GPT_HAVE_CUDA
  if (d == Device::CUDA) cuda::set_gemm(name.c_str());
#endif
  (void)d, (void)name;
}
/// The GEMM the matmuls run now on device d for fp32 or bf16 inputs, as a name: "v5",
/// "cublas", ...; "cpu" on the CPU.
inline const char* gemm_in_use(Device d, bool bf16_inputs) {
#ifdef GPT_HAVE_CUDA
  if (d == Device::CUDA) return cuda::gemm_in_use(bf16_inputs);
#endif
  (void)d, (void)bf16_inputs;
  return "cpu";
}

#undef GPT_DISPATCH

}  // namespace gpt::ops
