// Ranks simulated by threads of one process, for tests of the model's pieces under a
// parallel layout: the collectives a hook needs, written with a barrier. Sums run over
// the ranks in rank order, so every rank gets the same bits.
#pragma once
#include <barrier>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

namespace gpt::test {

class ThreadGroup {
 public:
  explicit ThreadGroup(int ranks) : sync_(ranks), published_(size_t(ranks)) {}
  int size() const { return int(published_.size()); }

  // Runs body(rank) on every rank at once.
  void run(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }

  // buf (count values) becomes the sum over ranks on every rank.
  void all_reduce(int rank, double* buf, size_t count) {
    publish(rank, buf);
    std::vector<double> sum(count, 0.0);
    for (const double* p : published_)
      for (size_t i = 0; i < count; ++i) sum[i] += p[i];
    sync_.arrive_and_wait();  // everyone has read every buffer
    std::copy(sum.begin(), sum.end(), buf);
    sync_.arrive_and_wait();
  }
  // recv (size() * count) receives every rank's send (count), rank r's at r * count.
  void all_gather(int rank, const double* send, double* recv, size_t count) {
    publish(rank, send);
    for (size_t r = 0; r < published_.size(); ++r) std::copy(published_[r], published_[r] + count, recv + r * count);
    sync_.arrive_and_wait();
  }
  // recv (count) receives chunk `rank` of the sum over ranks of send (size() * count).
  void reduce_scatter(int rank, const double* send, double* recv, size_t count) {
    publish(rank, send);
    std::vector<double> sum(count, 0.0);
    for (const double* p : published_)
      for (size_t i = 0; i < count; ++i) sum[i] += p[size_t(rank) * count + i];
    sync_.arrive_and_wait();
    std::copy(sum.begin(), sum.end(), recv);
    sync_.arrive_and_wait();
  }

 private:
  void publish(int rank, const double* p) {
    published_[size_t(rank)] = p;
    sync_.arrive_and_wait();
  }
  std::barrier<> sync_;
  std::vector<const double*> published_;
};

}  // namespace gpt::test
