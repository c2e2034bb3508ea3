// Room on the host for one more allocation: /proc/meminfo read and compared with the
// request, so that a run too large for the machine stops with a message rather than
// being killed by the kernel.
#include "common/host_memory.h"

#include <atomic>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/memory.h"

namespace gpt {

std::optional<uint64_t> available_host_bytes(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  std::string key, unit;
  uint64_t value = 0;
  std::optional<uint64_t> mem_available;
  uint64_t swap_free = 0;
  while (lines >> key >> value) {  // "MemAvailable:   23783456 kB"
    std::getline(lines, unit);     // " kB" (every size line), or nothing
    if (key == "MemAvailable:") mem_available = value * 1024;
    if (key == "SwapFree:") swap_free = value * 1024;
  }
  if (!mem_available) return std::nullopt;
  return *mem_available + swap_free;
}

void require_host_room(size_t bytes, uint64_t available) {
  if (uint64_t(bytes) + kHostCheckBytes <= available) return;
  const MemoryTracker& tracker = MemoryTracker::global();
  std::string held;
  for (size_t k = 0; k < kMemKindNames.size(); ++k)
    held += std::string(k ? ", " : "") + kMemKindNames[k] + " " + format_bytes(double(tracker.current(MemKind(k))));
  fail("out of host memory: allocating " + format_bytes(double(bytes)) + " more for " +
       kMemKindNames[size_t(MemScope::current())] + ", but the machine has " + format_bytes(double(available)) +
       " left (MemAvailable + SwapFree in /proc/meminfo), less " + format_bytes(double(kHostCheckBytes)) +
       " kept free; this process holds " + held +
       ". Shrink the run (micro_batch_size, seq_len, n_layer, n_embd) or spread it over more ranks");
}

void check_host_allocation(size_t bytes) {
  // Bytes allocated since the last look, over all threads (ranks may be threads).
  static std::atomic<uint64_t> unchecked{0};
  const uint64_t since = unchecked.fetch_add(bytes) + bytes;
  if (since < kHostCheckBytes) return;
  unchecked.store(0);
  std::ifstream file("/proc/meminfo");
  if (!file) return;
  std::stringstream text;
  text << file.rdbuf();
  if (const std::optional<uint64_t> available = available_host_bytes(text.str())) require_host_room(bytes, *available);
}

}  // namespace gpt
