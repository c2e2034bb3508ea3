#include "common/memory.h"

#include <cstdio>

namespace gpt {

size_t MemoryLedger::total() const {
  size_t t = 0;
  for (size_t b : bytes_) t += b;
  return t;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) bytes /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, units[u]);
  return buf;
}

std::string MemoryLedger::table() const {
  std::string out;
  char line[96];
  for (size_t k = 0; k < bytes_.size(); ++k) {
    if (MemKind(k) == MemKind::Eval && bytes_[k] == 0) continue;  // a run that has not sampled or evaluated yet
    std::snprintf(line, sizeof(line), "  %-12s %12s\n", kMemKindNames[k],
                  format_bytes(double(bytes_[k])).c_str());
    out += line;
  }
  std::snprintf(line, sizeof(line), "  %-12s %12s\n", "total", format_bytes(double(total())).c_str());
  return out + line;
}

std::string MemoryLedger::json() const {
  std::string out = "{";
  for (size_t k = 0; k < bytes_.size(); ++k)
    out += (k ? ",\"" : "\"") + std::string(kMemKindNames[k]) + "\":" + std::to_string(bytes_[k]);
  return out + "}";
}

MemoryTracker& MemoryTracker::global() {
  static MemoryTracker tracker;
  return tracker;
}

void MemoryTracker::allocated(MemKind kind, size_t bytes) {
  const size_t now = current_[size_t(kind)].fetch_add(bytes) + bytes;
  size_t peak = peak_[size_t(kind)].load();
  while (now > peak && !peak_[size_t(kind)].compare_exchange_weak(peak, now)) {
  }
}

void MemoryTracker::freed(MemKind kind, size_t bytes) { current_[size_t(kind)].fetch_sub(bytes); }

MemoryLedger MemoryTracker::peaks() const {
  MemoryLedger ledger;
  for (size_t k = 0; k < kMemKindNames.size(); ++k) ledger.set(MemKind(k), peak_[k].load());
  return ledger;
}

std::string MemoryTracker::held_now() const {
  std::string held;
  for (size_t k = 0; k < kMemKindNames.size(); ++k)
    held += std::string(k ? ", " : "") + kMemKindNames[k] + " " + format_bytes(double(current(MemKind(k))));
  return held;
}

void MemoryTracker::reset_peaks() {
  for (size_t k = 0; k < kMemKindNames.size(); ++k) peak_[k].store(current_[k].load());
}

namespace {
thread_local MemKind t_kind = MemKind::Buffers;
}

MemScope::MemScope(MemKind kind) : previous_(t_kind) {
  if (t_kind != MemKind::Eval) t_kind = kind;
}
MemScope::~MemScope() { t_kind = previous_; }
MemKind MemScope::current() { return t_kind; }

}  // namespace gpt
