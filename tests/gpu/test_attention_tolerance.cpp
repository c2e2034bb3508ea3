// The attention test's bounds (attention_reference.h), checked on the CPU on every case the
// GPU test runs (each version pair, fp32 and bf16, every shape, the same seeds):
//   1. they hold for the attention computed in fp32 with the kernels' roundings (outputs
//      stored as bf16, the backward's D from the stored output, P and dS rounded to bf16
//      for the tensor-core versions): a stand-in for a kernel, which shows the bounds
//      leave room for the roundings they model;
//   2. they reject the negative control, each output off the truth by a constant factor (a
//      wrong scale, or a backward run on a dout that much too large), in every output where
//      the truth is not 0 (with T = 1 the one key takes all the attention, so dq and dk are
//      exactly 0). The factor is how tight the bounds are: 1 % in fp32; 2 % with bf16
//      storage (2^-7 of each value for its rounding, plus the fp32 part, which for dk
//      stands on the most any key is attended to); 3 % for the tensor cores, whose
//      rounding of P and dS is bounded by the sums of the terms' sizes, which a gradient
//      made of terms of both signs can be far smaller than.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "tests/gpu/attention_reference.h"

namespace {

using namespace gpt::attention_test;

std::string describe(const Case& c, const Shape& s) {
  return std::string(name(c)) + ", B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
         " NH=" + std::to_string(s.NH) + " hs=" + std::to_string(s.hs);
}

// x as stored: rounded to bf16 for a bf16 case.
std::vector<float> stored(const std::vector<float>& x, bool bf16) {
  std::vector<float> y(x);
  if (bf16)
    for (float& v : y) v = gpt::cpu::bf16_round(v);
  return y;
}

// The negative control's factor for a case (see the top of the file).
double control_factor(const Case& c) {
  if (!c.bf16) return 1.01;
  return c.versions == Versions::TensorCores ? 1.03 : 1.02;
}

std::vector<float> scaled(const std::vector<double>& want, double factor) {
  std::vector<float> x(want.size());
  for (size_t i = 0; i < want.size(); ++i) x[i] = float(want[i] * factor);
  return x;
}

}  // namespace

TEST_CASE("the attention bounds hold for fp32 arithmetic with the kernels' roundings", "[attention_tolerance]") {
  for (const Case& c : kCases)
    for (const Shape& s : kShapes) {
      INFO(describe(c, s));
      const Problem pr = make_problem(s, c);
      const bool rounds_p = c.versions == Versions::TensorCores;
      // The forward, then the backward from the output as stored; v1's backward uses its
      // own probabilities, as if from the unrounded output.
      const Attention<float> forward = attention_as_kernels_round<float>(pr, nullptr, rounds_p);
      const std::vector<float> out = stored(forward.out, c.bf16);
      const std::vector<float>& given = c.versions == Versions::V1 ? forward.out : out;
      const Attention<float> a = attention_as_kernels_round<float>(pr, &given, rounds_p);
      const std::vector<float> dqkv = stored(a.dqkv, c.bf16);
      const Expected e = expected(pr, c, out);

      const int C = s.C();
      const double ry = worst_ratio(out, e.out, e.out_bound), rl = worst_ratio(forward.lse, e.lse, e.lse_bound),
                   rq = worst_ratio(dqkv, e.dqkv, e.dqkv_bound, 3, 0, C),
                   rk = worst_ratio(dqkv, e.dqkv, e.dqkv_bound, 3, 1, C),
                   rv = worst_ratio(dqkv, e.dqkv, e.dqkv_bound, 3, 2, C);
      INFO("largest error / bound: out " << ry << ", lse " << rl << ", dq " << rq << ", dk " << rk << ", dv " << rv);
      CHECK(ry <= 1.0);
      CHECK(rl <= 1.0);
      CHECK(rq <= 1.0);
      CHECK(rk <= 1.0);
      CHECK(rv <= 1.0);
    }
}

TEST_CASE("the attention bounds reject every output off by a constant factor", "[attention_tolerance]") {
  for (const Case& c : kCases)
    for (const Shape& s : kShapes) {
      INFO(describe(c, s));
      const Problem pr = make_problem(s, c);
      const Attention<double> exact = attention_as_kernels_round<double>(pr, nullptr, false);
      std::vector<float> out_given(exact.out.begin(), exact.out.end());
      const Expected e = expected(pr, c, stored(out_given, c.bf16));
      const int C = s.C();
      const double factor = control_factor(c);
      INFO("the truth times " << factor);
      const std::vector<float> dqkv = scaled(e.dqkv, factor);
      const double ry = worst_ratio(scaled(e.out, factor), e.out, e.out_bound),
                   rl = worst_ratio(scaled(e.lse, factor), e.lse, e.lse_bound),
                   rq = worst_ratio(dqkv, e.dqkv, e.dqkv_bound, 3, 0, C),
                   rk = worst_ratio(dqkv, e.dqkv, e.dqkv_bound, 3, 1, C),
                   rv = worst_ratio(dqkv, e.dqkv, e.dqkv_bound, 3, 2, C);
      INFO("largest error / bound: out " << ry << ", lse " << rl << ", dq " << rq << ", dk " << rk << ", dv " << rv);
      CHECK(ry > 1.0);
      CHECK(rl > 1.0);
      CHECK(rv > 1.0);
      if (s.T > 1) {
        CHECK(rq > 1.0);
        CHECK(rk > 1.0);
      } else {  // one key: dq and dk are exactly 0, so no factor can move them
        CHECK(pr.dq_max == 0);
        CHECK(pr.dk_max == 0);
      }
    }
}
