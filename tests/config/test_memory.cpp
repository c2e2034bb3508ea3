// The memory tracker (common/memory.h): every DeviceArray reports its bytes under the
// kind of the MemScope in force where it was made; current and peak bytes are exact.
// And the room check before host allocations (common/host_memory.h).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "common/device_array.h"
#include "common/error.h"
#include "common/host_memory.h"
#include "common/memory.h"

using namespace gpt;

TEST_CASE("memory: arrays report their bytes under their scope's kind, exactly", "[memory]") {
  MemoryTracker& t = MemoryTracker::global();
  t.reset_peaks();
  const size_t grads0 = t.current(MemKind::Grads), params0 = t.current(MemKind::Params);
  const size_t buffers0 = t.current(MemKind::Buffers);
  {
    DeviceArray<float> g;
    {
      const MemScope scope(MemKind::Grads);
      g = DeviceArray<float>(Device::CPU, 1000);
      {
        const MemScope inner(MemKind::Params);  // scopes nest
        DeviceArray<double> p(Device::CPU, 10);
        CHECK(t.current(MemKind::Params) == params0 + 80);
      }
      CHECK(t.current(MemKind::Params) == params0);  // freed
    }
    CHECK(t.current(MemKind::Grads) == grads0 + 4000);  // the scope ended, the array lives on
    DeviceArray<float> moved = std::move(g);            // moving transfers, never counts twice
    CHECK(t.current(MemKind::Grads) == grads0 + 4000);
    // No scope on another thread: communication scratch and the like are buffers.
    std::thread([&] {
      DeviceArray<char> scratch(Device::CPU, 123);
      CHECK(t.current(MemKind::Buffers) == buffers0 + 123);
    }).join();
  }
  CHECK(t.current(MemKind::Grads) == grads0);
  CHECK(t.peak(MemKind::Grads) == grads0 + 4000);
  CHECK(t.peak(MemKind::Params) == params0 + 80);
  CHECK(t.peak(MemKind::Buffers) == buffers0 + 123);
  CHECK(t.peaks().get(MemKind::Grads) == grads0 + 4000);
}

TEST_CASE("host memory: the room is MemAvailable + SwapFree, in bytes", "[memory]") {
  const std::string meminfo =
      "MemTotal:       24684096 kB\nMemFree:        19517612 kB\nMemAvailable:   23783456 kB\n"
      "SwapTotal:       1000000 kB\nSwapFree:          999000 kB\nHugePages_Total:       0\n";
  CHECK(available_host_bytes(meminfo) == (uint64_t(23783456) + 999000) * 1024);
  // No swap line counts as no swap; no MemAvailable line means the room is unknown.
  CHECK(available_host_bytes("MemAvailable: 100 kB\n") == uint64_t(102400));
  CHECK_FALSE(available_host_bytes("MemTotal: 100 kB\nMemFree: 50 kB\n").has_value());
  CHECK_FALSE(available_host_bytes("").has_value());
}

TEST_CASE("host memory: an allocation that leaves less than the reserve free is refused, naming its kind",
          "[memory]") {
  const uint64_t available = uint64_t(1) << 30;
  CHECK_NOTHROW(require_host_room(size_t(available - kHostCheckBytes), available));  // exactly fits
  const MemScope scope(MemKind::Activations);
  REQUIRE_THROWS_AS(require_host_room(size_t(available - kHostCheckBytes + 1), available), UserError);
  REQUIRE_THROWS_WITH(require_host_room(size_t(available), available),
                      Catch::Contains("out of host memory: allocating 1.00 GiB more for activations") &&
                          Catch::Contains("the machine has 1.00 GiB left") &&
                          Catch::Contains("this process holds params ") && Catch::Contains("micro_batch_size"));
}

TEST_CASE("host memory: a DeviceArray larger than the machine fails before a page is touched", "[memory]") {
  std::ifstream file("/proc/meminfo");
  std::stringstream text;
  text << file.rdbuf();
  const std::optional<uint64_t> available = available_host_bytes(text.str());
  if (!available) {
    WARN("no MemAvailable in /proc/meminfo: nothing to check on this system");
    return;
  }
  // More than the machine can give: without the check, the allocation either fails with
  // a message that names no kind or (overcommit) succeeds and its zero-fill is killed.
  const MemScope scope(MemKind::Activations);
  const size_t before = MemoryTracker::global().current(MemKind::Activations);
  const size_t n = size_t(*available / sizeof(float)) + 1;
  REQUIRE_THROWS_WITH(DeviceArray<float>(Device::CPU, n), Catch::Contains("more for activations, but the machine has"));
  CHECK(MemoryTracker::global().current(MemKind::Activations) == before);  // nothing was counted
}
