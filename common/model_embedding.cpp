// The embedding piece; see model_embedding.h. The whole vocabulary from position 0 runs
// the device's embedding op (on the GPU its sorted, deterministic backward); a range or
// an offset runs the range op.
#include "common/model_embedding.h"

#include "kernels/ops.h"

namespace gpt {

namespace {
bool whole(VocabRange vocab, const void* wpe, int pos0, int Vp) {
  return vocab.begin == 0 && vocab.end == Vp && wpe != nullptr && pos0 == 0;
}
}  // namespace

template <class A>
void embedding_piece_forward(const PieceContext& ctx, A* out, const int32_t* tokens, const A* wte_rows,
                             VocabRange vocab, const A* wpe, int pos0, int B, int T, int C, int Vp) {
  if (whole(vocab, wpe, pos0, Vp))
    ops::embedding_forward(ctx.device, out, tokens, wte_rows, wpe, B, T, C);
  else
    ops::embedding_range_forward(ctx.device, out, tokens, wte_rows, vocab.begin, vocab.end, wpe, pos0, B, T, C);
  ctx.round(out, size_t(B) * T * C);
}

template <class A>
void embedding_piece_backward(const PieceContext& ctx, GradOf<A>* dwte_rows, GradOf<A>* dwpe, const A* dout,
                              const int32_t* tokens, VocabRange vocab, int pos0, int B, int T, int C, int Vp) {
  if (whole(vocab, dwpe, pos0, Vp))
    ops::embedding_backward(ctx.device, dwte_rows, dwpe, dout, tokens, B, T, C);
  else
    ops::embedding_range_backward(ctx.device, dwte_rows, dwpe, dout, tokens, vocab.begin, vocab.end, pos0, B, T,
                                  C);
}

#define GPT_EMBEDDING_INSTANTIATE(A)                                                                         \
  template void embedding_piece_forward<A>(const PieceContext&, A*, const int32_t*, const A*, VocabRange,    \
                                           const A*, int, int, int, int, int);                               \
  template void embedding_piece_backward<A>(const PieceContext&, GradOf<A>*, GradOf<A>*, const A*,           \
                                            const int32_t*, VocabRange, int, int, int, int, int);
GPT_EMBEDDING_INSTANTIATE(float)
GPT_EMBEDDING_INSTANTIATE(double)
GPT_EMBEDDING_INSTANTIATE(bf16)
#undef GPT_EMBEDDING_INSTANTIATE

}  // namespace gpt
