// prepare's token spool (token_spool.h): append while encoding, then map and cut.
#include "datasets/token_spool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace gpt {

namespace {

const char* kSpoolLabel = "the token spool";  // how messages name the file

// The live spool's name, for the signal handler (which may call only async-signal-safe
// functions: unlink, signal, raise). `live` is set once the name is whole.
char live_name[4096];
volatile std::sig_atomic_t live = 0;  // (sig_atomic_t: read whole by a handler that interrupts a write of it)

void remove_spool_and_end(int signal) {
  if (live) ::unlink(live_name);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

// (No sweep of a killed run's spool here: prepare sweeps the directory before it makes one.)
TokenSpool::TokenSpool(const std::string& near)
    : file_(create_temporary_beside(near, kSpoolLabel, /*sweep_first=*/false)) {
  // A signal between the file's creation and `live` leaves it: the next prepare removes it.
  if (file_.name.size() < sizeof live_name) {
    std::memcpy(live_name, file_.name.c_str(), file_.name.size() + 1);
    std::atomic_signal_fence(std::memory_order_release);  // the name is whole before `live` says so
    live = 1;
  }
}

void TokenSpool::remove_on_signals() {
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    // A signal the process was started to ignore stays ignored: `nohup prepare ...` must
    // outlive its terminal, and a shell's background job ignores Ctrl-C.
    struct sigaction current {};
    if (::sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    std::signal(signal, remove_spool_and_end);
  }
}

TokenSpool::~TokenSpool() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
  if (file_.file) std::fclose(file_.file);
  std::remove(file_.name.c_str());
  live = 0;  // after the removal: a signal before it removes the file itself
}

void TokenSpool::append(const std::vector<int>& ids) {
  if (!file_.file) fail(std::string("internal error: ") + kSpoolLabel + " is mapped; it takes no more tokens");
  narrow_.assign(ids.begin(), ids.end());  // ids < vocab_size <= 65536
  if (std::fwrite(narrow_.data(), sizeof(uint16_t), narrow_.size(), file_.file) != narrow_.size())
    fail(std::string(kSpoolLabel) + " '" + file_.name + "': write failed (" + std::strerror(errno) +
         "): prepare needs 2 bytes a token beside the shards while it runs");
  count_ += int64_t(ids.size());
}

std::span<const uint16_t> TokenSpool::map() {
  if (!file_.file) fail(std::string("internal error: ") + kSpoolLabel + " is mapped twice");
  std::FILE* file = file_.file;
  file_.file = nullptr;  // closed below, whatever happens
  if (std::fclose(file) != 0)
    fail(std::string(kSpoolLabel) + " '" + file_.name + "': write failed (" + std::strerror(errno) + ")");
  if (count_ == 0) return {};
  const int fd = ::open(file_.name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail(std::string(kSpoolLabel) + " '" + file_.name + "': cannot open it again (" + std::strerror(errno) + ")");
  mapping_bytes_ = size_t(count_) * sizeof(uint16_t);
  void* mapping = ::mmap(nullptr, mapping_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file open
  if (mapping == MAP_FAILED)
    fail(std::string(kSpoolLabel) + " '" + file_.name + "': cannot map it (" + std::strerror(map_errno) + ")");
  mapping_ = mapping;
  ::madvise(mapping_, mapping_bytes_, MADV_SEQUENTIAL);  // read once, front to back: a hint only
  return {static_cast<const uint16_t*>(mapping_), size_t(count_)};
}

}  // namespace gpt
