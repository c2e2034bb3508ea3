// The memory tracker (common/memory.h): every DeviceArray reports its bytes under the
// kind of the MemScope in force where it was made; current and peak bytes are exact.
// And the room check before host allocations, and the cgroup limit the configuration
// checks compare with (common/host_memory.h).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/device_array.h"
#include "common/error.h"
#include "common/host_memory.h"
#include "common/memory.h"
#include "tests/temp_dir.h"

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

TEST_CASE("memory: inside an Eval scope a model's own scopes count as eval", "[memory]") {
  MemoryTracker& t = MemoryTracker::global();
  const size_t params0 = t.current(MemKind::Params), eval0 = t.current(MemKind::Eval);
  {
    const MemScope eval(MemKind::Eval);
    const MemScope model(MemKind::Params);  // what a GPT2 made to evaluate says of its weights
    const DeviceArray<float> weights(Device::CPU, 100);
    CHECK(t.current(MemKind::Eval) == eval0 + 400);
    CHECK(t.current(MemKind::Params) == params0);
  }
  {
    const MemScope model(MemKind::Params);  // control: outside an Eval scope, params
    const DeviceArray<float> weights(Device::CPU, 100);
    CHECK(t.current(MemKind::Params) == params0 + 400);
  }
  CHECK(t.current(MemKind::Eval) == eval0);
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

namespace {

// A cgroup file tree in a temporary directory, removed at the end of the test.
struct FakeCgroups {
  const test::TempDir dir{"gpt_test_cgroup"};
  const std::filesystem::path& root = dir.path();
  void write(const std::string& relative, const std::string& text) const {
    const std::filesystem::path path = root / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
};

}  // namespace

TEST_CASE("host memory: a cgroup v2 limit leaves its limit less what it holds, least over its parents",
          "[memory]") {
  const FakeCgroups fake;
  const std::string root = fake.root.string();
  fake.write("cgroup.controllers", "cpu memory\n");
  fake.write("job/run/memory.max", "1000000\n");
  fake.write("job/run/memory.current", "600000\n");
  fake.write("job/run/memory.stat", "anon 400000\nfile 200000\ninactive_file 100000\n");
  fake.write("job/memory.max", "max\n");  // no limit at the parent
  fake.write("job/memory.current", "900000\n");
  const std::string self = "0::/job/run\n";
  // 1000000 - (600000 - 100000): the inactive page cache is the kernel's to drop first.
  CHECK(cgroup_room_bytes(self, root) == uint64_t(500000));
  CHECK(cgroup_memory(self, root)->limit == uint64_t(1000000));
  // A parent's tighter limit wins.
  fake.write("job/memory.max", "1200000\n");
  CHECK(cgroup_room_bytes(self, root) == uint64_t(300000));
  CHECK(cgroup_memory(self, root)->limit == uint64_t(1000000));  // the child's limit is still the lesser
  fake.write("job/memory.max", "800000\n");
  CHECK(cgroup_memory(self, root)->limit == uint64_t(800000));
  fake.write("job/memory.max", "1200000\n");
  // Usage above the limit leaves nothing; no limit anywhere is no answer.
  fake.write("job/memory.current", "1300000\n");
  CHECK(cgroup_room_bytes(self, root) == uint64_t(0));
  fake.write("job/memory.max", "max\n");
  fake.write("job/run/memory.max", "max\n");
  CHECK_FALSE(cgroup_room_bytes(self, root).has_value());
  // A container (cgroup namespace) sees its own cgroup at the root of the mount.
  fake.write("memory.max", "2000000\n");
  fake.write("memory.current", "500000\n");
  CHECK(cgroup_room_bytes("0::/docker/abc\n", root) == uint64_t(1500000));
}

TEST_CASE("host memory: cgroup v2 mounted under unified/ (hybrid), or not mounted", "[memory]") {
  const FakeCgroups fake;
  fake.write("unified/cgroup.controllers", "memory\n");
  fake.write("unified/job/memory.max", "4096\n");
  fake.write("unified/job/memory.current", "1024\n");
  CHECK(cgroup_room_bytes("1:name=systemd:/job\n0::/job\n", fake.root.string()) == uint64_t(3072));
  std::filesystem::remove(fake.root / "unified/cgroup.controllers");
  CHECK_FALSE(cgroup_room_bytes("0::/job\n", fake.root.string()).has_value());
}

TEST_CASE("host memory: a cgroup v1 limit leaves the same, least over its parents", "[memory]") {
  const FakeCgroups fake;
  const std::string root = fake.root.string();
  fake.write("unified/cgroup.controllers", "\n");  // a hybrid system: v1's memory controller wins
  fake.write("memory/batch/7/memory.limit_in_bytes", "8000000\n");
  fake.write("memory/batch/7/memory.usage_in_bytes", "3000000\n");
  fake.write("memory/batch/7/memory.stat", "cache 1000\ninactive_file 5\ntotal_inactive_file 1000000\n");
  fake.write("memory/batch/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  fake.write("memory/batch/memory.usage_in_bytes", "7000000\n");
  const std::string self = "9:cpu,cpuacct:/batch/7\n4:memory:/batch/7\n0::/batch/7\n";
  CHECK(cgroup_room_bytes(self, root) == uint64_t(8000000 - (3000000 - 1000000)));
  CHECK(cgroup_memory(self, root)->limit == uint64_t(8000000));
  // A parent's limit binds its usage, which counts its other children's too.
  fake.write("memory/batch/memory.limit_in_bytes", "7500000\n");
  CHECK(cgroup_room_bytes(self, root) == uint64_t(500000));
  CHECK(cgroup_memory(self, root)->limit == uint64_t(7500000));
  fake.write("memory/batch/memory.limit_in_bytes", "9223372036854771712\n");
  fake.write("memory/batch/7/memory.limit_in_bytes", "9223372036854771712\n");
  CHECK_FALSE(cgroup_room_bytes(self, root).has_value());
  // No memory line and no v2 line: nothing to read.
  CHECK_FALSE(cgroup_room_bytes("9:cpu:/batch/7\n", root).has_value());
}

TEST_CASE("host memory: an allocation that leaves less than the reserve free is refused, naming its kind",
          "[memory]") {
  const uint64_t available = uint64_t(1) << 30;
  CHECK_NOTHROW(require_host_room(size_t(available - kHostKeptFreeBytes), available));  // exactly fits
  const MemScope scope(MemKind::Activations);
  REQUIRE_THROWS_AS(require_host_room(size_t(available - kHostKeptFreeBytes + 1), available), UserError);
  REQUIRE_THROWS_WITH(require_host_room(size_t(available), available),
                      Catch::Contains("out of host memory: allocating 1.00 GiB more for activations") &&
                          Catch::Contains("but 1.00 GiB is left (MemAvailable + SwapFree in /proc/meminfo)") &&
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
  REQUIRE_THROWS_WITH(DeviceArray<float>(Device::CPU, n), Catch::Contains("more for activations, but "));
  CHECK(MemoryTracker::global().current(MemKind::Activations) == before);  // nothing was counted
}

// An allocation the room check lets through but the system refuses (here a limit on the
// address space, as `ulimit -v` sets, in a child process): the error still says how much,
// for what, what the process holds and what to change, not only a byte count. Control:
// the same allocation without the limit succeeds. AddressSanitizer reserves terabytes of
// address space for itself, so the limit cannot be set under it.
TEST_CASE("host memory: an allocation refused by an address-space limit names its kind and what to change",
          "[memory]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("under AddressSanitizer an address-space limit stops the sanitizer itself: nothing to check");
#else
  constexpr size_t kFloats = size_t(1) << 26;  // 256 MiB, 4 times the limit's room
  auto child = [&](bool limited) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      if (limited) {
        std::ifstream status("/proc/self/status");
        std::string key;
        long long vm_kb = -1;
        while (status >> key)
          if (key == "VmSize:") status >> vm_kb;
        const rlim_t limit = rlim_t(vm_kb + 64 * 1024) * 1024;  // 64 MiB more than now
        const rlimit as{limit, limit};
        if (vm_kb < 0 || setrlimit(RLIMIT_AS, &as) != 0) _exit(3);
      }
      try {
        const MemScope scope(MemKind::Activations);
        DeviceArray<float> big(Device::CPU, kFloats);
        _exit(0);  // allocated
      } catch (const UserError& e) {
        const std::string what = e.what();
        const bool named = what.find("allocating 256.00 MiB more for activations was refused") != std::string::npos &&
                           what.find("this process holds") != std::string::npos &&
                           what.find("micro_batch_size") != std::string::npos;
        _exit(named ? 1 : 2);
      }
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  };
  CHECK(child(true) == 1);   // refused, with the message
  CHECK(child(false) == 0);  // control: allocated
#endif
}
