// The communication thread; see comm_thread.h.
#include "stages/02_ddp/comm_thread.h"

#include "common/device.h"
#include "common/trace.h"

namespace gpt {

CommThread::CommThread() : gpu_(current_gpu()) {
  thread_ = std::thread([this] { run(); });
}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

long CommThread::submit(std::function<void()> task) {
  long ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    ticket = ++submitted_;
  }
  cv_.notify_all();
  return ticket;
}

void CommThread::wait() {
  long last;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last = submitted_;
  }
  wait_for(last);
}

void CommThread::wait_for(long ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this, ticket] { return finished_ >= ticket; });
  if (error_) std::rethrow_exception(error_);
}

void CommThread::run() {
  const TraceLane lane(1);  // the spans this thread opens, the ring's ops' too, on its own row
  // The GPU is per host thread: this thread's copies and kernels (the ring's additions)
  // go to the rank's GPU, on the legacy default stream, so they run after the kernels
  // the main thread queued before handing over a bucket.
  try {
    use_gpu(gpu_);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  for (;;) {
    std::function<void()> task;
    bool failed;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      failed = error_ != nullptr;
    }
    if (!failed) {  // after an error the communicator is broken: drop the task
      try {
        task();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++finished_;
    }
    cv_.notify_all();
  }
}

}  // namespace gpt
