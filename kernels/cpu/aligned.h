/// @file
/// Buffers of the CPU kernels that start on a cache line (64 bytes).
///
/// malloc (and so std::vector and new[]) aligns to 16 bytes. A kernel that loads 64-byte
/// vectors (LaneVector, lanes.h) from such a buffer then reads every vector across two
/// cache lines, and its time depends on where the allocator happened to put the buffer:
/// the flash attention's forward at T = 1024 took 12.7 ms a layer with its scratch on
/// cache lines and 19.2 ms with the same scratch 16 bytes past them (2 threads). The
/// model's own buffers are aligned already (common/device_array.cpp); these are for a
/// kernel's scratch and its widened copies.
#pragma once
#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace gpt::cpu {

/// The alignment of every buffer here: one cache line.
inline constexpr std::size_t kCacheLine = 64;

/// std::allocator's behaviour, on cache lines.
template <class T>
struct CacheLineAllocator {
  using value_type = T;  ///< what it allocates
  CacheLineAllocator() = default;
  /// Rebinding (std::vector's allocator of another type) keeps the alignment.
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  /// n values of T, uninitialised, on a cache line.
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kCacheLine))); }
  /// Gives back what allocate returned.
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(kCacheLine)); }
  /// Every instance allocates alike.
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

/// A std::vector whose data starts on a cache line (its elements initialised as usual).
template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

/// Deletes what aligned_array allocated.
template <class T>
struct AlignedArrayDelete {
  /// Frees p.
  void operator()(T* p) const noexcept { ::operator delete[](p, std::align_val_t(kCacheLine)); }
};

/// An array of T on a cache line, as new T[n] gives one: uninitialised for a trivial T
/// (a widened copy overwrites every element at once).
template <class T>
using AlignedArray = std::unique_ptr<T[], AlignedArrayDelete<T>>;

/// n values of T on a cache line, default-initialised (new T[n]).
template <class T>
AlignedArray<T> aligned_array(std::size_t n) {
  static_assert(std::is_trivially_destructible_v<T>, "aligned_array's deleter runs no destructors");
  return AlignedArray<T>(new (std::align_val_t(kCacheLine)) T[n]);
}

}  // namespace gpt::cpu
