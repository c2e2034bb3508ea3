/// @file
/// A fixed-size array of T in the memory of a device: host memory for Device::CPU,
/// GPU memory (cudaMalloc) for Device::CUDA. The model, the optimizer and the tests
/// hold their buffers in these so one piece of code runs on either device; data moves
/// between host and device only through the explicit copy functions below, so every
/// transfer is visible in the code.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "common/device.h"
#include "common/memory.h"

namespace gpt {

/// Raw device memory; every function fails with a clear message on a CUDA error.
void* device_alloc(Device d, size_t bytes);  ///< zero-filled
void device_free(Device d, void* p);  ///< releases memory from device_alloc on d; a null p is a no-op
/// Zeroes `bytes` bytes at p in device d's memory: at once on the CPU, queued on the GPU's default stream.
void device_zero(Device d, void* p, size_t bytes);
/// Copies bytes from src (on device `from`) to dst (on device `to`); synchronous.
void device_copy(Device to, void* dst, Device from, const void* src, size_t bytes);
/// Copies `rows` rows of row_bytes each within device d's memory: row r from src + r *
/// src_pitch to dst + r * dst_pitch (a column band of a matrix, say); synchronous.
void device_copy_2d(Device d, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                    size_t rows);
/// Waits until all work queued on the device has finished (a no-op on the CPU, where
/// every op is synchronous); fails with a clear message if a queued kernel failed.
/// Timings of GPU work read the clock after this, not after the launches.
void device_synchronize(Device d);

/// An owning, move-only array of n elements of T on one device, zero-filled when made.
/// Its bytes are counted by the MemoryTracker from construction to destruction.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;  ///< an empty array on the CPU that owns nothing
  /// Counted by the MemoryTracker under the thread's MemScope kind (common/memory.h).
  DeviceArray(Device d, size_t n) : device_(d), n_(n), kind_(MemScope::current()) {
    data_ = static_cast<T*>(device_alloc(d, n * sizeof(T)));
    MemoryTracker::global().allocated(kind_, bytes());
  }
  ~DeviceArray() {
    if (data_) MemoryTracker::global().freed(kind_, bytes());
    device_free(device_, data_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept { swap(o); }  ///< takes o's memory; o is left empty
  /// Releases this array's memory and takes o's; o is left empty.
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    DeviceArray(std::move(o)).swap(*this);
    return *this;
  }
  /// Exchanges memory, size, device and counted kind with o; no data is copied.
  void swap(DeviceArray& o) noexcept {
    std::swap(device_, o.device_), std::swap(data_, o.data_), std::swap(n_, o.n_), std::swap(kind_, o.kind_);
  }

  T* data() { return data_; }              ///< first element, in the memory of device(); null when empty
  const T* data() const { return data_; }  ///< first element, in the memory of device(); null when empty
  size_t size() const { return n_; }       ///< number of elements of T
  bool empty() const { return n_ == 0; }   ///< true when the array holds no elements
  size_t bytes() const { return n_ * sizeof(T); }  ///< size() * sizeof(T)
  Device device() const { return device_; }        ///< the device whose memory holds the elements
  bool on_host() const { return device_ == Device::CPU; }  ///< true for Device::CPU, where operator[] may be used

  void zero() { device_zero(device_, data_, bytes()); }  ///< sets every element to zero bits (see device_zero)
  /// Element access for host arrays only (tests and CPU drivers).
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }  ///< as above, read-only

  /// n elements from host memory into elements [offset, offset+n), and back.
  void copy_from_host(const T* src, size_t n, size_t offset = 0) {
    device_copy(device_, data_ + offset, Device::CPU, src, n * sizeof(T));
  }
  /// n elements [offset, offset+n) of this array into host memory at dst; synchronous.
  void copy_to_host(T* dst, size_t n, size_t offset = 0) const {
    device_copy(Device::CPU, dst, device_, data_ + offset, n * sizeof(T));
  }

 private:
  Device device_ = Device::CPU;
  T* data_ = nullptr;
  size_t n_ = 0;
  MemKind kind_ = MemKind::Buffers;
};

/// A copy of host values in a new array on device d.
template <class T>
DeviceArray<T> on_device(Device d, const std::vector<T>& host) {
  DeviceArray<T> out(d, host.size());
  out.copy_from_host(host.data(), host.size());
  return out;
}

}  // namespace gpt
