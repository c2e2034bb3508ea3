// Which tokens of each sequence a context-parallel rank runs.
//
// Causal attention is lopsided: the query at position t looks at t + 1 keys, so the last
// tokens of a sequence cost far more than the first. Cut the sequence into cp contiguous
// chunks (`contiguous`) and rank r's queries see about (2r + 1) / (2 cp) of the keys on
// average: the last rank does 1 + 2(cp - 1) Tc/(Tc + 1) times the first one's work (6.8x
// at cp = 4 and chunks of Tc = 32 tokens; 2cp - 1 = 7x for long chunks) and the others
// wait for it. Cut it into 2 cp chunks instead and give rank r chunks r and
// 2cp - 1 - r (`zigzag`): every rank gets one early and one late chunk, and the same
// number of visible (query, key) pairs,
//
//   work(r) = (r + 2cp-1-r) Tc^2 + 2 Tc (Tc + 1) / 2 = (2cp - 1) Tc^2 + Tc (Tc + 1)   for every r
//
// (Tc = T / 2cp; a chunk at index i sees the i whole chunks before it, Tc^2 pairs each,
// and the lower triangle of its own, Tc (Tc + 1) / 2).
// The positions and targets of the local tokens follow the chunks they come from.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/driver.h"

namespace gpt {

class ContextSplit : public SequencePart {
 public:
  // seq_len T must divide into 2 cp chunks (zigzag) or cp chunks (contiguous): the
  // caller checks it with a message naming the keys (check_context_parallel).
  ContextSplit(int cp, int rank, bool zigzag, int T);

  int rank() const { return rank_; }
  int chunks() const { return int(starts_.size()); }  // per rank: 2 (zigzag) or 1
  int chunk_len() const { return Tc_; }
  // Position of chunk c of rank `rank`'s tokens (any rank: the ring needs its peers').
  int chunk_start(int rank, int c) const;
  // The position of each local token (T / cp of them).
  std::vector<int> positions() const;

  void take(const int32_t* whole, int32_t* part, int B, int T) const override;
  int local_len(int T) const override { return T / cp_; }

  // Visible (query, key) pairs of a query chunk at q_pos against a key chunk at k_pos,
  // both Tc long: the attention work of one block.
  static int64_t visible_pairs(int q_pos, int k_pos, int Tc);
  // This rank's attention work of one sequence and head: its chunks against every chunk.
  int64_t work(int rank) const;
  // One line: every cp rank's work and the slowest over the mean (1 when balanced).
  std::string work_line() const;

 private:
  int cp_, rank_, Tc_;
  bool zigzag_;
  std::vector<int> starts_;  // this rank's chunks
};

// UserErrors naming the keys: seq_len not divisible by 2 cp (zigzag) or cp (contiguous);
// with sequence parallelism, the local seq_len / cp not divisible by tp; cp_split unknown.
void check_context_parallel(const Config& cfg);

}  // namespace gpt
