/// @file
/// ```
/// GPT-2's pre-tokenizer: splits text into the pieces that byte-pair encoding then
/// encodes one by one, so that no token spans two words. The pieces are the matches,
/// left to right, of GPT-2's published pattern (as tiktoken's r50k_base writes it):
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// in words: an English contraction; a run of letters, of numbers, or of other
/// non-space characters, each with at most one space before it; a run of white space
/// that leaves its last character to the piece after it ("a  b" -> "a", " ", " b").
/// ```
/// Written out as a scan over code points (common/unicode.h) instead of a regex engine.
#pragma once
#include <string_view>
#include <vector>

namespace gpt {

/// The pieces of `text` (views into it, in order; their concatenation is `text`). A
/// UserError naming `what` when `text` is not valid UTF-8, with the byte's offset in the
/// input `text` is a part of, which starts at its byte `input_offset`.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text, std::string_view what,
                                               size_t input_offset = 0);

/// `text` cut into parts of at least `part_bytes` bytes (the last may be shorter) at
/// places no piece spans (is_piece_boundary), so that pre-tokenizing each part alone gives
/// the pieces of the whole. A text with no such place is one part. Pre-tokenizing takes
/// some 30 bytes for a byte of text: encoding part by part bounds that by the part.
std::vector<std::string_view> pretokenize_parts(std::string_view text, size_t part_bytes);

/// Whether the place before `text[k]` (0 < k < text.size()) is one where no piece of
/// `text`, or of any text that begins with `text`, continues, and pre-tokenizing what
/// comes before it alone gives the same pieces. Two kinds, both whatever follows:
///  * a printable ASCII byte that is not white space, then a space or a newline: the
///    pattern holds white space past a match's first character only in a run of white
///    space alone, so no match continues past the printable byte;
///  * a character that is not white space, a newline, then a character that is not white
///    space (text with no spaces, Chinese or Japanese, has only this kind): the newline
///    is a piece of its own, `\s+` at a run of one, as `\s+(?!\S)` makes it at the
///    end of a text.
bool is_piece_boundary(std::string_view text, size_t k);

}  // namespace gpt
