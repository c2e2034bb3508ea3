// GPT-2's pre-tokenizer (pretokenize.h): the pattern's seven alternatives, tried in
// order at each position as a regex engine would, written as one scan.
#include "common/pretokenize.h"

#include <algorithm>

#include "common/error.h"
#include "common/unicode.h"

namespace gpt {
namespace {

// [^\s\p{L}\p{N}]: punctuation, symbols, marks, controls that are not white space.
bool is_other(char32_t c) { return !is_white_space(c) && !is_letter(c) && !is_number(c); }

// The end of the piece that starts at code point i (the index just past it).
size_t piece_end(const std::vector<CodePoint>& cps, size_t i) {
  const size_t n = cps.size();
  auto at = [&](size_t k) -> char32_t { return k < n ? cps[k].value : 0; };

  // 's 't 're 've 'm 'll 'd (lower case only, as in the pattern).
  if (at(i) == U'\'') {
    const char32_t a = at(i + 1), b = at(i + 2);
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return i + 2;
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return i + 3;
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': one optional space, then a run of one
  // class. The class is that of the first character after the space, so at most one of
  // the three can match here.
  const size_t s = at(i) == U' ' ? i + 1 : i;
  if (s < n) {
    for (bool (*in_class)(char32_t) : {is_letter, is_number, is_other}) {
      if (!in_class(cps[s].value)) continue;
      size_t j = s + 1;
      while (j < n && in_class(cps[j].value)) ++j;
      return j;
    }
  }
  // Only white space is left: cps[i] is white space (a space followed by anything but
  // white space was taken above). j = the end of the run.
  size_t j = i + 1;
  while (j < n && is_white_space(cps[j].value)) ++j;
  // '\s+(?!\S)': the longest run not followed by a non-space: all of it at the end of
  // the text, else all but its last character, if that leaves one.
  if (j == n) return j;
  if (j - i >= 2) return j - 1;
  // '\s+': a single white-space character before a non-space one.
  return j;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view text, std::string_view what,
                                               size_t input_offset) {
  const std::vector<CodePoint> cps = decode_utf8(text, what, input_offset);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < cps.size();) {
    const size_t j = piece_end(cps, i);
    const size_t begin = cps[i].offset, end = j < cps.size() ? cps[j].offset : text.size();
    pieces.push_back(text.substr(begin, end - begin));
    i = j;
  }
  return pieces;
}

std::vector<std::string_view> pretokenize_parts(std::string_view text, size_t part_bytes) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (text.size() - begin > part_bytes) {
    size_t cut = begin + std::max<size_t>(part_bytes, 1);
    while (cut < text.size() && !is_piece_boundary(text, cut)) ++cut;
    parts.push_back(text.substr(begin, cut - begin));
    begin = cut;
  }
  if (begin < text.size() || parts.empty()) parts.push_back(text.substr(begin));
  return parts;
}

namespace {

// Whether `bytes` are exactly one well-formed UTF-8 character that is not white space.
bool one_non_space(std::string_view bytes) {
  try {
    const std::vector<CodePoint> cps = decode_utf8(bytes, "");
    return cps.size() == 1 && !is_white_space(cps[0].value);
  } catch (const UserError&) {
    return false;  // not a character: no place to cut (encoding it says what is wrong)
  }
}

}  // namespace

bool is_piece_boundary(std::string_view text, size_t k) {
  const auto printable = [](char c) { return c > ' ' && c < 0x7f; };
  if ((text[k] == ' ' || text[k] == '\n') && printable(text[k - 1])) return true;
  if (text[k - 1] != '\n' || k < 2) return false;
  // The characters either side of the newline: the one at k, its length read off its
  // first byte, and the one that ends at k - 2, found by stepping back over at most three
  // continuation bytes.
  const auto lead = static_cast<unsigned char>(text[k]);
  const size_t after = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
  size_t before = k - 2;
  while (before > 0 && k - 2 - before < 3 && (static_cast<unsigned char>(text[before]) & 0xC0) == 0x80) --before;
  return k + after <= text.size() && one_non_space(text.substr(k, after)) &&
         one_non_space(text.substr(before, k - 1 - before));
}

}  // namespace gpt
