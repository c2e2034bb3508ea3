// The run directory's lock; see run_lock.h.
#include "common/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/comm.h"
#include "common/error.h"
#include "common/files.h"

namespace gpt {
namespace {

std::string lock_path(const std::string& run_dir) { return run_dir + "/.lock"; }

// "pid 1234 on host node7 since 2026-11-23 23:40:01 UTC: train --config ..."
std::string describe_this_process() {
  const std::time_t now = std::time(nullptr);
  char when[64] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::string command;
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  for (char c; cmdline.get(c);) command += c == '\0' ? ' ' : c;
  while (!command.empty() && command.back() == ' ') command.pop_back();
  return "pid " + std::to_string(getpid()) + " on host " + host_name() + " since " + when +
         (command.empty() ? "" : ": " + command);
}

}  // namespace

RunDirLock::RunDirLock(const std::string& run_dir, const std::string& key) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  require(!ec, key + ": cannot create '" + run_dir + "': " + ec.message());
  const std::string path = lock_path(run_dir);
  // Not through a link (the lock's text would overwrite whatever it points at), and not
  // waiting on a FIFO: the lock is a regular file of run_dir itself.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0 && errno == ELOOP)
    fail(key + ": the lock file '" + path + "' is a symbolic link: refusing to write through it (remove the link)");
  require(fd_ >= 0, key + ": cannot open the lock file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    fail(key + ": the lock file '" + path + "' is not a regular file: refusing to write into it (remove it)");
  }
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::ifstream in(path);
    std::stringstream holder;
    holder << in.rdbuf();
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      fail(key + " '" + run_dir + "' is in use by another job (" +
           (holder.str().empty() ? std::string("holder unknown") : holder.str()) +
           "); wait for it to end, or give this run another " + key);
    fail(key + ": cannot lock '" + path + "': " + std::strerror(err));
  }
  const std::string me = describe_this_process();
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size())) {
    const int err = errno;
    ::close(fd_);  // a constructor that throws runs no destructor: release the lock here
    fd_ = -1;
    fail(key + ": cannot write the lock file '" + path + "': " + std::strerror(err));
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock; the file stays (its text is harmless)
}

std::unique_ptr<RunDirLock> lock_run_dir(Communicator& world, const std::string& run_dir,
                                         const std::function<void()>& then) {
  std::unique_ptr<RunDirLock> lock;
  std::string error;
  if (world.rank() == 0) {
    try {
      lock = std::make_unique<RunDirLock>(run_dir);
      if (then) then();
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  // Rank 0's verdict to every rank: the length of its message (0: locked), then the text.
  double length = double(error.size());
  world.broadcast(&length, 1, DType::F64, 0);
  if (length == 0) return lock;
  error.resize(size_t(length));
  world.broadcast(error.data(), error.size(), DType::Byte, 0);
  throw AgreedError(error, world.size());  // every rank knows it: said once, no abort
}

}  // namespace gpt
