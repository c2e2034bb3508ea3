/// @file
/// Counter-based random numbers: Philox-4x32-10 (Salmon et al., "Parallel random
/// numbers: as easy as 1, 2, 3", SC 2011). A random value is a pure function of
/// (key, counter), with no state to carry: element i of parameter p is drawn from
/// counter (i, p) under the run's seed, so any shard of any layout computes the very
/// values the single-device model has, without a broadcast.
///
/// One round multiplies two 32-bit lanes by fixed odd constants and mixes the high and
/// low halves with the other lanes and the key; ten rounds, the key bumped by the
/// Weyl constants between rounds, make the output statistically random.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

namespace gpt {

/// One Philox output block: 128 random bits.
struct Philox4x32 {
  uint32_t v[4];  ///< four words, each uniform over 0 .. 2^32-1
};

/// The Philox-4x32-10 block at (key, counter), the 128-bit counter being counter_hi:counter_lo.
inline Philox4x32 philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi) {
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

/// A stable 64-bit id for a name, used as the stream of a parameter, of the data order and
/// of the sampler. FNV-1a's loop, but started from 1469598103934665603: FNV-1a-64's offset
/// basis (14695981039346656037, checkpoint_files.cpp's checksum) without its last digit. Kept as
/// it is, since every run's initial weights and data order depend on it (docs/model.md).
inline uint64_t stream_id(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : name) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

/// Uniform in (0, 1) from 32 random bits (never exactly 0, so log() is safe).
inline double uniform_from_bits(uint32_t bits) { return (double(bits) + 0.5) * 0x1p-32; }

/// Uniform in (0, 1) at (seed, stream, index).
inline double uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return uniform_from_bits(philox4x32(seed, index, stream).v[0]);
}

/// Standard normal at (seed, stream, index), by Box-Muller on two 32-bit words.
inline double normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const Philox4x32 r = philox4x32(seed, index, stream);
  const double u1 = uniform_from_bits(r.v[0]), u2 = uniform_from_bits(r.v[1]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// 64 random bits at (seed, stream, index).
inline uint64_t bits64_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const Philox4x32 r = philox4x32(seed, index, stream);
  return (uint64_t(r.v[1]) << 32) | r.v[0];
}

}  // namespace gpt
