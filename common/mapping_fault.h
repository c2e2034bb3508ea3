/// @file
/// A mapped file that cannot be read, said as an error rather than a crash.
///
/// A process reads a mapped file through its pages. When a page no longer exists (the
/// file was truncated, or rewritten in place by a tool that truncates first) or cannot be
/// read (a failing disk, a lost network file system), the read raises SIGBUS, whose
/// default action ends the process with "Bus error" and no word of which file. A handler
/// for SIGBUS looks the faulting address up among the registered mappings: inside one, it
/// prints an error naming the file and exits with status 2 (the input or the machine is
/// wrong: docs/cli.md); anywhere else, SIGBUS keeps its default action.
///
/// The handler only reads what registration wrote before it (a list that is never
/// shortened, each entry's message made in advance) and calls write and _exit, which
/// are safe in a signal handler.
#pragma once
#include <cstddef>
#include <string>

namespace gpt {

/// Registers [begin, begin + bytes), a mapping of `path`, until unregister_mapping(begin)
/// is called; installs the SIGBUS handler the first time. `what` says what the file is
/// to the run ("shard", "model file").
void register_mapping(const void* begin, size_t bytes, const std::string& path, const std::string& what);
/// Ends the registration of the mapping that starts at `begin` (before it is unmapped).
void unregister_mapping(const void* begin);

}  // namespace gpt
