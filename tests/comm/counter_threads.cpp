// CountingCommunicator counted from several threads at once, as the stages use it: ZeRO-2
// reduces its buckets on a communication thread, ZeRO-3 gathers on a prefetch thread, each
// through a split of the data-parallel counter, while the main thread counts on the
// counter itself. The three add into one tally. This program is built with
// ThreadSanitizer: were the tally's update not under its lock, the concurrent additions
// would be a data race, which the sanitizer reports (and fails the test with its exit
// status 66), however rarely an addition is actually lost. Once the threads are done the
// total is checked too: kCalls all-reduces a thread, kElements floats each.
//   counter_threads     exit 0: the tally is exact and no race was seen
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "common/comm.h"
#include "common/comm_counter.h"
#include "common/comm_internal.h"

int main() {
  using namespace gpt;
  constexpr int kThreads = 3;
  constexpr int64_t kCalls = 20000;
  constexpr size_t kElements = 4;
  const std::unique_ptr<Communicator> world = comm_detail::make_local_world(CommOptions{});
  CountingCommunicator counted(*world);
  std::vector<std::unique_ptr<Communicator>> splits;  // the threads' own channels
  for (int t = 1; t < kThreads; ++t) splits.push_back(counted.split(0, 0));
  const auto run = [](Communicator& comm) {
    float buf[kElements] = {1, 2, 3, 4};
    for (int64_t i = 0; i < kCalls; ++i) comm.all_reduce(buf, kElements, DType::F32);
  };
  std::vector<std::thread> threads;
  for (auto& split : splits) threads.emplace_back(run, std::ref(*split));
  run(counted);
  for (std::thread& t : threads) t.join();

  const CommTally tally = counted.tally();
  const int64_t calls = tally.calls[size_t(CommOp::AllReduce)], bytes = tally.bytes[size_t(CommOp::AllReduce)];
  const int64_t want_calls = kThreads * kCalls, want_bytes = want_calls * int64_t(kElements * sizeof(float));
  if (calls != want_calls || bytes != want_bytes) {
    std::printf("FAIL: counted %lld all-reduces, %lld bytes; %d threads made %lld, %lld bytes\n",
                static_cast<long long>(calls), static_cast<long long>(bytes), kThreads,
                static_cast<long long>(want_calls), static_cast<long long>(want_bytes));
    return 1;
  }
  std::printf("ok   %d threads, %lld all-reduces counted into one tally\n", kThreads, static_cast<long long>(calls));
  return 0;
}
