// bf16 storage on the CPU: widen the inputs to fp32, run the fp32 kernel, round the
// outputs to bf16 (see bf16_ops.h). Two helpers carry the pattern:
//   Wide     an fp32 copy of a bf16 input, for the call;
//   Narrowed an fp32 stand-in for a bf16 output, rounded into it when the call ends
//            (holding the output's values first when the op accumulates into it).
// The largest operands (the logits and their gradient, B*T x Vp) are widened a slice at
// a time where the slices are independent: rows of a product's output or of the loss. So
// a widened copy is at most kSliceFloats, and the fp32 kernel does the same arithmetic on
// each element as on the whole. The matmuls' operands are never copied: the GEMM widens
// them as it packs its panels (gemm.h), which gives the same panels, so the same bits.
// The embedding's forward reads two rows per position out of large tables, so it
// converts as it reads instead of widening the tables. The head's loss halves go a row at
// a time through per-thread row buffers (below).
#include "kernels/cpu/bf16_ops.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/aligned.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

void convert(bf16* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
  for (size_t i = 0; i < n; ++i) dst[i].bits = bf16_bits(src[i]);
}

void convert(float* dst, const bf16* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : worth_threads(double(n)))
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i].bits);
}

namespace {

// An fp32 copy of n bf16 values (null for a null input), alive as long as this object.
class Wide {
 public:
  Wide(const bf16* x, size_t n) : data_(x ? aligned_array<float>(n) : nullptr) {
    if (x) convert(data_.get(), x, n);
  }
  float* get() const { return data_.get(); }

 private:
  AlignedArray<float> data_;  // on a cache line, as the model's own buffers (kernels/cpu/aligned.h)
};

// An fp32 buffer standing in for the bf16 output `out` of n elements (null stays null):
// it starts as out's values when the op accumulates into it, and is rounded into out
// when this object is destroyed, after the op has run.
class Narrowed {
 public:
  Narrowed(bf16* out, size_t n, bool accumulates) : out_(out), n_(n), data_(out ? aligned_array<float>(n) : nullptr) {
    if (out && accumulates) convert(data_.get(), out, n);
  }
  ~Narrowed() {
    if (out_) convert(out_, data_.get(), n_);
  }
  Narrowed(const Narrowed&) = delete;
  Narrowed& operator=(const Narrowed&) = delete;
  float* get() const { return data_.get(); }

 private:
  bf16* out_;
  size_t n_;
  AlignedArray<float> data_;  // on a cache line, as the model's own buffers (kernels/cpu/aligned.h)
};

constexpr bool kOverwrites = false, kAccumulates = true;

// One row converted on the calling thread (inside a parallel loop over rows).
void widen_row(float* dst, const bf16* src, int n) {
#pragma omp simd
  for (int j = 0; j < n; ++j) dst[j] = bf16_to_float(src[j].bits);
}
void narrow_row(bf16* dst, const float* src, int n) {
#pragma omp simd
  for (int j = 0; j < n; ++j) dst[j].bits = bf16_bits(src[j]);
}

size_t slice_floats = size_t(16) << 20;  // 64 MiB of fp32 per widened slice (set_bf16_slice_floats)

// Calls f(first, count) over [0, n) in slices of at most slice_floats / floats_each items.
template <class F>
void by_slices(int n, size_t floats_each, F&& f) {
  const size_t fits = slice_floats / std::max<size_t>(1, floats_each);
  const int step = int(std::max<size_t>(1, std::min<size_t>(size_t(n), fits)));
  for (int first = 0; first < n; first += step) f(first, std::min(step, n - first));
}

}  // namespace

void set_bf16_slice_floats(size_t floats) { slice_floats = floats > 0 ? floats : 1; }

// ---- embedding ---------------------------------------------------------------------

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int T_, int C) {
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(B) * T_ * C))
  for (int bt = 0; bt < B * T_; ++bt) {
    const bf16* tok = wte + size_t(tokens[bt]) * C;
    const bf16* pos = wpe + size_t(bt % T_) * C;
    bf16* o = out + size_t(bt) * C;
    for (int c = 0; c < C; ++c) o[c].bits = bf16_bits(widen(tok[c]) + widen(pos[c]));
  }
}

void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int T_, int C) {
  const Wide g(dout, size_t(B) * T_ * C);
  embedding_backward(dwte, dwpe, g.get(), tokens, B, T_, C);
}

void embedding_range_forward(bf16* out, const int32_t* tokens, const bf16* wte_rows, int v0, int v1,
                             const bf16* wpe, int pos0, int B, int T_, int C) {
#pragma omp parallel for schedule(static) if (parallel : worth_threads(double(B) * T_ * C))
  for (int bt = 0; bt < B * T_; ++bt) {
    const int tok = tokens[bt];
    const bf16* row = tok >= v0 && tok < v1 ? wte_rows + size_t(tok - v0) * C : nullptr;
    const bf16* pos = wpe ? wpe + size_t(pos0 + bt % T_) * C : nullptr;
    bf16* o = out + size_t(bt) * C;
    for (int c = 0; c < C; ++c)
      o[c].bits = bf16_bits((row ? widen(row[c]) : 0.0f) + (pos ? widen(pos[c]) : 0.0f));
  }
}

void embedding_range_backward(float* dwte_rows, float* dwpe, const bf16* dout, const int32_t* tokens, int v0,
                              int v1, int pos0, int B, int T_, int C) {
  const Wide g(dout, size_t(B) * T_ * C);
  embedding_range_backward(dwte_rows, dwpe, g.get(), tokens, v0, v1, pos0, B, T_, C);
}

// ---- layernorm ---------------------------------------------------------------------

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N,
                       int C) {
  const size_t NC = size_t(N) * C;
  const Wide x(inp, NC), weight(w, size_t(C)), bias(b, size_t(C));
  const Narrowed y(out, NC, kOverwrites);
  layernorm_forward(y.get(), mean, rstd, x.get(), weight.get(), bias.get(), N, C);
}

void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w,
                        const float* mean, const float* rstd, int N, int C) {
  const size_t NC = size_t(N) * C;
  const Wide g(dout, NC), x(inp, NC), weight(w, size_t(C));
  const Narrowed dx(dinp, NC, kAccumulates);
  layernorm_backward(dx.get(), dw, db, g.get(), x.get(), weight.get(), mean, rstd, N, C);
}

// ---- matmul ------------------------------------------------------------------------

void matmul_forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int N, int C, int OC,
                    bf16* gelu_out) {
  const Wide b(bias, size_t(OC));
  by_slices(N, size_t(OC), [&](int r0, int rows) {  // rows of the output
    const size_t n = size_t(rows) * OC;
    const Narrowed y(out + size_t(r0) * OC, n, kOverwrites),
        y_gelu(gelu_out ? gelu_out + size_t(r0) * OC : nullptr, n, kOverwrites);
    matmul_forward(y.get(), inp + size_t(r0) * C, w, b.get(), rows, C, OC);  // widened as the GEMM packs
    if (gelu_out) gelu_forward(y_gelu.get(), y.get(), n);  // from the fp32 product, before rounding
  });
}

void matmul_backward(bf16* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp, const bf16* w, int N,
                     int C, int OC) {
  // The GEMM widens dout, inp and w as it packs them; dinp is written in fp32 and
  // rounded once (N x C, an activation's size).
  const Narrowed dx(dinp, size_t(N) * C, kOverwrites);
  matmul_backward(dx.get(), dw, dbias, dout, inp, w, N, C, OC);
}

// ---- attention ---------------------------------------------------------------------

void flash_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T_, int C, int NH, int Br, int Bc) {
  const size_t NC = size_t(B) * T_ * C;
  const Wide x(qkv, 3 * NC);
  const Narrowed y(out, NC, kOverwrites);
  flash_attention_forward(y.get(), lse, x.get(), B, T_, C, NH, Br, Bc);
}

void flash_attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                              int B, int T_, int C, int NH, int Br, int Bc) {
  const size_t NC = size_t(B) * T_ * C;
  const Wide g(dout, NC), x(qkv, 3 * NC), y(out, NC);
  const Narrowed dx(dqkv, 3 * NC, kAccumulates);
  flash_attention_backward(dx.get(), g.get(), x.get(), y.get(), lse, B, T_, C, NH, Br, Bc);
}

// ---- elementwise -------------------------------------------------------------------

void gelu_forward(bf16* out, const bf16* inp, size_t n) {
  const Wide x(inp, n);
  const Narrowed y(out, n, kOverwrites);
  gelu_forward(y.get(), x.get(), n);
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) {
  const Wide x(inp, n), g(dout, n);
  const Narrowed dx(dinp, n, kOverwrites);
  gelu_backward(dx.get(), x.get(), g.get(), n);
}

void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n) {
  const Wide x(a, n), y(b, n);
  const Narrowed sum(out, n, kOverwrites);
  residual_forward(sum.get(), x.get(), y.get(), n);
}

void residual_backward(bf16* da, bf16* db, const bf16* dout, size_t n) {
  const Wide g(dout, n);
  const Narrowed dx(da, n, kAccumulates), dy(db, n, kAccumulates);
  residual_backward(dx.get(), dy.get(), g.get(), n);
}

void scale(bf16* x, size_t n, float s) {
  const Narrowed y(x, n, kAccumulates);  // read and rewritten in place
  scale(y.get(), n, s);
}

// ---- loss --------------------------------------------------------------------------

void softmax_crossentropy(float* losses, bf16* dlogits, const bf16* logits, const int32_t* targets, float dloss,
                          int N, int V, int Vp) {
  by_slices(N, size_t(Vp), [&](int r0, int rows) {  // rows are independent
    const size_t at = size_t(r0) * Vp, n = size_t(rows) * Vp;
    const Wide z(logits + at, n);
    const Narrowed dz(dlogits ? dlogits + at : nullptr, n, kOverwrites);  // may be the logits: z is a copy
    softmax_crossentropy(losses + r0, dz.get(), z.get(), targets + r0, dloss, rows, V, Vp);
  });
}

// The vocabulary-range halves go a row at a time: each thread widens its row into a
// buffer of its own (a GPT-2 row is 50304 floats, 200 KB: it stays in cache; on a cache
// line, kernels/cpu/aligned.h) and runs the fp32 kernel's row on it, so no N x Vl fp32
// copy of the logits is made, touched once and given back. The arithmetic is the fp32
// op's, row by row.
void crossentropy_stats(float* row_max, float* row_sumexp, float* target_logit, const bf16* logits,
                        const int32_t* targets, int v0, int V, int N, int Vl) {
  const int real = std::max(0, std::min(Vl, V - v0));
#pragma omp parallel if (parallel : worth_threads(double(N) * real))
  {
    AlignedVector<float> z(static_cast<size_t>(real));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      widen_row(z.data(), logits + size_t(i) * Vl, real);
      crossentropy_stats_row(row_max[i], row_sumexp[i], target_logit[i], z.data(), targets[i] - v0, real);
    }
  }
}

void crossentropy_from_stats(float* losses, bf16* dlogits, const bf16* logits, const float* row_max,
                             const float* row_sumexp, const float* target_logit, const int32_t* targets,
                             float dloss, int v0, int V, int N, int Vl) {
  const int real = std::max(0, std::min(Vl, V - v0));
#pragma omp parallel if (parallel : worth_threads(double(N) * Vl))
  {
    AlignedVector<float> z(dlogits ? size_t(real) : 0), d(dlogits ? size_t(Vl) : 0);
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      losses[i] = crossentropy_loss(row_max[i], row_sumexp[i], target_logit[i]);
      if (!dlogits) continue;
      widen_row(z.data(), logits + size_t(i) * Vl, real);  // before dlogits, which may be the logits
      crossentropy_gradient_row(d.data(), z.data(), row_max[i], row_sumexp[i], targets[i] - v0, dloss, real, Vl);
      narrow_row(dlogits + size_t(i) * Vl, d.data(), Vl);
    }
  }
}

// ---- optimizer ---------------------------------------------------------------------

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const ops::AdamWArgs& a,
                  bf16* copy, bool /*round_copy: always*/) {
  adamw_update(params, grads, m, v, n, a, static_cast<float*>(nullptr), false);
  if (copy) convert(copy, params, n);
}

}  // namespace gpt::cpu
