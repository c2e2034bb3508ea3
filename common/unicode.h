/// @file
/// The little of Unicode that GPT-2's pre-tokenizer needs: UTF-8 decoding with the byte
/// offset of each code point, and three character classes as regular expressions name
/// them: letters `\p{L}` (general categories Lu Ll Lt Lm Lo), numbers `\p{N}` (Nd Nl
/// No) and white space `\s` (the White_Space property, as in tiktoken's and Python's
/// `regex` patterns). The letter and number ranges are read off tiktoken's own classes by
/// scripts/gen_unicode_table.py (common/unicode_table.inc names tiktoken's version).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace gpt {

/// One code point of a UTF-8 text and where its bytes are.
struct CodePoint {
  char32_t value;  ///< the code point
  size_t offset;   ///< index of its first byte in the text
  int bytes;       ///< its length in UTF-8, 1..4
};

/// The code points of `text`; a UserError naming `what`, the byte offset and the byte
/// when `text` is not well-formed UTF-8 (overlong forms, surrogates and values above
/// U+10FFFF included). `text` may be a part of a larger input that starts at byte
/// `input_offset` of it: the error then names the byte's offset in the input.
std::vector<CodePoint> decode_utf8(std::string_view text, std::string_view what, size_t input_offset = 0);

/// `\p{L}`: a letter of any script (categories Lu, Ll, Lt, Lm, Lo).
bool is_letter(char32_t c);
/// `\p{N}`: a digit, letter-like number or other number (categories Nd, Nl, No).
bool is_number(char32_t c);
/// `\s`: Unicode's White_Space property (tab to carriage return, space, U+0085, U+00A0,
/// U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool is_white_space(char32_t c);

}  // namespace gpt
