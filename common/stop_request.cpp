// The stop signals' handler; see stop_request.h.
#include "common/stop_request.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>

#include "common/error.h"

namespace gpt {

namespace {

// Written by the handler, on whichever thread the signal lands, and read by the trainer:
// lock-free atomics, which a handler may touch.
std::atomic<int> g_stop_signal{0};           // the first stop signal received, or 0
std::atomic<long long> g_first_signal_ns{0};  // when it came (CLOCK_MONOTONIC)
std::atomic<bool> g_announce{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<long long>::is_always_lock_free);

constexpr long long kRepeatAfterNs = 1'000'000'000;  // a repeat this much later is the user's second

constexpr char kAnnouncement[] =
    "\ntrain: stop requested: the run stops after the step in progress, with a checkpoint of it that "
    "resume=latest continues (after the last step: without its evaluation and sample)\n";
constexpr char kAnnouncementTerminal[] =
    "\ntrain: stop requested: the run stops after the step in progress, with a checkpoint of it that "
    "resume=latest continues (after the last step: without its evaluation and sample); SIGTERM or Ctrl-C "
    "again, a second from now or later, stops it at once\n";

long long now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return (long long)t.tv_sec * 1'000'000'000 + t.tv_nsec;
}

// Only async-signal-safe calls here. A repeated SIGTERM or SIGINT, a second or more after
// the first, restores the default action and raises it again: the process ends as if no
// handler had been installed.
void on_stop_signal(int signal) {
  const int saved_errno = errno;  // write() may change it under the code the signal interrupted
  if (g_stop_signal.load() == 0) {
    g_first_signal_ns.store(now_ns());
    g_stop_signal.store(signal);
    if (g_announce.load() && signal == SIGUSR1) (void)!::write(STDERR_FILENO, kAnnouncement, sizeof kAnnouncement - 1);
    else if (g_announce.load()) (void)!::write(STDERR_FILENO, kAnnouncementTerminal, sizeof kAnnouncementTerminal - 1);
  } else if (signal != SIGUSR1 && now_ns() - g_first_signal_ns.load() >= kRepeatAfterNs) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
  errno = saved_errno;
}

// SIGUSR1 blocked (held back) or not, on this thread and the threads it starts.
void set_usr1_blocked(bool blocked) {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  invariant(pthread_sigmask(blocked ? SIG_BLOCK : SIG_UNBLOCK, &usr1, nullptr) == 0,
            "stop signal: pthread_sigmask failed");
}

}  // namespace

void hold_stop_signal() { set_usr1_blocked(true); }

void install_stop_handlers(bool announce, bool terminal_signals) {
  g_announce.store(announce);
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write the signal interrupts goes on
  invariant(sigaction(SIGUSR1, &action, nullptr) == 0, "install_stop_handlers: sigaction failed");
  if (terminal_signals)
    for (const int signal : {SIGTERM, SIGINT})
      invariant(sigaction(signal, &action, nullptr) == 0, "install_stop_handlers: sigaction failed");
  set_usr1_blocked(false);  // a SIGUSR1 held since hold_stop_signal reaches the handler now
}

int stop_signal() { return g_stop_signal.load(); }

std::string stop_signal_name(int signal) {
  switch (signal) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace gpt
