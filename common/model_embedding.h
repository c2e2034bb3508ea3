/// @file
/// The embedding piece: token and position embeddings of B sequences of T tokens.
///
/// ```
///   x0[b,t,:] = wte[tokens[b,t], :] + wpe[pos0 + t, :]
/// ```
///
/// for a rank holding the rows vocab = [v0, v1) of wte (wte_rows points at row v0): a
/// token outside the range contributes zero, so the sum over ranks that split the
/// vocabulary (tensor parallelism) is the whole embedding. pos0 is the position of the
/// chunk's first token (context and sequence parallelism hold chunks of a sequence);
/// wpe may be null (no positions added on this rank). The backward ACCUMULATES into the
/// gradients of the rows and positions it read.
#pragma once
#include <cstdint>

#include "common/gpt2_layout.h"
#include "common/model_pieces.h"

namespace gpt {


/// Writes x0 (B x T rows of C, overwritten) for the tokens (B x T) as above. Vp is wte's
/// padded row count: with the whole of it, wpe and pos0 = 0 the device's plain embedding
/// op runs, otherwise the range op. In bf16 emulation the output is rounded to bf16.
template <class A>
void embedding_piece_forward(const PieceContext& ctx, A* out, const int32_t* tokens, const A* wte_rows,
                             VocabRange vocab, const A* wpe, int pos0, int B, int T, int C, int Vp);

/// ACCUMULATES dout (B x T rows of C) into dwte_rows, the gradient of this rank's rows
/// (tokens outside the range add nothing), and into rows pos0 .. pos0+T-1 of dwpe unless
/// it is null. Vp as for the forward.
template <class A>
void embedding_piece_backward(const PieceContext& ctx, GradOf<A>* dwte_rows, GradOf<A>* dwpe, const A* dout,
                              const int32_t* tokens, VocabRange vocab, int pos0, int B, int T, int C, int Vp);

}  // namespace gpt
