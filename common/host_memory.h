/// @file
/// Room on the host for one more allocation, asked before it is made. Linux lends
/// memory it does not have (overcommit): an allocation too large for the machine
/// succeeds, and the process is killed without a word when its pages are first
/// touched (DeviceArray zero-fills them at once). A run whose activations outgrow the
/// machine (a deep model, a large micro-batch) would die that way; instead it stops
/// with an error that names what it was allocating and what it already holds.
///
/// The room is what the kernel reports it can still give: MemAvailable (free memory
/// plus the page cache it can drop) plus SwapFree, from /proc/meminfo. A container's
/// own memory limit (cgroup) is not read: there the kernel's killer may still come first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace gpt {

/// MemAvailable + SwapFree in bytes from the text of /proc/meminfo; nullopt when the
/// text lacks MemAvailable (a kernel older than 3.14, another system).
std::optional<uint64_t> available_host_bytes(const std::string& meminfo);

/// Bytes kept free on every check: host allocations are counted, and the room looked
/// up again, once per kHostCheckBytes allocated (a deep model makes many small
/// arrays), so up to this much may be taken between two looks.
constexpr uint64_t kHostCheckBytes = uint64_t(64) << 20;

/// Throws a UserError when `bytes` more, plus kHostCheckBytes, do not fit in
/// `available`: the message names the MemKind being allocated (the thread's MemScope),
/// the bytes of each kind this process holds, and the keys that shrink a run.
void require_host_room(size_t bytes, uint64_t available);

/// Called by device_alloc before each host allocation: looks /proc/meminfo up once per
/// kHostCheckBytes allocated (or for any allocation that large) and calls
/// require_host_room. Does nothing where /proc/meminfo cannot be read.
void check_host_allocation(size_t bytes);

}  // namespace gpt
