/// @file
/// ```
/// A run stopped early, and cleanly, by a signal:
///   SIGUSR1 (and, in a run of one process, SIGTERM or SIGINT: Ctrl-C)  ->  the step in
///   progress ends, a checkpoint of it is written, and the trainer exits with status
///   kStoppedExit (3); resume=latest goes on from there, as if the run had never stopped
///   SIGTERM or SIGINT again, a second or more later  ->  the process ends at once
/// ```
/// A cluster scheduler that preempts a job signals it first and kills it a grace period
/// later: Slurm's `--signal=USR1@120` sends SIGUSR1 two minutes ahead. mpirun passes
/// SIGUSR1 on to every rank. A job of several ranks leaves SIGTERM and SIGINT alone: mpirun
/// kills its ranks about a second after it passes them on, too soon for a checkpoint, and
/// sends them to every rank itself when it ends a failed job, which must not wait.
///
/// The handler only records the signal; the trainer looks at the end of each step. The
/// ranks of a job get the signal at different moments, or only some of them do, so they
/// agree first (the driver's after_step: a sum over the world), and all stop after the
/// same step. One signal may come by two routes (from mpirun, and from a scheduler that
/// signals every process of the job), so a repeat within a second, or any repeat of
/// SIGUSR1, changes nothing.
#pragma once
#include <string>

namespace gpt {

/// The exit status of a run that a stop signal ended after its checkpoint (docs/cli.md).
constexpr int kStoppedExit = 3;

/// Blocks SIGUSR1 until install_stop_handlers is called: a stop signal that arrives before
/// the handler is in place (while MPI starts up, which can take a second, or a GPU's
/// context is made) waits, pending, and then reaches the handler, instead of ending the
/// process by the signal's default action. Call first thing, on the main thread: the
/// threads started meanwhile (MPI's) keep it blocked, and the signal goes to one that
/// does not.
void hold_stop_signal();

/// Installs the handler for SIGUSR1, and with `terminal_signals` (a run of one process)
/// for SIGTERM and SIGINT too, then unblocks SIGUSR1 on this thread (hold_stop_signal).
/// `announce`: the first signal writes one line to stderr saying what will happen (the
/// lead rank's, not every rank's). Call once a process, before training.
void install_stop_handlers(bool announce, bool terminal_signals);

/// The stop signal this process has received (SIGUSR1, SIGTERM or SIGINT), or 0.
int stop_signal();

/// "SIGUSR1", "SIGTERM", "SIGINT", or "signal N".
std::string stop_signal_name(int signal);

}  // namespace gpt
