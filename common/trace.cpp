#include "common/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "common/files.h"

namespace gpt {
namespace {

constexpr const char* kFirstLine = "{\"traceEvents\":[";  // how every trace this class writes begins

}  // namespace

Trace& Trace::global() {
  static Trace trace;
  return trace;
}

void Trace::enable(const std::string& path, int rank) {
  path_ = path;
  rank_ = rank;
  enabled_ = !path.empty();
  events_.reserve(1 << 16);
  if (!enabled_) return;
  // The file is written at the end of the run; a path that cannot take it fails now,
  // not after the training, and so does one that holds anything but an earlier trace.
  create_parent_directories(path, "trace_file");
  require_own_output(
      path, "trace_file", [](const std::string& first) { return first == kFirstLine; },
      "a trace (its first line is not " + std::string(kFirstLine) + ")");
  // Opened to append, which proves the path writable and changes nothing in an earlier
  // trace; a file this probe created is removed at once, so that a run stopped before its
  // end (another rank refusing its own trace_file, say) leaves no empty trace behind.
  std::error_code ec;
  const bool existed = std::filesystem::exists(std::filesystem::symlink_status(path, ec));  // a link counts
  std::FILE* f = std::fopen(path.c_str(), "a");
  require(f != nullptr, "trace_file: cannot write '" + path + "': " + std::strerror(errno));
  std::fclose(f);
  if (!existed) std::filesystem::remove(path, ec);
}

void Trace::remove_rank_traces(const std::string& trace_file) {
  if (trace_file.empty()) return;
  namespace fs = std::filesystem;
  const fs::path base(trace_file);
  const fs::path dir = base.has_parent_path() ? base.parent_path() : fs::path(".");
  const std::string head = base.filename().string() + ".rank", tail = ".json";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string rank = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (!std::all_of(rank.begin(), rank.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    std::error_code file_ec;
    if (!fs::is_regular_file(fs::symlink_status(it->path(), file_ec))) continue;
    std::FILE* f = std::fopen(it->path().c_str(), "r");
    if (!f) continue;
    char first[64] = {};
    const bool trace = std::fgets(first, sizeof first, f) != nullptr && std::string(first) == std::string(kFirstLine) + "\n";
    std::fclose(f);
    if (trace) fs::remove(it->path(), file_ec);
  }
}

int64_t Trace::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
}

void Trace::record(const char* name, const char* category, int64_t start_ns, int64_t dur_ns, int lane) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({name, category, start_ns, dur_ns, lane});
}

void Trace::write() const {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  create_parent_directories(path_, "trace_file");
  // A regular file (or a new one) is replaced whole: the trace goes to a temporary file
  // beside it, renamed over it once complete, so a failed write (a full disk) leaves the
  // earlier trace as it was. Anything else (/dev/null, a terminal) is written in place:
  // a rename would replace the device itself.
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool exists = fs::exists(path_, ec);
  const std::string target = exists ? fs::canonical(path_, ec).string() : path_;  // through a symlink
  const bool replace = !exists || (!ec && fs::is_regular_file(target, ec));
  // The temporary's name is this process's: two jobs tracing to one file (each rank has a
  // file of its own) would otherwise write one temporary together and rename a mix.
  const std::string written = replace ? target + ".tmp." + std::to_string(::getpid()) : path_;
  const std::string kept = replace ? " (the earlier file, if any, is unchanged)" : "";
  std::FILE* f = std::fopen(written.c_str(), "w");
  require(f != nullptr, "trace_file: cannot write '" + written + "': " + std::strerror(errno) + kept);
  std::fprintf(f, "%s\n", kFirstLine);
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    // Microseconds (the format's unit) to the nanosecond; the times are never negative.
    std::fprintf(f,
                 "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%lld.%03lld,\"dur\":%lld.%03lld,\"pid\":%d,"
                 "\"tid\":%d}\n",
                 i ? "," : "", e.name, e.category, static_cast<long long>(e.start_ns / 1000),
                 static_cast<long long>(e.start_ns % 1000), static_cast<long long>(e.dur_ns / 1000),
                 static_cast<long long>(e.dur_ns % 1000), rank_, e.lane);
  }
  std::fprintf(f, "]}\n");
  const bool flushed = std::fflush(f) == 0 && !std::ferror(f);
  int error = errno;
  const bool closed = std::fclose(f) == 0;
  if (flushed && !closed) error = errno;
  if (!flushed || !closed) {
    if (replace) fs::remove(written, ec);
    fail("trace_file: cannot write '" + path_ + "': " + std::strerror(error) + kept);
  }
  if (replace && std::rename(written.c_str(), target.c_str()) != 0) {
    const int rename_error = errno;
    fs::remove(written, ec);
    fail("trace_file: cannot replace '" + target + "' with '" + written + "': " + std::strerror(rename_error));
  }
}

}  // namespace gpt
