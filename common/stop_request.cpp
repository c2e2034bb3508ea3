// The stop signals' handler; see stop_request.h.
#include "common/stop_request.h"

#include <unistd.h>

#include <csignal>

#include "common/error.h"

namespace gpt {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;  // the first stop signal received, or 0
volatile std::sig_atomic_t g_announce = 0;

constexpr char kAnnouncement[] =
    "\ntrain: stop requested: the step in progress finishes, is checkpointed, and the run exits "
    "(resume=latest continues it); signal again to stop at once\n";

// Only async-signal-safe calls here: a second signal restores the default action and
// raises it again (the process ends as if no handler had been installed).
void on_stop_signal(int signal) {
  if (g_stop_signal != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_stop_signal = signal;
  if (g_announce) (void)!::write(STDERR_FILENO, kAnnouncement, sizeof kAnnouncement - 1);
}

}  // namespace

void install_stop_handlers(bool announce) {
  g_announce = announce ? 1 : 0;
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write the signal interrupts goes on
  for (const int signal : {SIGUSR1, SIGTERM, SIGINT})
    invariant(sigaction(signal, &action, nullptr) == 0, "install_stop_handlers: sigaction failed");
}

int stop_signal() { return g_stop_signal; }

std::string stop_signal_name(int signal) {
  switch (signal) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace gpt
