/// @file
/// llm.c's model file (gpt2_124M.bin and the like), read into and written from this
/// project's parameter layout: GPT-2's released weights, or any run of llm.c, can start
/// a run here, and a run here can go back to llm.c.
///
/// ```
/// header: 256 little-endian int32
///   [0] magic 20240326   [1] version: 1 or 3 (fp32), 5 (bf16)   [2] max_seq_len
///   [3] vocab_size  [4] n_layer  [5] n_head  [6] n_embd
///   [7] padded_vocab (versions 3 and 5; in version 1 wte has vocab_size rows)
/// then 16 arrays, each one kind for every layer at once (L layers, C channels):
///   wte (Vp, C)  wpe (max_seq_len, C)  ln1w (L, C)  ln1b (L, C)  qkvw (L, 3C, C)
///   qkvb (L, 3C)  attprojw (L, C, C)  attprojb (L, C)  ln2w (L, C)  ln2b (L, C)
///   fcw (L, 4C, C)  fcb (L, 4C)  fcprojw (L, C, 4C)  fcprojb (L, C)  lnfw (C)  lnfb (C)
/// ```
/// A matrix is (out, in) there as here, so each tensor copies as it is; only the order
/// changes: this layout keeps a layer's tensors together (h.0.ln_1.weight ...
/// h.0.mlp.c_proj.bias, then h.1.*). The rows of wte past vocab_size (padding) are zero
/// here whatever the file holds, since no token reads them.
#pragma once
#include <string>
#include <vector>

#include "common/config.h"
#include "common/gpt2_layout.h"

namespace gpt {

/// What an llm.c model file's header says.
struct LlmcHeader {
  int version = 3;           ///< 1 or 3: fp32 values; 5: bf16 values
  ModelConfig model;         ///< its shape; block_size is the file's max_seq_len
  int file_padded_vocab = 0; ///< rows of wte in the file (vocab_size in version 1)
};

/// Reads and checks the header of llm.c model file `path`: the magic, a version this
/// reads, a shape that is a GPT-2 (n_head divides n_embd, padded_vocab >= vocab_size),
/// and a file exactly as long as that shape needs. Every failure is a UserError naming
/// the file and the reason.
LlmcHeader read_llmc_header(const std::string& path);

/// The file's weights in `layout`'s order: the whole model, `layout` of the header's
/// shape (a different shape is a UserError naming both). bf16 values are widened
/// exactly.
std::vector<float> read_llmc_model(const std::string& path, const ParamLayout& layout);

/// Writes the whole model `params` (in `layout`'s order) as an llm.c model file of
/// version 3 (fp32) or 5 (bf16, rounded to nearest even), its max_seq_len the layout's
/// block_size. Written to `path`.tmp (which must not exist), then linked to `path`, which
/// must not exist either: no half file is left, nothing is overwritten, and a failure
/// removes the temporary file.
void write_llmc_model(const std::string& path, const ParamLayout& layout, const float* params, int version);

}  // namespace gpt
