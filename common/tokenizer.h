/// @file
/// Byte-level tokenizer: a token is one byte of UTF-8 text, so the vocabulary is 256
/// ids and every text round-trips exactly. 256 is already a multiple of 128, so the
/// padded vocabulary of the model is 256 too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

constexpr int kByteVocab = 256;  ///< token ids 0..255, one per byte value

/// The token ids of text: one per byte, its unsigned value.
inline std::vector<uint16_t> encode_bytes(const std::string& text) {
  std::vector<uint16_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

/// The text whose bytes are ids (an id outside 0..255 keeps only its low 8 bits).
inline std::string decode_bytes(const std::vector<int>& ids) {
  std::string text;
  text.reserve(ids.size());
  for (int id : ids) text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  return text;
}

}  // namespace gpt
