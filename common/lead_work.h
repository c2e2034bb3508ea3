/// @file
/// ```
/// Work the lead rank does alone while the others wait: the end-of-run sample.
///   lead:    progress() after each unit of work; it sends "working" to every other rank
///            at most once per timeout / 4, and done() sends "done"
///   others:  wait_for_lead() receives until "done"; each receive waits at most the
///            communicator's timeout
/// ```
/// A plain barrier would bound the whole sample by one timeout, which a long enough
/// sample outlasts; waiting for reports bounds only the gap between two of them. So a
/// sample may take any time, and a lead that hangs in it (no report for a whole timeout)
/// is still named, by the waiting rank's receive and its roll call.
#pragma once
#include <chrono>
#include <vector>

#include "common/comm.h"

namespace gpt {

/// One stretch of lead-only work on `world`; every rank makes one, with the same world.
/// The lead calls progress() as often as it likes and done() once at the end; every other
/// rank calls wait_for_lead() once. The reports are point-to-point messages with tag
/// kLeadWorkTag on `world`, which nothing else may use meanwhile.
class LeadWork {
 public:
  static constexpr int kLeadWorkTag = 0;  ///< the tag of the reports on the world communicator

  /// `lead` is the rank that works (0 in the driver). Reads world's timeout now: put any
  /// LongerTimeout in place before.
  LeadWork(Communicator& world, int lead);
  /// The lead: still working. Sends a report when a quarter of the timeout has passed
  /// since the last one (or since the start); otherwise costs one clock read.
  void progress();
  /// The lead: finished. Sends "done" to every other rank and waits for those sends.
  void done();
  /// Every rank but the lead: returns when the lead reports "done"; fails (a timeout of
  /// the world communicator, which names the lead and takes its roll call) when no report
  /// comes for a whole timeout.
  void wait_for_lead();

 private:
  void report(double working);

  Communicator& world_;
  int lead_;
  std::chrono::steady_clock::duration interval_;
  std::chrono::steady_clock::time_point last_report_;
  double sent_ = 0;               // the report in flight: isend's buffer must outlive its wait
  std::vector<Request> in_flight_;  // the last round of reports, waited for before the next
};

}  // namespace gpt
