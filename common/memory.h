/// @file
/// Memory accounting: the bytes a rank holds, by kind, as DESIGN asks every stage to
/// report (at start, and in every metrics line). Later stages shard these kinds; their
/// lessons compare the ledger with the per-rank formula.
///
/// The bytes are not computed: every DeviceArray reports its allocation and its release
/// to the process's MemoryTracker under the kind in force when it was made (MemScope,
/// per thread; Buffers when none is: communication scratch and anything not claimed).
/// The ledger a stage prints is the tracker's peak per kind, what the process really held.
#pragma once
#include <array>
#include <atomic>
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
  std::string table() const;  ///< human-readable, one line per kind
  std::string json() const;   ///< {"params": bytes, ...}

 private:
  std::array<size_t, 5> bytes_{};
};

std::string format_bytes(double bytes);

/// The bytes held by the process's DeviceArrays, by kind: now and at the peak.
class MemoryTracker {
 public:
  static MemoryTracker& global();
  void allocated(MemKind kind, size_t bytes);
  void freed(MemKind kind, size_t bytes);
  size_t current(MemKind kind) const { return current_[size_t(kind)].load(); }
  size_t peak(MemKind kind) const { return peak_[size_t(kind)].load(); }
  MemoryLedger peaks() const;  ///< the peak of each kind
  void reset_peaks();          ///< peaks := current (tests)

 private:
  std::array<std::atomic<size_t>, 5> current_{}, peak_{};
};

/// The kind under which this thread's allocations are counted while the scope lives.
class MemScope {
 public:
  explicit MemScope(MemKind kind);
  ~MemScope();
  MemScope(const MemScope&) = delete;
  MemScope& operator=(const MemScope&) = delete;
  static MemKind current();

 private:
  MemKind previous_;
};

}  // namespace gpt
