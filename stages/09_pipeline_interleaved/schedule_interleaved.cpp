// Interleaved 1F1B; see schedule_interleaved.h.
#include "stages/09_pipeline_interleaved/schedule_interleaved.h"

#include <algorithm>
#include <utility>

namespace gpt {

std::vector<int> interleaved_groups(int p, int m) {
  const int n = std::max(1, m / p);
  std::vector<int> sizes;
  for (int k = 0; k < n; ++k) sizes.push_back(m / n + (k < m % n ? 1 : 0));
  return sizes;
}

PipeSchedule interleaved_schedule(int p, int rank, int m, int v) {
  check_pipeline_shape(p, rank, m, v);
  // The order in which this rank meets (micro, chunk) pairs going forward and backward.
  std::vector<std::pair<int, int>> forwards, backwards;
  const std::vector<int> groups = interleaved_groups(p, m);
  int first = 0;
  for (int g : groups) {
    for (int c = 0; c < v; ++c)
      for (int i = first; i < first + g; ++i) {
        forwards.push_back({i, c});
        backwards.push_back({i, v - 1 - c});
      }
    first += g;
  }
  const int total = v * m;
  const int warmup = std::min(total, (v - 1) * groups[0] + p - 1 - rank);
  PipeSchedule s;
  int f = 0, b = 0;
  auto forward = [&] { append_forward(s, p, rank, v, forwards[size_t(f)].first, forwards[size_t(f)].second), ++f; };
  auto backward = [&] { append_backward(s, p, rank, v, backwards[size_t(b)].first, backwards[size_t(b)].second), ++b; };
  while (f < warmup) forward();
  while (f < total) forward(), backward();  // steady state
  while (b < total) backward();             // cool-down
  return s;
}

double interleaved_bubble(int p, int m, int v) {
  // One expression for the header's two cases: m >= p gives hi = m, lo = p, so
  // (p - 1) / (v m + p - 1); m < p gives hi = p, lo = m, so (v (p - m) + m - 1) / (v p + m - 1).
  const int hi = std::max(m, p), lo = std::min(m, p);
  return double(v * (hi - m) + lo - 1) / double(v * hi + lo - 1);
}

int interleaved_max_in_flight(int p, int rank, int m, int v) {
  return std::min(v * m, (v - 1) * interleaved_groups(p, m)[0] + p - rank);
}

}  // namespace gpt
