/// @file
/// Traces: Chrome/Perfetto "trace event" JSON (open in ui.perfetto.dev or
/// chrome://tracing) with one complete event ("ph":"X") per span — a phase of the
/// step, an op, later a communication call — so an exposed all-reduce or a pipeline
/// bubble can be seen. Off unless the config names a trace_file; a disabled span costs
/// one branch.
#pragma once
#include <chrono>
#include <mutex>
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

/// The spans of one process (one rank), kept in memory until write(). Recording is
/// thread-safe.
class Trace {
 public:
  /// The process-wide trace (one per rank). enable() starts recording.
  static Trace& global();
  /// Records from now on, for a file at path whose events carry rank as their process id;
  /// an empty path leaves tracing off.
  void enable(const std::string& path, int rank = 0);
  /// Removes the rank traces an earlier job left for `trace_file` (trace_file.rankN.json
  /// files that begin as a trace does; anything else is the user's and stays), so that a
  /// job on fewer ranks leaves none of an earlier, larger one's beside its own. One rank
  /// calls it before any rank enables its trace; "" does nothing.
  static void remove_rank_traces(const std::string& trace_file);
  bool enabled() const { return enabled_; }  ///< whether spans are recorded

  int64_t now_ns() const;  ///< nanoseconds since this trace was created (steady clock)
  /// Adds a span that started at start_ns (a now_ns() value) and lasted dur_ns, drawn on
  /// row `lane` (the event's thread id). name and category are kept by pointer. The file
  /// gives both in microseconds to the nanosecond ("ts":9265.418): in whole microseconds
  /// a span that ends in the microsecond its neighbour starts could not be told from one
  /// that holds it.
  void record(const char* name, const char* category, int64_t start_ns, int64_t dur_ns, int lane = 0);
  /// Writes the events recorded so far (called at exit; safe to call more than once). A
  /// regular file is replaced only once the new trace is complete (a failed write keeps it).
  void write() const;

 private:
  struct Event {
    const char* name;
    const char* category;
    int64_t start_ns, dur_ns;
    int lane;
  };
  bool enabled_ = false;
  std::string path_;
  int rank_ = 0;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::vector<Event> events_;
  mutable std::mutex mutex_;  ///< spans come from the compute and the communication threads
};

/// The row this thread's spans are drawn on when they name none: 0, the main thread's,
/// unless the thread set its own for a while. A communication thread sets 1, so that the
/// ops it runs itself (a ring's additions) are drawn on its row and not as the main
/// thread's compute.
class TraceLane {
 public:
  explicit TraceLane(int lane) : previous_(current()) { slot() = lane; }  ///< this thread's spans go to lane
  ~TraceLane() { slot() = previous_; }  ///< restores the lane in force before (scopes nest)
  TraceLane(const TraceLane&) = delete;
  TraceLane& operator=(const TraceLane&) = delete;
  static int current() { return slot(); }  ///< this thread's lane: 0 unless a TraceLane is alive

 private:
  static int& slot() {
    thread_local int lane = 0;
    return lane;
  }
  int previous_;
};

/// Records the lifetime of a scope as a span. Names must be string literals (kept by pointer).
class Span {
 public:
  /// lane of a Span that names none: the calling thread's (TraceLane).
  static constexpr int kThreadLane = -1;
  /// Starts the span (when tracing is on); the destructor records it. lane as for Trace::record.
  Span(const char* name, const char* category = "compute", int lane = kThreadLane)
      : name_(name), category_(category), lane_(lane == kThreadLane ? TraceLane::current() : lane),
        start_(Trace::global().enabled() ? Trace::global().now_ns() : kNotStarted) {}
  ~Span() {
    // A span begun while tracing was off is not recorded, even if tracing is on by now:
    // its start was never read.
    Trace& t = Trace::global();
    if (start_ != kNotStarted && t.enabled()) t.record(name_, category_, start_, t.now_ns() - start_, lane_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* category_;
  int lane_;
  static constexpr int64_t kNotStarted = -1;  ///< start_ of a span begun with tracing off
  int64_t start_;                             ///< ns since the trace's origin, or kNotStarted
};

}  // namespace gpt
