/// @file
/// Multiple-choice examples (HellaSwag, MMLU) in llm.c's eval file format, so that the
/// files llm.c's dev/data/hellaswag.py writes evaluate here unchanged.
///
/// ```
/// header: 256 little-endian int32
///   [0] magic 20240522   [1] version 1   [2] number of examples
///   [3] the longest example, in bytes
/// then, for each example, a run of little-endian uint16:
///   65535 (start of an example)   its size in bytes (these fields included)
///   its index in the dataset      label (the index of the right completion)
///   K (number of completions)     n, then the n context tokens
///   K times: m, then the m tokens of a completion
/// ```
/// A completion is scored as the text that follows the context: the row
/// context + completion runs through the model, and the loss of each completion token
/// (predicted from the token before it) counts. See common/choices_eval.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

constexpr int32_t kChoicesMagic = 20240522;  ///< word 0 of an eval file's header
constexpr int32_t kChoicesVersion = 1;       ///< word 1: the only version read

/// One question: a context and the completions to choose from.
struct ChoiceExample {
  int index = 0;                             ///< its index in the dataset (as the file says)
  int label = 0;                             ///< which completion is right
  std::vector<int> context;                  ///< the shared start of every row
  std::vector<std::vector<int>> completions;  ///< the candidates, each at least one token
};

/// Reads and checks eval file `path`. Every way a file can be wrong is a UserError naming
/// the file, the example (its position in the file) and the byte offset: a missing or
/// short file, a wrong magic or version, no examples or more than the 65,535 its 16-bit
/// index numbers, an example that does not start with 65535, whose
/// size field disagrees with its fields, that has no context, fewer than two completions,
/// an empty completion, a label not below its count of completions, or a token not below
/// vocab_size; an example count or longest size other than the header's; bytes after the
/// last example.
/// With `limit` > 0 only the first `limit` examples are kept (the whole file is checked).
std::vector<ChoiceExample> read_choices_file(const std::string& path, int vocab_size, int limit = 0);

/// Writes `examples` to `path` in the format above, so that read_choices_file gives them
/// back. What the format cannot hold is a UserError naming the example: none, or more
/// than 65,535; an index, label, count or token outside 16 bits, a token 65535 (llm.c
/// keeps it for the start of an example); no context, fewer than
/// two completions, an empty one, a label not below the count; an example over the
/// 65,535 bytes its size field counts. Written to a temporary file of its own beside `path`
/// (create_temporary_beside, common/files.h) and renamed, so `path` is whole or absent; a
/// write error (a full disk) is a UserError and leaves no file.
void write_choices_file(const std::string& path, const std::vector<ChoiceExample>& examples);

}  // namespace gpt
