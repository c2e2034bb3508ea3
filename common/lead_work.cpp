// The lead rank's reports to the ranks waiting for it; see lead_work.h.
#include "common/lead_work.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace gpt {

namespace {
constexpr double kDone = 0, kWorking = 1;  // a report: one double
}

LeadWork::LeadWork(Communicator& world, int lead)
    : world_(world),
      lead_(lead),
      // At most a day: a timeout of 1e12 s (a wait "forever") would overflow the clock's count.
      interval_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(std::min(world.timeout_s() / 4, 86400.0)))),
      last_report_(std::chrono::steady_clock::now()) {
  invariant(lead >= 0 && lead < world.size(), "LeadWork: lead " + std::to_string(lead) + " is not a rank");
}

void LeadWork::progress() {
  invariant(world_.rank() == lead_, "LeadWork::progress: called on a rank that is not the lead");
  if (std::chrono::steady_clock::now() - last_report_ >= interval_) report(kWorking);
}

void LeadWork::done() {
  invariant(world_.rank() == lead_, "LeadWork::done: called on a rank that is not the lead");
  report(kDone);
  world_.wait_all(in_flight_);
}

// One report to every other rank. The previous round is waited for first: its buffer is
// reused, and a rank that took none of it within a timeout is lost (the wait says so).
void LeadWork::report(double working) {
  world_.wait_all(in_flight_);
  in_flight_.clear();
  sent_ = working;
  for (int r = 0; r < world_.size(); ++r)
    if (r != lead_) in_flight_.push_back(world_.isend(&sent_, 1, DType::F64, r, kLeadWorkTag));
  last_report_ = std::chrono::steady_clock::now();
}

void LeadWork::wait_for_lead() {
  invariant(world_.rank() != lead_, "LeadWork::wait_for_lead: called on the lead");
  try {
    for (double report = kWorking; report != kDone;)
      world_.recv(&report, 1, DType::F64, lead_, kLeadWorkTag);
  } catch (const UserError& e) {  // the timeout's words, and what the wait was for
    fail(std::string(e.what()) + " (waiting for rank " + std::to_string(lead_) +
         "'s reports on its work alone: the end-of-run sample)");
  }
}

}  // namespace gpt
