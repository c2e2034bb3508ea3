/// @file
/// Room on the host for one more allocation, asked before it is made. Linux lends
/// memory it does not have (overcommit): an allocation too large for the machine
/// succeeds, and the process is killed without a word when its pages are first
/// touched (DeviceArray zero-fills them at once). A run whose activations outgrow the
/// machine (a deep model, a large micro-batch) would die that way; instead it stops
/// with an error that names what it was allocating and what it already holds.
///
/// The room is the least of what the kernel reports it can still give, MemAvailable (free
/// memory plus the page cache it can drop) plus SwapFree from /proc/meminfo, and what the
/// process's memory cgroup leaves under its limit (a container's `--memory`, a batch job's
/// allocation), where one is set:
/// ```
///   room = min over the cgroup and its parents of  limit - (usage - inactive file pages)
///   cgroup v2: memory.max, memory.current, memory.stat inactive_file
///   cgroup v1: memory.limit_in_bytes, memory.usage_in_bytes, memory.stat total_inactive_file
/// ```
/// Inactive file pages are page cache the kernel drops before it kills. Swap a cgroup may
/// use is not counted: the room may be larger than the figure, never smaller.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace gpt {

/// MemAvailable + SwapFree in bytes from the text of /proc/meminfo; nullopt when the
/// text lacks MemAvailable (a kernel older than 3.14, another system).
std::optional<uint64_t> available_host_bytes(const std::string& meminfo);

/// A memory cgroup's figures, each the least over the cgroup and its parents with a limit.
struct CgroupMemory {
  uint64_t room = 0;   ///< what the limit leaves: limit - (usage - inactive file pages)
  uint64_t limit = 0;  ///< the limit itself: the most the cgroup's processes may ever hold
};

/// The memory cgroup named in `proc_self_cgroup` (the text of /proc/self/cgroup), with
/// the cgroup file systems under `cgroup_root` (/sys/fs/cgroup: v2 there or in its
/// unified/, v1 in its memory/). A cgroup path that is not there (a container sees its own
/// cgroup at the root) is looked up at the root. nullopt when no limit is set or nothing
/// can be read.
std::optional<CgroupMemory> cgroup_memory(const std::string& proc_self_cgroup, const std::string& cgroup_root);

/// cgroup_memory's room alone.
std::optional<uint64_t> cgroup_room_bytes(const std::string& proc_self_cgroup, const std::string& cgroup_root);

/// How much this process may allocate, and where that figure comes from.
struct HostRoom {
  uint64_t bytes = 0;   ///< what may be allocated
  std::string source;   ///< "MemAvailable + SwapFree in /proc/meminfo", the machine, or the cgroup
};
/// The most this process could ever hold, whatever else runs: the smaller of the
/// machine's physical memory and its memory cgroup's limit (cgroup_memory's `limit`). A
/// run needing more cannot run here, which the configuration checks tell before building
/// anything. nullopt when neither can be read.
std::optional<HostRoom> host_capacity();

/// The room for this process: the smaller of available_host_bytes (of /proc/meminfo) and
/// cgroup_memory's room (of /proc/self/cgroup and /sys/fs/cgroup); nullopt when neither can
/// be read.
std::optional<HostRoom> host_room();

/// Host allocations are counted, and the room looked up again, once per kHostCheckBytes
/// allocated (a deep model makes many small arrays).
constexpr uint64_t kHostCheckBytes = uint64_t(64) << 20;

/// Bytes kept free on every check: up to kHostCheckBytes may be taken between two looks.
/// Under AddressSanitizer every allocation also takes shadow memory (an eighth of it) and
/// redzones around it, which the counts do not see and which weigh most on the small
/// arrays a deep model makes: there the same counted bytes take up to about twice the
/// memory, so twice as much is kept free (a sanitizer build's run was otherwise killed by
/// its cgroup's limit between two looks, before the check could refuse it).
#if defined(__SANITIZE_ADDRESS__)
constexpr uint64_t kHostKeptFreeBytes = 2 * kHostCheckBytes;
#else
constexpr uint64_t kHostKeptFreeBytes = kHostCheckBytes;
#endif

/// Throws a UserError when `bytes` more, plus kHostKeptFreeBytes, do not fit in
/// `available`: the message names the MemKind being allocated (the thread's MemScope),
/// the bytes of each kind this process holds, and the keys that shrink a run.
void require_host_room(size_t bytes, uint64_t available,
                       const std::string& source = "MemAvailable + SwapFree in /proc/meminfo");

/// Called by device_alloc before each host allocation: looks host_room() up once per
/// kHostCheckBytes allocated (or for any allocation that large) and calls
/// require_host_room. Does nothing where the room cannot be read.
void check_host_allocation(size_t bytes);

}  // namespace gpt
