// Memory accounting: the bytes a rank holds, by kind, as DESIGN asks every stage to
// report (at start, and in every metrics line). Later stages shard these kinds; their
// lessons compare the ledger with the per-rank formula.
#pragma once
#include <array>
#include <cstddef>
#include <string>

namespace gpt {

enum class MemKind { Params, Grads, Optimizer, Activations, Buffers };
constexpr std::array<const char*, 5> kMemKindNames = {"params", "grads", "optimizer", "activations",
                                                      "buffers"};

class MemoryLedger {
 public:
  void set(MemKind kind, size_t bytes) { bytes_[size_t(kind)] = bytes; }
  void add(MemKind kind, size_t bytes) { bytes_[size_t(kind)] += bytes; }
  size_t get(MemKind kind) const { return bytes_[size_t(kind)]; }
  size_t total() const;
  std::string table() const;  // human-readable, one line per kind
  std::string json() const;   // {"params": bytes, ...}

 private:
  std::array<size_t, 5> bytes_{};
};

std::string format_bytes(double bytes);

}  // namespace gpt
