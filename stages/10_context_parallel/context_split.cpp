// The load-balanced causal split; see context_split.h.
#include "stages/10_context_parallel/context_split.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace gpt {

// One rank needs no balancing: zigzag on cp = 1 is the whole sequence, one chunk (so an
// odd seq_len works there).
ContextSplit::ContextSplit(int cp, int rank, bool zigzag, int T)
    : cp_(cp), rank_(rank), Tc_(zigzag && cp > 1 ? T / (2 * cp) : T / cp), zigzag_(zigzag && cp > 1) {
  invariant(cp >= 1 && rank >= 0 && rank < cp && T % (zigzag_ ? 2 * cp : cp) == 0,
            "ContextSplit: T " + std::to_string(T) + " over cp " + std::to_string(cp));
  for (int c = 0; c < (zigzag_ ? 2 : 1); ++c) starts_.push_back(chunk_start(rank, c));
}

int ContextSplit::chunk_start(int rank, int c) const {
  if (!zigzag_) return rank * Tc_;
  return (c == 0 ? rank : 2 * cp_ - 1 - rank) * Tc_;
}

std::vector<int> ContextSplit::positions() const {
  std::vector<int> p;
  for (int s : starts_)
    for (int t = 0; t < Tc_; ++t) p.push_back(s + t);
  return p;
}

void ContextSplit::take(const int32_t* whole, int32_t* part, int B, int T) const {
  for (int b = 0; b < B; ++b)
    for (size_t c = 0; c < starts_.size(); ++c)
      std::memcpy(part + size_t(b) * local_len(T) + c * Tc_, whole + size_t(b) * T + starts_[c], size_t(Tc_) * sizeof(int32_t));
}

int64_t ContextSplit::visible_pairs(int q_pos, int k_pos, int Tc) {
  int64_t n = 0;
  for (int t = 0; t < Tc; ++t) n += std::clamp(q_pos + t - k_pos + 1, 0, Tc);
  return n;
}

int64_t ContextSplit::work(int rank) const {
  int64_t n = 0;
  for (int c = 0; c < chunks(); ++c)
    for (int o = 0; o < cp_; ++o)
      for (int k = 0; k < chunks(); ++k) n += visible_pairs(chunk_start(rank, c), chunk_start(o, k), Tc_);
  return n;
}

std::string ContextSplit::work_line() const {
  std::string line = "attention work per sequence and head (visible query-key pairs), by cp rank:";
  int64_t most = 0, sum = 0;
  for (int r = 0; r < cp_; ++r) {
    const int64_t w = work(r);
    most = std::max(most, w), sum += w;
    line += ' ';  // appended piece by piece: GCC 12 warns (-Wrestrict) falsely on " " + string
    line += std::to_string(w);
  }
  char ratio[48];
  std::snprintf(ratio, sizeof ratio, " | slowest / mean %.3f\n", double(most) * cp_ / double(sum));
  return line + ratio;
}

void check_context_parallel(const Config& cfg) {
  const int cp = cfg.cp;
  require(cfg.cp_split == "zigzag" || cfg.cp_split == "contiguous",
          "cp_split=" + cfg.cp_split + ": must be zigzag or contiguous");
  const int parts = cfg.cp_split == "zigzag" && cp > 1 ? 2 * cp : cp;
  require(cfg.seq_len % parts == 0, "seq_len=" + std::to_string(cfg.seq_len) + " does not divide into " +
                                        std::to_string(parts) + " chunks (cp=" + std::to_string(cp) +
                                        ", cp_split=" + cfg.cp_split + ": " +
                                        (cfg.cp_split == "zigzag" ? "2 x cp" : "cp") + " chunks of equal length)");
  if (cfg.sequence_parallel)
    require((cfg.seq_len / cp) % cfg.tp == 0, "sequence_parallel=true: each rank's seq_len / cp = " +
                                                  std::to_string(cfg.seq_len / cp) + " tokens do not divide by tp=" +
                                                  std::to_string(cfg.tp));
}

}  // namespace gpt
