// A communication thread: tasks run one after another, in the order submitted, on a
// thread of their own while the main thread goes on computing; wait() blocks until all
// submitted tasks have run. An error in a task is kept and rethrown by wait(), and the
// tasks after it are dropped (a failed communicator must not be waited on again).
//
// Stage 02 hands it finished gradient buckets to all-reduce; the ZeRO stages hand it
// buckets to reduce-scatter. A task that communicates must use a communicator no other
// thread uses at the same time (collectives are matched by order per communicator).
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace gpt {

class CommThread {
 public:
  CommThread();
  ~CommThread();  // runs what is queued, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues a task; returns its ticket (1, 2, 3, ... in submission order).
  long submit(std::function<void()> task);
  void wait();                  // every task submitted so far has run
  void wait_for(long ticket);   // the task with this ticket (and all before it) has run

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  long submitted_ = 0, finished_ = 0;  // tasks run strictly in order
  bool stop_ = false;
  std::exception_ptr error_;
  int gpu_ = -1;  // the creating thread's GPU, made current on this thread too
  std::thread thread_;
};

}  // namespace gpt
