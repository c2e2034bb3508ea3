// UTF-8 decoding and the character classes of GPT-2's pre-tokenizer (unicode.h).
//
// UTF-8 writes a code point in 1 to 4 bytes:
//   U+0000..U+007F     0xxxxxxx
//   U+0080..U+07FF     110xxxxx 10xxxxxx
//   U+0800..U+FFFF     1110xxxx 10xxxxxx 10xxxxxx            (not U+D800..U+DFFF)
//   U+10000..U+10FFFF  11110xxx 10xxxxxx 10xxxxxx 10xxxxxx
// and only the shortest form of a value is well formed.
#include "common/unicode.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/error.h"

namespace gpt {
namespace {

struct CodeRange {
  char32_t first, last;  // inclusive
};

#include "common/unicode_table.inc"

template <size_t N>
bool in_ranges(const CodeRange (&ranges)[N], char32_t c) {
  // The first range that ends at or after c; c is in it when it starts at or before c.
  const CodeRange* it = std::lower_bound(std::begin(ranges), std::end(ranges), c,
                                         [](const CodeRange& r, char32_t x) { return r.last < x; });
  return it != std::end(ranges) && it->first <= c;
}

[[noreturn]] void bad_utf8(std::string_view what, size_t offset, unsigned char byte, const char* why) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", byte);
  fail(std::string(what) + " is not valid UTF-8: byte " + hex + " at offset " +
       std::to_string(offset) + " " + why);
}

}  // namespace

std::vector<CodePoint> decode_utf8(std::string_view text, std::string_view what, size_t input_offset) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    int bytes = 0;
    char32_t value = 0, smallest = 0;
    if (lead < 0x80) {
      bytes = 1, value = lead;
    } else if ((lead & 0xE0) == 0xC0) {
      bytes = 2, value = lead & 0x1F, smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      bytes = 3, value = lead & 0x0F, smallest = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      bytes = 4, value = lead & 0x07, smallest = 0x10000;
    } else {
      bad_utf8(what, input_offset + i, lead, "cannot start a character");
    }
    if (i + size_t(bytes) > text.size()) bad_utf8(what, input_offset + i, lead, "starts a character the text cuts off");
    for (int k = 1; k < bytes; ++k) {
      const auto next = static_cast<unsigned char>(text[i + size_t(k)]);
      if ((next & 0xC0) != 0x80) bad_utf8(what, input_offset + i + size_t(k), next, "should continue a character");
      value = (value << 6) | (next & 0x3F);
    }
    if (value < smallest) bad_utf8(what, input_offset + i, lead, "starts an overlong form");
    if ((value >= 0xD800 && value <= 0xDFFF) || value > 0x10FFFF)
      bad_utf8(what, input_offset + i, lead, "starts a surrogate or a value above U+10FFFF");
    out.push_back({value, i, bytes});
    i += size_t(bytes);
  }
  return out;
}

bool is_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return in_ranges(kLetterRanges, c);
}

bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(kNumberRanges, c);
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace gpt
