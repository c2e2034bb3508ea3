// The memory tracker (common/memory.h): every DeviceArray reports its bytes under the
// kind of the MemScope in force where it was made; current and peak bytes are exact.
#include <catch2/catch.hpp>

#include <thread>
#include <utility>

#include "common/device_array.h"
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
