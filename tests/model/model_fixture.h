// What the model tests that compare two ways of running GPT2 share: a small model
// (3 layers, so a pipeline stage can be first, middle or last) and a bitwise comparison.
#pragma once
#include <cstddef>
#include <cstring>

#include "common/config.h"

namespace gpt::test {

inline ModelConfig tiny_model() {
  ModelConfig m;
  m.n_layer = 3, m.n_embd = 32, m.n_head = 4, m.block_size = 16, m.vocab_size = 200;
  return m;
}

// Whether a[0..n) and b[0..n) hold the same bits.
template <class T>
bool same_bits(const T* a, const T* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

}  // namespace gpt::test
