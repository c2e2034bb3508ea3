// Room on the host for one more allocation: /proc/meminfo and the memory cgroup read
// and compared with the request, so that a run too large for the machine (or for its
// container) stops with a message rather than being killed by the kernel.
#include "common/host_memory.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

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

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::optional<uint64_t> read_number(const std::string& path) {
  const std::optional<std::string> text = read_text(path);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;  // v2's "max": no limit
  return value;
}

// A "key value" line of a memory.stat file.
std::optional<uint64_t> stat_field(const std::string& stat_file, const std::string& key) {
  const std::optional<std::string> text = read_text(stat_file);
  if (!text) return std::nullopt;
  std::istringstream lines(*text);
  std::string name;
  uint64_t value = 0;
  while (lines >> name >> value)
    if (name == key) return value;
  return std::nullopt;
}

// Limits this high are "no limit" (v1 writes the largest page-aligned int64).
constexpr uint64_t kNoLimit = uint64_t(1) << 60;

uint64_t room_under(uint64_t limit, uint64_t usage, uint64_t inactive_file) {
  const uint64_t held = usage > inactive_file ? usage - inactive_file : 0;
  return limit > held ? limit - held : 0;
}

// The directory of cgroup `path` (from /proc/self/cgroup) in the hierarchy mounted at
// `mount`: there if it exists, else the mount itself (a cgroup namespace shows a
// container its own cgroup as the root).
std::string cgroup_dir(const std::string& mount, const std::string& path) {
  std::error_code ec;
  if (!path.empty() && path != "/" && std::filesystem::is_directory(mount + path, ec)) return mount + path;
  return mount;
}

// Where a cgroup version keeps its limit, its usage (the cgroup's and its children's)
// and, in memory.stat, its inactive file pages.
struct CgroupFiles {
  const char* limit;
  const char* usage;
  const char* inactive_file;
};
constexpr CgroupFiles kCgroupV1{"memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"};
constexpr CgroupFiles kCgroupV2{"memory.max", "memory.current", "inactive_file"};

// The least room and the least limit over the cgroup at `dir` and its parents up to the
// mount, each with a limit: a parent's limit binds its children's usage together.
std::optional<CgroupMemory> least_over_parents(const CgroupFiles& files, const std::string& mount,
                                               const std::string& dir) {
  std::optional<CgroupMemory> least;
  for (std::filesystem::path d = dir;; d = d.parent_path()) {
    const std::optional<uint64_t> limit = read_number((d / files.limit).string());
    const std::optional<uint64_t> usage = read_number((d / files.usage).string());
    if (limit && usage && *limit < kNoLimit) {
      const uint64_t inactive = stat_field((d / "memory.stat").string(), files.inactive_file).value_or(0);
      const uint64_t room = room_under(*limit, *usage, inactive);
      if (!least) least = CgroupMemory{room, *limit};
      least->room = std::min(least->room, room);
      least->limit = std::min(least->limit, *limit);
    }
    if (d.string().size() <= mount.size() || !d.has_parent_path()) break;
  }
  return least;
}

}  // namespace

std::optional<CgroupMemory> cgroup_memory(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  // Lines "id:controllers:path": v1's memory controller by name, v2's single "0::path".
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  std::optional<std::string> v1_path, v2_path;
  while (std::getline(lines, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');)
      if (name == "memory") v1_path = path;
  }
  std::error_code ec;
  const std::string v1_mount = cgroup_root + "/memory";
  if (v1_path && std::filesystem::is_directory(v1_mount, ec))
    return least_over_parents(kCgroupV1, v1_mount, cgroup_dir(v1_mount, *v1_path));
  if (!v2_path) return std::nullopt;
  for (const std::string& mount : {cgroup_root, cgroup_root + "/unified"})
    if (std::filesystem::exists(mount + "/cgroup.controllers", ec))
      return least_over_parents(kCgroupV2, mount, cgroup_dir(mount, *v2_path));
  return std::nullopt;
}

std::optional<uint64_t> cgroup_room_bytes(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  const std::optional<CgroupMemory> memory = cgroup_memory(proc_self_cgroup, cgroup_root);
  return memory ? std::optional<uint64_t>(memory->room) : std::nullopt;
}

namespace {

std::optional<CgroupMemory> own_cgroup_memory() {
  const std::optional<std::string> self = read_text("/proc/self/cgroup");
  return self ? cgroup_memory(*self, "/sys/fs/cgroup") : std::nullopt;
}

}  // namespace

std::optional<HostRoom> host_capacity() {
  std::optional<HostRoom> capacity;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) capacity = HostRoom{uint64_t(pages) * uint64_t(page_size), "this machine's memory"};
  if (const std::optional<CgroupMemory> cgroup = own_cgroup_memory())
    if (!capacity || cgroup->limit < capacity->bytes)
      capacity = HostRoom{cgroup->limit, "this process's memory cgroup limit"};
  return capacity;
}

std::optional<HostRoom> host_room() {
  std::optional<HostRoom> room;
  if (const std::optional<std::string> meminfo = read_text("/proc/meminfo"))
    if (const std::optional<uint64_t> bytes = available_host_bytes(*meminfo))
      room = HostRoom{*bytes, "MemAvailable + SwapFree in /proc/meminfo"};
  if (const std::optional<CgroupMemory> cgroup = own_cgroup_memory())
    if (!room || cgroup->room < room->bytes)
      room = HostRoom{cgroup->room, "under this process's memory cgroup limit, its inactive file pages counted free"};
  return room;
}

void require_host_room(size_t bytes, uint64_t available, const std::string& source) {
  if (uint64_t(bytes) + kHostKeptFreeBytes <= available) return;
  const std::string held = MemoryTracker::global().held_now();
  fail("out of host memory: allocating " + format_bytes(double(bytes)) + " more for " +
       kMemKindNames[size_t(MemScope::current())] + ", but " + format_bytes(double(available)) + " is left (" +
       source + "), less " + format_bytes(double(kHostKeptFreeBytes)) + " kept free; this process holds " + held +
       ". Shrink the run (micro_batch_size, seq_len, n_layer, n_embd) or spread it over more ranks");
}

void check_host_allocation(size_t bytes) {
  // Bytes allocated since the last look, over all threads (ranks may be threads).
  static std::atomic<uint64_t> unchecked{0};
  const uint64_t since = unchecked.fetch_add(bytes) + bytes;
  if (since < kHostCheckBytes) return;
  unchecked.store(0);
  if (const std::optional<HostRoom> room = host_room()) require_host_room(bytes, room->bytes, room->source);
}

}  // namespace gpt
