/// @file
/// Output files of a run (metrics, traces): the directories they go in are created on
/// demand, and a failure names the config key that chose the path. Files written whole
/// and then renamed into place are first written under a temporary name of their own.
#pragma once
#include <fcntl.h>   // open (POSIX)
#include <signal.h>  // kill (POSIX)
#include <stdio.h>   // fdopen (POSIX)
#include <unistd.h>  // close, getpid, gethostname

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <unordered_set>
#include <vector>

#include "common/error.h"

namespace gpt {

/// Creates the directories above file `path` (the config key `key` named it), or throws
/// a UserError naming the key, the directory and the system's reason.
inline void create_parent_directories(const std::string& path, const std::string& key) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (!ec) return;
  std::string message = key;  // built by appending: GCC 12 warns (-Wrestrict) falsely on one long sum
  message += ": cannot create directory '" + parent.string() + "'";
  message += " for '" + path + "': " + ec.message();
  fail(message);
}

/// Whether anything has the name `path`: a file, a directory, or a symbolic link, one
/// that points nowhere included. std::filesystem::exists follows a link, so a dangling
/// one looks free, and a tool that writes only new files would then create the link's
/// target or, renaming its output into place, replace the link.
inline bool name_taken(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::symlink_status(path, ec));
}

/// `path` made absolute, with its dot segments and the links of its existing part
/// resolved: two spellings of one place compare equal.
inline std::filesystem::path resolved_path(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
}

/// Whether `name` is one of the entries a run's checkpoints make in its run directory:
/// "step_" and 8 to 18 digits (a complete checkpoint), or that with ".tmp" (a save being
/// written) or ".old" (a checkpoint being replaced). A run's saves replace such an entry
/// whole, and its pruning and its setting aside of later checkpoints remove it.
inline bool is_step_entry_name(std::string name) {
  if (name.ends_with(".tmp") || name.ends_with(".old")) name.resize(name.size() - 4);
  const size_t digits = name.size() - std::min(name.size(), size_t(5));
  return name.starts_with("step_") && digits >= 8 && digits <= 18 &&
         name.find_first_not_of("0123456789", 5) == std::string::npos;
}

/// The checkpoint directory that directory `dir` is or lies inside, or "" when none: `dir`
/// or an ancestor with a step entry's name (is_step_entry_name) that is a checkpoint (it
/// holds manifest.json) or lies in a run directory (beside a run's lock file,
/// common/run_lock.h). That run's next save of the step, or its pruning, replaces or
/// deletes the directory whole, with whatever else was put in it.
inline std::string enclosing_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::path d = resolved_path(dir); d.has_relative_path(); d = d.parent_path()) {
    if (!is_step_entry_name(d.filename().string())) continue;
    if (fs::is_regular_file(d / "manifest.json", ec) || fs::exists(d.parent_path() / ".lock", ec)) return d.string();
  }
  return "";
}

/// A tool's output file (`what`: the option or argument that named it), or the directory
/// it writes its files into (`directory`), must not go into a checkpoint directory
/// (enclosing_checkpoint), where the run's pruning or next save would delete it without a
/// word: a UserError naming both.
inline void require_outside_checkpoint_dirs(const std::string& path, const std::string& what,
                                            bool directory = false) {
  const std::filesystem::path dir = directory ? std::filesystem::path(path) : std::filesystem::path(path).parent_path();
  const std::string checkpoint = enclosing_checkpoint(dir.empty() ? "." : dir.string());
  if (!checkpoint.empty())
    fail(what + " '" + path + "': " + checkpoint + " is a checkpoint directory: its run's next save of that "
         "step, or its pruning, deletes the directory whole with what is written there; write elsewhere");
}

/// An output file may be new, empty, or an earlier output of the same kind (a trace
/// replaced, a metrics log appended to): anything else at `path` (a data shard, a
/// config, a checkpoint's tensors, named by a typo) is refused with a UserError naming
/// the key, before the run trains, instead of being overwritten. `ours` is given the
/// file's first line (at most 4 KiB of it) and says whether this program wrote it;
/// `what` describes that first line for the message. A FIFO or a socket is refused too:
/// opening one waits for a reader or a writer, and the run would hang before its first step.
template <class Ours>
void require_own_output(const std::string& path, const std::string& key, Ours ours, const std::string& what) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!ec && (std::filesystem::is_fifo(status) || std::filesystem::is_socket(status)))
    fail(key + ": '" + path + "' is a " + (std::filesystem::is_fifo(status) ? "FIFO" : "socket") +
         ", not a file: writing to it would wait for a reader (name a regular file)");
  if (!std::filesystem::is_regular_file(path, ec) || std::filesystem::file_size(path, ec) == 0 || ec) return;
  std::ifstream in(path, std::ios::binary);
  std::string first(4096, '\0');
  in.read(first.data(), std::streamsize(first.size()));
  first.resize(size_t(in.gcount()));
  first = first.substr(0, first.find('\n'));
  if (ours(first)) return;
  fail(key + ": '" + path + "' exists and is not " + what +
       ": refusing to write into it (remove it, or name another file)");
}

/// This machine's name (gethostname), as create_temporary_beside's names carry it.
inline std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

/// The host part of the names of create_temporary_beside beside `path`: this machine's
/// name, cut short where the whole name (`path`'s file name, ".tmp.", the host, ".", a pid
/// of up to 10 digits, ".", N of up to 3) would pass NAME_MAX, 255 bytes on Linux's file
/// systems; so a file whose own name is near that limit can still be written. Two
/// machines whose names share the kept beginning then name their temporaries alike: one
/// removes the other's leftovers only as it would its own (a dead pid, a minute idle).
inline std::string temporary_host(const std::string& path) {
  constexpr size_t kNameMax = 255, kAroundHost = 5 + 1 + 10 + 1 + 3;  // ".tmp." "." pid "." N
  const size_t fixed = std::filesystem::path(path).filename().string().size() + kAroundHost;
  std::string host = host_name();
  host.resize(std::min(host.size(), fixed < kNameMax ? kNameMax - fixed : 0));
  return host;
}

/// Removes what writers of each path that crashed left beside it: regular files named
/// `path`.tmp.HOST.PID.N (create_temporary_beside's names, a shard of gigabytes perhaps)
/// whose HOST is this machine, whose process PID no longer exists, and which nothing has
/// written to for a minute. A live writer's file is left alone: its process exists, or it
/// runs on another machine that shares the directory (which is why the name carries the
/// host), or in another PID namespace of this one (a container with the host's name),
/// where it still writes. So is everything not exactly of that form: a user's file, a
/// symlink, a directory. Each directory is listed once, however many paths it holds: a
/// call a path would list a directory of n shards n times.
inline void remove_crashed_temporaries(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  // Per directory, the names' prefixes: `name`.tmp.HOST. (a temporary's name, less PID.N).
  std::map<fs::path, std::unordered_set<std::string>> prefixes;
  for (const std::string& path : paths) {
    const fs::path target(path);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    prefixes[dir].insert(target.filename().string() + ".tmp." + temporary_host(path) + ".");
  }
  const auto digits = [](const std::string& s) {  // a decimal of 1 to 9 digits: no overflow
    return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
  };
  for (const auto& [dir, ours] : prefixes) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      // NAME.tmp.HOST.PID.N: the prefix is all but the last two dot-separated fields.
      const std::string name = it->path().filename().string();
      const size_t last_dot = name.rfind('.');
      if (last_dot == std::string::npos || last_dot == 0) continue;
      const size_t pid_dot = name.rfind('.', last_dot - 1);
      if (pid_dot == std::string::npos || !ours.count(name.substr(0, pid_dot + 1))) continue;
      const std::string pid_text = name.substr(pid_dot + 1, last_dot - pid_dot - 1);
      if (!digits(pid_text) || !digits(name.substr(last_dot + 1))) continue;
      const pid_t pid = pid_t(std::stol(pid_text));
      if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (EPERM: someone else's)
      std::error_code file_ec;
      if (!fs::is_regular_file(fs::symlink_status(it->path(), file_ec))) continue;
      const auto written = fs::last_write_time(it->path(), file_ec);
      if (file_ec || fs::file_time_type::clock::now() - written < std::chrono::minutes(1)) continue;
      fs::remove(it->path(), file_ec);
    }
  }
}

/// One path's (see above).
inline void remove_crashed_temporaries(const std::string& path) {
  remove_crashed_temporaries(std::vector<std::string>{path});
}

/// A file of our own, open for writing, under a temporary name (create_temporary_beside).
struct TemporaryFile {
  std::string name;           ///< where it is: `path`.tmp.HOST.PID.N
  std::FILE* file = nullptr;  ///< open for writing; the writer closes it (std::fclose) and checks that
};

/// A new, empty file beside `path` to write it under before it takes `path`'s name:
/// `path`.tmp.HOST.PID.N (HOST: this machine's name, cut by temporary_host when the name
/// would pass NAME_MAX; PID: this process's, N: the first
/// number free), created by this call (O_EXCL, and O_NOFOLLOW) and written through the
/// descriptor that made it. A fixed name such as `path`.tmp could be a user's file, or a
/// symlink to one, and would be truncated or written through; the file made here never
/// is, and a crash's leftover never blocks the next write, which removes it
/// (remove_crashed_temporaries). Its mode is 0666 less the umask, as any new file's. The
/// caller writes it, closes it, then renames or removes it. A failure (a missing or
/// read-only directory) is a UserError beginning with `what`.
inline TemporaryFile create_temporary_beside(const std::string& path, const std::string& what,
                                            bool sweep_first = true) {
  if (sweep_first) remove_crashed_temporaries(path);
  const std::string stem = path + ".tmp." + temporary_host(path) + "." + std::to_string(::getpid()) + ".";
  for (int n = 0; n < 1000; ++n) {
    const std::string name = stem + std::to_string(n);
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) {
      std::FILE* file = ::fdopen(fd, "wb");
      if (!file) {
        const int error = errno;
        ::close(fd);
        std::remove(name.c_str());
        fail(what + ": cannot open " + name + ": " + std::strerror(error));
      }
      return {name, file};
    }
    if (errno != EEXIST) fail(what + ": cannot create " + name + ": " + std::strerror(errno));
  }
  fail(what + ": cannot create a temporary file beside it: " + stem + "0 to 999 all exist");
}

/// Closes `temp` once it is written. `written`: whether every write succeeded, and
/// `write_errno` the errno after the last one. A failed write or close (a full disk shows
/// at either) removes the file and is a UserError beginning with `what`, with the reason.
inline void close_temporary(const TemporaryFile& temp, bool written, int write_errno, const std::string& what) {
  const bool closed = std::fclose(temp.file) == 0;
  if (closed && written) return;
  const int error = written ? errno : write_errno;
  std::remove(temp.name.c_str());
  fail(what + ": write failed (" + std::strerror(error) + ")");
}

}  // namespace gpt
