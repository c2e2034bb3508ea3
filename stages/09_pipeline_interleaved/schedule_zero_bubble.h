// Zero-bubble ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism") on top of 1F1B:
// a chunk's backward is split into B, the gradient of its input (the next rank back
// waits for it), and W, the gradient of its weights (nobody waits for it). B keeps 1F1B's
// place; each rank r holds back its W's by r steps and so runs W's where 1F1B would idle:
//
//   rank r:  warm-up  F x min(p - 1 - r, m)
//            then for micro i = 0..m-1:  F (if any left), B_i, W_{i-r} (if i >= r)
//            then the r W's still owed, in micro-batch order
//
//   p = 4, m = 8, tF = tB = tW:
//   rank 0 |F0 F1 F2 F3  .  .  . B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7 |
//   rank 3 | .  .  . F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7 |
//
// W's run in micro-batch order on every rank, so the weight gradients accumulate in the
// order of stages 07 and 08.
//
// Bubble, with forward tF, input gradient tB and weight gradient tW <= min(tF, tB): the
// last rank starts at (p-1) tF and never waits, having deferred p-1 W's, so for m >= p
// its last B ends at (p-1) tF + m (tF + tB) + (m - p) tW; that gradient needs (p-1) tB to
// reach rank 0, which then runs its last W. The step lasts
//
//   m (tF + tB + tW) + (p - 1)(tF + tB - tW)
//
// of which every rank computes m (tF + tB + tW): idle (p-1)(tF + tB - tW) against 1F1B's
// (p-1)(tF + tB + tW). For m < p the last rank defers all its W's and the idle time is
// (p-1)(tF + tB) - (m-1) tW. Both: idle = (p-1)(tF + tB) - (min(m, p) - 1) tW. With
// tF = tB = tW and m >= p the bubble is (p-1) / (3m + p - 1), at most half of 1F1B's
// (p-1) / (m + p - 1). (For m < p no order can halve it: micro-batch m-1's forward
// and input gradient must cross every rank.)
//
// A W longer than the shorter of tF and tB does not fit the slot it fills: the F or B
// after it starts late by the excess, and the ranks downstream wait for it in turn. Each deferred
// W then saves min(tF, tB) of idle time instead of tW, so for any costs
//
//   idle = (p-1)(tF + tB) - (min(m, p) - 1) min(tW, tF, tB)
//
// which the simulator reproduces for random costs (tests/pp). On CPU ranks a W often
// takes longer than a forward, so the printed theory uses this form.
//
// Memory: rank r holds min(p - r, m) micro-batches awaiting B, as 1F1B, but keeps what
// W needs of r more, so min(p, m) on every rank (1F1B's count, on rank 0, everywhere).
// A micro-batch awaiting its W also keeps the input gradients W reads (BlockGradInputs:
// about 11 C values per token and block at tp 1, beside the activations' 16 C), so each
// costs about 1.7 times a 1F1B micro-batch.
#pragma once
#include "stages/07_pipeline_gpipe/schedule.h"

namespace gpt {

// The actions of `rank` of p for m micro-batches (one chunk per rank). A UserError for
// p < 1 or m < 1.
PipeSchedule zb_h1_schedule(int p, int rank, int m);

// The theory above: the idle share of the step for any costs (one chunk per rank, equal
// stages), and the most micro-batches a rank holds until their W.
double zb_h1_bubble(int p, int m, const PipeCosts& costs);
int zb_h1_max_in_flight(int p, int m);

}  // namespace gpt
