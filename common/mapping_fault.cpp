// SIGBUS in a registered mapping: an error naming the file, exit 2 (see mapping_fault.h).
#include "common/mapping_fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>  // program_invocation_short_name (glibc)
#include <mutex>
#include <string>

#include "common/launcher.h"

namespace gpt {
namespace {

// One registered mapping. Entries are never freed: the handler may walk the list at any
// moment, so the end of a registration only clears `live`. A run registers each shard
// once, so what stays behind is a few hundred bytes a shard.
struct Mapping {
  const char* begin;
  const char* end;
  std::string message;  // the whole line the handler writes, made at registration
  std::atomic<bool> live{true};
  Mapping* next = nullptr;
};
std::atomic<Mapping*> mappings{nullptr};
std::mutex registering;  // registrations take turns (the handler takes no lock)

void on_sigbus(int, siginfo_t* info, void*) {
  // Only a fault has an address (si_code > 0); a SIGBUS sent by kill carries the sender's
  // pid and uid where the address would be.
  const char* at = info->si_code > 0 ? static_cast<const char*>(info->si_addr) : nullptr;
  for (Mapping* m = mappings.load(std::memory_order_acquire); m != nullptr; m = m->next)
    if (at != nullptr && m->live.load(std::memory_order_acquire) && at >= m->begin && at < m->end) {
      const ssize_t written = ::write(STDERR_FILENO, m->message.data(), m->message.size());
      static_cast<void>(written);  // nothing left to do if stderr is gone
      ::_exit(2);
    }
  // Not one of ours: SIGBUS's default action. A fault raises it again when the faulting
  // read runs again on return; a SIGBUS sent by kill (si_code <= 0) is raised again here,
  // and arrives once the handler has returned.
  ::signal(SIGBUS, SIG_DFL);
  if (info->si_code <= 0) ::raise(SIGBUS);
}

// "train" or "train: rank 3", as the run's other errors begin.
std::string who() {
  std::string name = program_invocation_short_name;
  if (launcher_world_size() > 1 && launcher_rank() >= 0) name += ": rank " + std::to_string(launcher_rank());
  return name;
}

}  // namespace

void register_mapping(const void* begin, size_t bytes, const std::string& path, const std::string& what) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, nullptr);
  });
  auto* m = new Mapping;
  m->begin = static_cast<const char*>(begin);
  m->end = m->begin + bytes;
  m->message = who() + ": error: " + what + " '" + path +
               "' could not be read while this process used it: it was truncated or rewritten in place (a file a "
               "run reads must not change under it: write a new file and rename it over the old one, as prepare "
               "does), or its disk failed\n";
  const std::lock_guard lock(registering);
  m->next = mappings.load(std::memory_order_relaxed);
  mappings.store(m, std::memory_order_release);
}

void unregister_mapping(const void* begin) {
  const std::lock_guard lock(registering);
  for (Mapping* m = mappings.load(std::memory_order_relaxed); m != nullptr; m = m->next)
    if (m->begin == begin && m->live.load(std::memory_order_relaxed)) {
      m->live.store(false, std::memory_order_release);
      return;
    }
}

}  // namespace gpt
