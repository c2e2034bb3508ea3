/// @file
/// ```
/// A run stopped early, and cleanly, by a signal:
///   SIGUSR1, SIGTERM or SIGINT (Ctrl-C)  ->  the step in progress ends, a checkpoint of it
///   is written, and the trainer exits with status kStoppedExit (3); resume=latest goes on
///   from there, as if the run had never stopped
///   the same signals again                ->  the process ends at once (the default action)
/// ```
/// A cluster scheduler that preempts a job signals it first and kills it a grace period
/// later (Slurm: `--signal=USR1@120`, or SIGTERM then SIGKILL after KillWait); mpirun passes
/// SIGUSR1 and SIGTERM on to every rank, but ends the job a few seconds after a SIGTERM, so
/// under mpirun SIGUSR1 is the one that leaves time for a checkpoint.
///
/// The handler only records the signal; the trainer looks at the end of each step. The
/// ranks of a job get the signal at different moments, or only some of them do, so they
/// agree first (the driver's after_step: a sum over the world), and all stop after the
/// same step.
#pragma once
#include <string>

namespace gpt {

/// The exit status of a run that a stop signal ended after its checkpoint (docs/cli.md).
constexpr int kStoppedExit = 3;

/// Installs the handlers for SIGUSR1, SIGTERM and SIGINT. `announce`: the first signal
/// writes one line to stderr saying what will happen (the lead rank's, not every rank's).
/// Call once a process, before training.
void install_stop_handlers(bool announce);

/// The stop signal this process has received (SIGUSR1, SIGTERM or SIGINT), or 0.
int stop_signal();

/// "SIGUSR1", "SIGTERM", "SIGINT", or "signal N".
std::string stop_signal_name(int signal);

}  // namespace gpt
