/// @file
/// What the GPU kernel benchmarks (bench_gemm, bench_attention, bench_ops) share: how a
/// kernel is timed, how its inputs are made, how two outputs are compared, and how the
/// results are printed.
///
/// Timing a GPU kernel honestly takes more than a clock around a call:
/// ```
///   * the work is asynchronous, so each repetition is bracketed by CUDA events recorded
///     on the stream the work runs on, and read only after the last one completed;
///   * the first calls pay for module loading, handle creation and cold TLBs, so a few
///     warm-up calls come first and are not counted;
///   * the L2 cache (50 MB on an H100) can hold a whole layer's activations; a kernel run
///     twice on the same buffers would read them from the cache the second time and look
///     faster than it is in training, where each buffer arrives cold. So before every
///     repetition a buffer several times the L2's size is written (the flush), and where a
///     working set is smaller than twice the L2 the inputs are also rotated among several
///     copies (rotation_sets): each copy has left the cache before it is used again, even
///     without the flush (--no-flush);
///   * one repetition is noisy (clocks, other work): the median of N is reported, with the
///     minimum and maximum so the spread is visible;
///   * inputs are random, never zeros: zeros hide unwritten outputs and wrong indexing, and
///     multiplying zeros can even run faster than real data (lower switching power, higher
///     clocks).
/// ```
/// Random values come from a counter-based hash of (seed, index), generated on the device:
/// any element of any buffer is reproducible without storing a generator state, and
/// filling a gigabyte takes milliseconds instead of a host loop and a copy.
///
/// Everything here is header-only (one translation unit per benchmark program).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/bf16.h"
#include "common/device.h"
#include "common/precision.h"
#include "kernels/cuda/common.cuh"

namespace gpt::bench {

// ---- the device ---------------------------------------------------------------------

/// What the benchmarks print about the current CUDA device and judge their numbers against.
struct DeviceInfo {
  std::string name;  ///< the device's product name ("NVIDIA H100 80GB HBM3")
  /// major: compute capability, the number before the dot (9 on an H100).
  int major = 0, minor = 0;  ///< minor: compute capability, the number after the dot (0 on an H100)
  int sms = 0;  ///< streaming multiprocessors
  double sm_clock_ghz = 0;           ///< peak SM clock
  /// memory_clock_khz: the device memory's peak clock, in kHz.
  int memory_clock_khz = 0, memory_bus_bits = 0;  ///< bus width; both as the device reports them (0: not reported)
  double dram_bandwidth_gbs = 0;     ///< theoretical: 2 transfers per clock * clock * bus width
  /// l2_bytes: size of the L2 cache (what L2Flush and rotation_sets work from).
  size_t l2_bytes = 0, memory_bytes = 0;  ///< memory_bytes: the device's global memory, in bytes
  double bf16_dense_tflops = 0;      ///< datasheet tensor-core peak, 0 where not known
};

/// The current device's properties, from the runtime plus the datasheet table; a failed
/// CUDA query throws std::runtime_error.
inline DeviceInfo device_info() {
  int dev = 0;
  GPT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  GPT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  // Clock rates left cudaDeviceProp in CUDA 13; the attributes remain (kHz).
  int sm_khz = 0, mem_khz = 0, bus_bits = 0;
  GPT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, dev));
  GPT_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev));
  GPT_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
  DeviceInfo d;
  d.name = prop.name;
  d.major = prop.major;
  d.minor = prop.minor;
  d.sms = prop.multiProcessorCount;
  d.sm_clock_ghz = sm_khz * 1e-6;
  // DDR/HBM move data on both clock edges: bytes/s = 2 * clock * bus width / 8.
  d.memory_clock_khz = mem_khz;
  d.memory_bus_bits = bus_bits;
  d.dram_bandwidth_gbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) * 1e-9;
  d.l2_bytes = size_t(prop.l2CacheSize);
  d.memory_bytes = prop.totalGlobalMem;
  // The datasheet table the trainer's MFU uses (common/device.cpp). A datasheet figure
  // is a lead, not a ceiling: the benchmarks measure theirs (cuBLAS for products, a
  // device-to-device copy for memory) and compare against that.
  d.bf16_dense_tflops = gpt::device_peak_flops(gpt::Device::CUDA, gpt::Precision::BF16).value_or(0.0) / 1e12;
  return d;
}

/// The device lines every benchmark starts with: name, SMs, clock, memory, L2, datasheet
/// peak, and the CUDA runtime and driver versions.
inline void print_device(const DeviceInfo& d, FILE* f = stdout) {
  int runtime = 0, driver = 0;
  GPT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  GPT_CUDA_CHECK(cudaDriverGetVersion(&driver));
  std::fprintf(f, "device      %s (sm_%d%d, %d SMs, %.2f GHz peak clock)\n", d.name.c_str(), d.major,
               d.minor, d.sms, d.sm_clock_ghz);
  std::fprintf(f, "memory      %.1f GiB, theoretical %.0f GB/s, L2 %.1f MiB\n",
               double(d.memory_bytes) / (1 << 30), d.dram_bandwidth_gbs, double(d.l2_bytes) / (1 << 20));
  if (d.bf16_dense_tflops > 0)
    std::fprintf(f, "bf16 peak   %.1f TFLOP/s dense (datasheet; a lead, not a measurement)\n",
                 d.bf16_dense_tflops);
  std::fprintf(f, "CUDA        runtime %d.%d, driver %d.%d\n", runtime / 1000, (runtime % 1000) / 10,
               driver / 1000, (driver % 1000) / 10);
}

/// Bytes of device memory free now.
inline size_t free_device_bytes() {
  size_t free_b = 0, total_b = 0;
  GPT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b;
}

// ---- device buffers -------------------------------------------------------------------

/// An owned device array of n elements of T (move-only). T may be gpt::bf16.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates n elements, uninitialised (none for n = 0); a failed cudaMalloc throws
  /// std::runtime_error.
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n > 0) GPT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
  }
  /// Takes o's array; o is left empty.
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  /// Swaps the arrays: o frees this one's former array when it goes.
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);  // no throw from a destructor; a failure here changes nothing
  }
  T* data() const { return ptr_; }  ///< device pointer; null when empty
  size_t size() const { return n_; }  ///< elements
  size_t bytes() const { return n_ * sizeof(T); }  ///< size() * sizeof(T)

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// ---- random inputs --------------------------------------------------------------------

namespace detail {

/// SplitMix64's finaliser: a bijection on 64 bits whose outputs pass statistical tests
/// even for consecutive inputs, so hash(seed, i) can stand in for "the i-th random number".
__host__ __device__ inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/// Uniform in (0, 1): 24 random bits, centred in their interval ((k + 0.5) / 2^24), so that
/// lo + (hi - lo) u is never exactly lo, hi, or (for lo = -hi) zero.
__host__ __device__ inline float uniform01(uint64_t seed, uint64_t i) {
  const uint64_t bits = mix64(mix64(seed) ^ (i * 0x9e3779b97f4a7c15ull)) >> 40;
  return (float(bits) + 0.5f) * (1.0f / 16777216.0f);
}

/// x as the element type a fill kernel writes: float stays float.
template <class T>
__device__ inline T store_as(float x) {
  return x;
}
/// x rounded to the nearest bf16.
template <>
__device__ inline __nv_bfloat16 store_as<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/// p[i] = lo + (hi - lo) uniform01(seed, i) for i < n, grid-stride (fill_uniform launches it).
template <class T>
__global__ void fill_uniform_kernel(T* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = store_as<T>(lo + (hi - lo) * uniform01(seed, i));
}

/// Integers uniform in [0, range): tokens, targets.
template <class I>
__global__ void fill_index_kernel(I* p, size_t n, uint64_t seed, int range) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = I(min(int(uniform01(seed, i) * float(range)), range - 1));
}

/// A grid-stride launch: enough blocks to fill the device, each thread loops over the rest.
inline unsigned fill_blocks(size_t n) { return unsigned(std::clamp<size_t>((n + 255) / 256, 1, 8192)); }

}  // namespace detail

/// p[i] = uniform in (lo, hi), a function of (seed, i). T: float, __nv_bfloat16 or gpt::bf16.
template <class T>
void fill_uniform(T* p, size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f, cudaStream_t stream = nullptr) {
  if (n == 0) return;
  auto* q = gpt::cuda::device_ptr(p);  ///< gpt::bf16 -> __nv_bfloat16, float stays float
  detail::fill_uniform_kernel<<<detail::fill_blocks(n), 256, 0, stream>>>(q, n, seed, lo, hi);
  GPT_CUDA_CHECK_LAUNCH();
}

/// p[i] = an integer uniform in [0, range).
template <class I>
void fill_indices(I* p, size_t n, uint64_t seed, int range, cudaStream_t stream = nullptr) {
  if (n == 0) return;
  detail::fill_index_kernel<<<detail::fill_blocks(n), 256, 0, stream>>>(p, n, seed, range);
  GPT_CUDA_CHECK_LAUNCH();
}

/// Every byte 0xFF: NaN in fp32 (0xFFFFFFFF) and in bf16 (0xFFFF). An output poisoned
/// before a run and compared after it shows every element the kernel failed to write.
inline void poison(void* p, size_t bytes, cudaStream_t stream = nullptr) {
  GPT_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, stream));
}

// ---- comparing two outputs ---------------------------------------------------------------

/// The error of `out` against `ref`, in the max norm: max_i |out_i - ref_i| / max_i |ref_i|.
/// (An element-wise relative error would explode where ref_i happens to be near zero.)
/// A NaN or an infinity anywhere in either makes the result non-finite.
struct ErrorStats {
  /// max_abs_diff: max_i |out_i - ref_i|.
  double max_abs_diff = 0, max_abs_ref = 0;  ///< max_abs_ref: max_i |ref_i|
  /// max_abs_diff / max_abs_ref (the absolute difference when ref is all zeros); NaN when
  /// either maximum is not finite.
  double relative() const {
    if (!std::isfinite(max_abs_diff) || !std::isfinite(max_abs_ref)) return NAN;
    return max_abs_ref > 0 ? max_abs_diff / max_abs_ref : max_abs_diff;
  }
};

namespace detail {

__device__ inline float load_float(float x) { return x; }  ///< an element as float, for compare_kernel
__device__ inline float load_float(__nv_bfloat16 x) { return __bfloat162float(x); }  ///< exact conversion

/// Non-negative floats (and NaNs with the sign bit cleared) order like their bit patterns
/// read as unsigned integers, with every NaN above +inf. So an integer max of the bits is a
/// max that, unlike fmaxf, does not drop NaNs; atomicMax on unsigned combines the blocks.
__device__ inline unsigned abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

/// Grid-stride max of |out_i - ref_i| and of |ref_i| over n elements, as abs_bits, merged
/// into result[0] and result[1] (zeroed beforehand) with atomicMax. Needs blocks of whole
/// warps (full-mask shuffles).
template <class T>
__global__ void compare_kernel(const T* out, const T* ref, size_t n, unsigned* result /* [2] */) {
  unsigned diff = 0, mag = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float o = load_float(out[i]), r = load_float(ref[i]);
    diff = max(diff, abs_bits(o - r));  // NaN when either is NaN, or both are the same infinity
    mag = max(mag, abs_bits(r));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    diff = max(diff, __shfl_xor_sync(0xffffffffu, diff, offset));
    mag = max(mag, __shfl_xor_sync(0xffffffffu, mag, offset));
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(&result[0], diff);
    atomicMax(&result[1], mag);
  }
}

}  // namespace detail

/// Compares n elements of two device arrays (float, __nv_bfloat16 or gpt::bf16); synchronises.
template <class T>
ErrorStats compare(const T* out, const T* ref, size_t n) {
  DeviceBuffer<unsigned> result(2);
  GPT_CUDA_CHECK(cudaMemset(result.data(), 0, result.bytes()));
  if (n > 0) {
    detail::compare_kernel<<<detail::fill_blocks(n), 256>>>(gpt::cuda::device_ptr(out), gpt::cuda::device_ptr(ref),
                                                            n, result.data());
    GPT_CUDA_CHECK_LAUNCH();
  }
  unsigned bits[2];
  GPT_CUDA_CHECK(cudaMemcpy(bits, result.data(), sizeof bits, cudaMemcpyDeviceToHost));
  float f[2];
  std::memcpy(f, bits, sizeof f);
  return ErrorStats{f[0], f[1]};
}

/// The verdict printed next to an error: "ok" within `tolerance`, else "WRONG" ("NaN" when
/// some element was not finite: typically an output element nobody wrote).
inline const char* verdict(double relative_error, double tolerance) {
  if (std::isnan(relative_error)) return "NaN";
  return relative_error <= tolerance ? "ok" : "WRONG";
}

// ---- timing ---------------------------------------------------------------------------------

/// How time_on_device measures: warm-up, repetitions, time budget, L2 flush.
struct TimingOptions {
  int warmup = 2;         ///< uncounted calls first
  int reps = 20;          ///< counted calls, at most
  int min_reps = 3;       ///< counted calls, at least (the time budget may lower reps to this)
  double budget_s = 2.0;  ///< aim for at most this much time per measurement
  bool flush = true;      ///< write a buffer larger than the L2 before every repetition
};

/// One measurement: the spread of the repetitions' times (NaN until measured).
struct Timing {
  double median_ms = NAN, min_ms = NAN, max_ms = NAN;
  int reps = 0;  ///< counted repetitions the figures come from
  /// @var median_ms
  /// median of the repetitions' times, in milliseconds: the figure reported
  /// @var min_ms
  /// fastest repetition, in milliseconds
  /// @var max_ms
  /// slowest repetition, in milliseconds
};

/// Evicts the L2 by writing a buffer several times its size (memset, so the flush is a
/// few tens of microseconds of pure bandwidth). Written lines replace whatever the
/// previous repetition left, inputs and outputs alike.
class L2Flush {
 public:
  /// Allocates the buffer: 4 x l2_bytes, at least 64 MiB.
  explicit L2Flush(size_t l2_bytes) : buffer_(std::max<size_t>(4 * l2_bytes, size_t(64) << 20)) {}
  /// Queues the flush on `stream` (asynchronous; it completes before later work on that stream).
  void operator()(cudaStream_t stream) {
    // A value that changes each time: the flush can never be optimised into a no-op.
    GPT_CUDA_CHECK(cudaMemsetAsync(buffer_.data(), ++value_ & 0xff, buffer_.bytes(), stream));
  }

 private:
  DeviceBuffer<unsigned char> buffer_;
  int value_ = 0;
};

/// How many copies of a working set of `bytes` to cycle through so that a copy is used
/// again only after at least 2 x L2 bytes of other copies were touched since:
/// (sets - 1) * bytes >= 2 * L2. One copy when the working set is that large already.
inline int rotation_sets(size_t working_set_bytes, size_t l2_bytes, int max_sets = 16) {
  if (working_set_bytes == 0 || working_set_bytes >= 2 * l2_bytes) return 1;
  const size_t needed = (2 * l2_bytes + working_set_bytes - 1) / working_set_bytes + 1;
  return int(std::min<size_t>(needed, size_t(max_sets)));
}

namespace detail {
/// Owned CUDA events.
class Events {
 public:
  /// Creates n events (default flags: timing enabled).
  explicit Events(int n) : events_(size_t(n)) {
    for (auto& e : events_) GPT_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (auto e : events_)
      if (e) cudaEventDestroy(e);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t operator[](int i) const { return events_[size_t(i)]; }  ///< event i, 0 <= i < n (unchecked)

 private:
  std::vector<cudaEvent_t> events_;
};

/// Milliseconds between two completed events (about 0.5 us resolution).
inline float elapsed_ms(cudaEvent_t start, cudaEvent_t stop) {
  float ms = 0.f;
  GPT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms;
}
}  // namespace detail

/// Times `launch(call)` on `stream`: call numbers 0, 1, 2, ... (use them to rotate buffers).
/// `launch` must queue its work on `stream` (or on the legacy default stream when stream
/// is null) and must not synchronise unless the operation itself does.
///
/// Warm-up calls run first; the last one is timed to size the run: the number of counted
/// repetitions is budget / (that time), clamped to [min_reps, reps], so a kernel that takes
/// a second is repeated 3 times and one that takes 10 us the full `reps`. Each repetition:
/// flush (outside the events), event, launch, event. All repetitions are queued before the
/// host waits once, so the host never opens gaps between them.
template <class Launch>
Timing time_on_device(Launch&& launch, const TimingOptions& opt, L2Flush& flush, cudaStream_t stream = nullptr) {
  detail::Events warm(2);
  int call = 0;
  double estimate_ms = 0;
  for (int w = 0; w < std::max(opt.warmup, 1); ++w) {
    if (opt.flush) flush(stream);
    GPT_CUDA_CHECK(cudaEventRecord(warm[0], stream));
    launch(call++);
    GPT_CUDA_CHECK(cudaEventRecord(warm[1], stream));
    GPT_CUDA_CHECK(cudaEventSynchronize(warm[1]));
    estimate_ms = detail::elapsed_ms(warm[0], warm[1]);
  }
  int reps = opt.reps;
  if (estimate_ms > 0) reps = int(std::min<double>(reps, std::floor(opt.budget_s * 1e3 / estimate_ms)));
  reps = std::max(reps, std::min(opt.min_reps, opt.reps));
  reps = std::max(reps, 1);

  detail::Events start(reps), stop(reps);
  for (int r = 0; r < reps; ++r) {
    if (opt.flush) flush(stream);
    GPT_CUDA_CHECK(cudaEventRecord(start[r], stream));
    launch(call++);
    GPT_CUDA_CHECK(cudaEventRecord(stop[r], stream));
  }
  GPT_CUDA_CHECK(cudaEventSynchronize(stop[reps - 1]));
  GPT_CUDA_CHECK_LAUNCH();

  std::vector<double> ms(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) ms[size_t(r)] = detail::elapsed_ms(start[r], stop[r]);
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.reps = reps;
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  const size_t mid = ms.size() / 2;
  t.median_ms = ms.size() % 2 ? ms[mid] : 0.5 * (ms[mid - 1] + ms[mid]);
  return t;
}

// ---- command line -----------------------------------------------------------------------

/// A small parser for "--name value", "--name=value" and "--flag". Each accessor consumes
/// what it reads; finish() rejects whatever is left. Errors throw std::invalid_argument
/// naming the program and the argument.
class Args {
 public:
  /// Keeps argv[1..argc) to be consumed and argv[0]'s last path component as the program's name.
  Args(int argc, char** argv) : program_(argc > 0 ? argv[0] : "bench") {
    const size_t slash = program_.rfind('/');
    if (slash != std::string::npos) program_ = program_.substr(slash + 1);
    for (int i = 1; i < argc; ++i) rest_.emplace_back(argv[i]);
  }
  const std::string& program() const { return program_; }  ///< the name errors start with ("bench_gemm")

  /// Whether the flag `name` ("--no-flush") was given; consumes one occurrence.
  bool flag(const std::string& name) {
    for (size_t i = 0; i < rest_.size(); ++i)
      if (rest_[i] == name) {
        rest_.erase(rest_.begin() + long(i));
        return true;
      }
    return false;
  }

  /// The value of --name, or `fallback` when absent.
  std::string value(const std::string& name, const std::string& fallback = "") {
    for (size_t i = 0; i < rest_.size(); ++i) {
      if (rest_[i] == name) {
        if (i + 1 >= rest_.size()) fail(name, "needs a value");
        std::string v = rest_[i + 1];
        rest_.erase(rest_.begin() + long(i), rest_.begin() + long(i) + 2);
        return v;
      }
      if (rest_[i].rfind(name + "=", 0) == 0) {
        std::string v = rest_[i].substr(name.size() + 1);
        rest_.erase(rest_.begin() + long(i));
        return v;
      }
    }
    return fallback;
  }

  /// The value of --name as a whole number in [lo, hi], or `fallback` when absent or empty;
  /// anything else throws.
  long integer(const std::string& name, long fallback, long lo, long hi) {
    const std::string v = value(name);
    if (v.empty()) return fallback;
    char* end = nullptr;
    const long x = std::strtol(v.c_str(), &end, 10);
    if (*end != '\0' || x < lo || x > hi)
      fail(name, "'" + v + "' is not a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }

  /// The value of --name as a number in [lo, hi], or `fallback` when absent or empty; anything
  /// else (NaN included) throws.
  double real(const std::string& name, double fallback, double lo, double hi) {
    const std::string v = value(name);
    if (v.empty()) return fallback;
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (*end != '\0' || !(x >= lo && x <= hi))
      fail(name, "'" + v + "' is not a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }

  /// A comma-separated list ("v3,v4"); empty when the option is absent.
  std::vector<std::string> list(const std::string& name) {
    std::vector<std::string> items;
    const std::string v = value(name);
    size_t start = 0;
    while (start < v.size()) {
      size_t comma = v.find(',', start);
      if (comma == std::string::npos) comma = v.size();
      if (comma > start) items.push_back(v.substr(start, comma - start));
      start = comma + 1;
    }
    return items;
  }

  /// The options every benchmark shares: --reps, --warmup, --seconds, --no-flush.
  TimingOptions timing(int default_reps) {
    TimingOptions t;
    t.reps = int(integer("--reps", default_reps, 1, 100000));
    t.warmup = int(integer("--warmup", t.warmup, 1, 1000));
    t.budget_s = real("--seconds", t.budget_s, 0.0, 3600.0);
    t.flush = !flag("--no-flush");
    return t;
  }

  /// Throws for the first argument nothing consumed: call it after the last accessor.
  void finish() const {
    if (!rest_.empty()) fail(rest_.front(), "unknown argument");
  }

  /// Throws std::invalid_argument "<program>: <name>: <why>".
  [[noreturn]] void fail(const std::string& name, const std::string& why) const {
    throw std::invalid_argument(program_ + ": " + name + ": " + why);
  }

 private:
  std::string program_;
  std::vector<std::string> rest_;
};

// ---- output ---------------------------------------------------------------------------------

/// printf into a std::string.
template <class... Xs>
std::string format(const char* fmt, Xs... xs) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, xs...);
  return buf;
}

/// x with `decimals` digits after the point; "-" for NaN (a figure not measured).
inline std::string fixed(double x, int decimals) {
  if (std::isnan(x)) return "-";
  return format("%.*f", decimals, x);
}
/// x as 1.2e-03, for errors; "NaN" for NaN.
inline std::string scientific(double x) { return std::isnan(x) ? "NaN" : format("%.1e", x); }

/// A table: header, then rows, columns as wide as their widest cell; text columns (the
/// first `left_columns`) left-aligned, numbers right-aligned. A row may end in a note
/// (why it was skipped, what failed): printed after its last non-empty cell, it does not
/// widen any column.
class Table {
 public:
  /// The columns, by their headers; the first `left_columns` hold text.
  explicit Table(std::vector<std::string> headers, size_t left_columns = 1)
      : headers_(std::move(headers)), left_(left_columns) {}
  /// Appends a row: cells beyond the headers are dropped, missing ones are empty.
  void add(std::vector<std::string> cells, std::string note = "") {
    cells.resize(headers_.size());
    rows_.push_back({std::move(cells), std::move(note)});
  }
  void separator() { rows_.push_back({}); }  ///< a row without cells prints as a blank line
  /// Prints the header, a rule of dashes and the rows; flushes f.
  void print(FILE* f = stdout) const {
    std::vector<size_t> width(headers_.size());
    for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
    for (const auto& row : rows_)
      for (size_t c = 0; c < row.cells.size(); ++c) width[c] = std::max(width[c], row.cells[c].size());
    print_row(f, {headers_, ""}, width);
    size_t total = 0;
    for (size_t w : width) total += w + 2;
    std::fprintf(f, "%s\n", std::string(total > 2 ? total - 2 : 0, '-').c_str());
    for (const auto& row : rows_) {
      if (row.cells.empty())
        std::fprintf(f, "\n");
      else
        print_row(f, row, width);
    }
    std::fflush(f);
  }

 private:
  struct Row {
    std::vector<std::string> cells;
    std::string note;
  };
  void print_row(FILE* f, const Row& row, const std::vector<size_t>& width) const {
    size_t last = row.cells.size();
    while (last > 0 && row.cells[last - 1].empty()) --last;
    std::string line;
    for (size_t c = 0; c < last; ++c) {
      const std::string pad(width[c] - row.cells[c].size(), ' ');
      line += c < left_ ? row.cells[c] + pad : pad + row.cells[c];
      line += "  ";
    }
    line += row.note;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(f, "%s\n", line.c_str());
  }
  std::vector<std::string> headers_;
  size_t left_;
  std::vector<Row> rows_;
};

/// One JSON object on one line, built field by field (strings here never need more than
/// quote and backslash escaping). Non-finite numbers become null.
class JsonLine {
 public:
  /// Appends "key": "v" (v escaped); returns *this, so fields chain. The key is written as is.
  JsonLine& add(const std::string& key, const std::string& v) {
    std::string esc;
    for (char ch : v) {
      if (ch == '"' || ch == '\\') esc += '\\';
      esc += ch;
    }
    return raw(key, "\"" + esc + "\"");
  }
  JsonLine& add(const std::string& key, const char* v) { return add(key, std::string(v)); }  ///< as a string
  /// Appends "key": v with 6 significant digits, or null when v is not finite.
  JsonLine& add(const std::string& key, double v) {
    return raw(key, std::isfinite(v) ? format("%.6g", v) : std::string("null"));
  }
  JsonLine& add(const std::string& key, int v) { return raw(key, std::to_string(v)); }  ///< exact integer
  JsonLine& add(const std::string& key, bool v) { return raw(key, v ? "true" : "false"); }  ///< true or false
  std::string str() const { return "{" + body_ + "}"; }  ///< the object, without a newline

 private:
  JsonLine& raw(const std::string& key, const std::string& v) {
    if (!body_.empty()) body_ += ", ";
    body_ += "\"" + key + "\": " + v;
    return *this;
  }
  std::string body_;
};

/// The timing line every benchmark prints under its device line.
inline void print_timing(const TimingOptions& t, FILE* f = stdout) {
  std::fprintf(f, "timing      median of up to %d repetitions (budget %.1f s each), %d warm-up, L2 flush %s\n", t.reps,
               t.budget_s, t.warmup, t.flush ? "on" : "off");
}

/// The --json FILE stream of a benchmark (closed when path is empty); a file that cannot
/// be written is a bad argument.
inline std::ofstream open_json(const char* program, const std::string& path) {
  std::ofstream json;
  if (path.empty()) return json;
  json.open(path, std::ios::trunc);
  if (!json) throw std::invalid_argument(std::string(program) + ": --json: cannot write '" + path + "'");
  return json;
}

// ---- the program's frame ------------------------------------------------------------------

/// A benchmark's main: runs run(argc, argv); bad arguments (std::invalid_argument) print
/// the message and the usage and exit 2, any other failure exits 1 with the program's name.
template <class Run, class Usage>
int bench_main(const char* program, int argc, char** argv, Run&& run, Usage&& print_usage) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    print_usage(stderr);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

/// Whether a CUDA device is visible; says so on stderr when not.
inline bool have_device(const char* program) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "%s: no CUDA device\n", program);
    return false;
  }
  return true;
}

}  // namespace gpt::bench
