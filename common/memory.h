/// @file
/// Memory accounting: the bytes a rank holds, by kind, which every stage reports (at
/// start, and in every metrics line: docs/metrics.md). Later stages shard these kinds;
/// their lessons compare the ledger with the per-rank formula.
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

/// What a block of memory is for, the kinds the ledger reports; also the index into
/// kMemKindNames. Params: the weights. Grads: their gradients. Optimizer: AdamW's moments
/// m and v and any master copy. Activations: activations and their gradients. Buffers:
/// communication scratch and anything no MemScope claimed. Eval: what a sample or an
/// evaluation makes and frees around itself (the whole model gathered, the model that
/// scores it), counted apart so that the training kinds stay the training's.
enum class MemKind { Params, Grads, Optimizer, Activations, Buffers, Eval };
/// The name of each MemKind, in its order, as the table and JSON print it.
constexpr std::array<const char*, 6> kMemKindNames = {"params", "grads", "optimizer", "activations",
                                                      "buffers", "eval"};

/// Bytes by MemKind: a snapshot to print or to compare with a formula, not live counts.
class MemoryLedger {
 public:
  void set(MemKind kind, size_t bytes) { bytes_[size_t(kind)] = bytes; }   ///< replaces the count of kind
  void add(MemKind kind, size_t bytes) { bytes_[size_t(kind)] += bytes; }  ///< adds bytes to the count of kind
  size_t get(MemKind kind) const { return bytes_[size_t(kind)]; }  ///< bytes of kind, 0 if never set
  size_t total() const;  ///< the sum over all kinds, in bytes
  std::string table() const;  ///< human-readable, one line per kind
  std::string json() const;   ///< {"params": bytes, ...}

 private:
  std::array<size_t, kMemKindNames.size()> bytes_{};
};

/// `bytes` as text in the largest of B, KiB, MiB, GiB, TiB that keeps the number at least 1,
/// with two decimals: "1.50 GiB".
std::string format_bytes(double bytes);

/// The bytes held by the process's DeviceArrays, by kind: now and at the peak.
class MemoryTracker {
 public:
  static MemoryTracker& global();  ///< the one tracker of the process, shared by all threads
  void allocated(MemKind kind, size_t bytes);  ///< counts bytes of kind as held and raises its peak if passed
  void freed(MemKind kind, size_t bytes);      ///< counts bytes of kind as released; the peak stays
  size_t current(MemKind kind) const { return current_[size_t(kind)].load(); }  ///< bytes of kind held now
  /// The most bytes of kind held at once since the start or the last reset_peaks().
  size_t peak(MemKind kind) const { return peak_[size_t(kind)].load(); }
  MemoryLedger peaks() const;  ///< the peak of each kind
  void reset_peaks();          ///< peaks := current (tests)
  /// What is held now, as text for an error: "params 237.42 MiB, grads 474.84 MiB, ...".
  std::string held_now() const;

 private:
  std::array<std::atomic<size_t>, kMemKindNames.size()> current_{}, peak_{};
};

/// The kind under which this thread's allocations are counted while the scope lives.
class MemScope {
 public:
  /// Counts this thread's allocations under kind until destroyed; inside an Eval scope
  /// everything stays Eval (a model made to evaluate names its own buffers' kinds).
  explicit MemScope(MemKind kind);
  ~MemScope();  ///< restores the kind in force before this scope (scopes nest)
  MemScope(const MemScope&) = delete;
  MemScope& operator=(const MemScope&) = delete;
  static MemKind current();  ///< the kind in force on this thread; Buffers outside every scope

 private:
  MemKind previous_;
};

}  // namespace gpt
