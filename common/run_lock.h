/// @file
/// One job per run directory. Two jobs writing the same run directory would interleave
/// their metrics and overwrite or prune each other's checkpoints, so a job takes
/// `<run_dir>/.lock` before it writes anything there, and a second job stops at once with
/// an error naming the directory and the job that holds it.
///
/// The lock is flock(2) on that file: the kernel releases it when the holding process
/// ends, however it ends (a crash, SIGKILL), so a dead job never leaves the directory
/// locked. The file's text describes the holder (pid, host, start time, command) for the
/// message; a stale text without a holder means nothing.
#pragma once
#include <functional>
#include <memory>
#include <string>

namespace gpt {

class Communicator;

/// The lock of one run directory, held from construction until destruction, when the
/// lock file is closed. Not copyable.
class RunDirLock {
 public:
  /// Creates run_dir if needed and takes its lock, or throws a UserError naming the
  /// directory and the running job. `key` names the directory in messages ("run_dir",
  /// or "--out" for prepare's dataset directory, which takes the same lock).
  explicit RunDirLock(const std::string& run_dir, const std::string& key = "run_dir");
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

/// For a job of several ranks sharing one run directory: world rank 0 takes the lock
/// (returned; null on the other ranks) and every rank learns the outcome, so all of them
/// stop with the same message when another job holds it (an AgreedError over `world`,
/// which the driver says once). Collective.
/// `then`, when given, runs on rank 0 with the lock held (setting aside another run's
/// checkpoints past the start step); its UserError stops every rank the same way.
std::unique_ptr<RunDirLock> lock_run_dir(Communicator& world, const std::string& run_dir,
                                         const std::function<void()>& then = {});

}  // namespace gpt
