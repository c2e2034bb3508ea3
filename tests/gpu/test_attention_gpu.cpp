// GPU attention ladder (kernels/cuda/attention/, v1 to v5) against the CPU reference
// (gpt::cpu::attention_forward / attention_backward) run in double: the ground truth.
// The backwards that take the forward's output as an input (v3, v4) are held to the exact
// backward of the inputs they get, the output as their forward stored it included.
//
// Every version, fp32 and bf16, on shapes that exercise the edges of the tiles: T = 1
// (a single token), T = 17 (less than one tile), T = 200 (not a multiple of 32), head
// sizes 64 and 128, NH = 3, B = 2. Inputs are uniform in [-1, 1] from a fixed seed;
// for bf16 they are rounded to bf16 on the host first, so the GPU and the reference
// see the same numbers and only the GPU's arithmetic and output rounding differ.
//
// The problems, their ground truth and the bounds, element by element (derived there), are
// in attention_reference.h, shared with test_attention_tolerance.cpp, which checks on the
// CPU, in every build, that the bounds hold for an fp32 emulation of the kernels'
// roundings and reject this test's negative controls (every output off by a constant
// factor: 1 % in fp32, 2 % with bf16 storage, 3 % for the tensor cores).
//
// Without a GPU (cudaGetDeviceCount fails or reports 0) the program exits 77, which
// CTest reports as skipped.
#include "tests/gpu/gpu_test.h"  // Catch2, cuda_ok, bf16 conversions
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/attention/attention.h"
#include "tests/gpu/attention_reference.h"

namespace {

using bf16 = __nv_bfloat16;

using gpt::gpu_test::cuda_ok;
using namespace gpt::attention_test;  // Shape, Problem, Case, Expected

// ---- host <-> device ------------------------------------------------------------------

using gpt::gpu_test::to_elem;
using gpt::gpu_test::to_float;

using gpt::gpu_test::DeviceBuffer;

// The forward's out (and logsumexp, where the version stores one) against the truth,
// element by element within the bounds of `e`.
void check_forward(const Expected& e, const std::vector<float>& out, const std::vector<float>* lse) {
  const double ry = worst_ratio(out, e.out, e.out_bound);
  INFO("out: largest error / bound " << ry);
  CHECK(ry <= 1.0);
  if (lse) {
    const double rl = worst_ratio(*lse, e.lse, e.lse_bound);
    INFO("logsumexp: largest error / bound " << rl);
    CHECK(rl <= 1.0);
  }
}

// dq, dk and dv against the backward of the kernel's inputs (expected()).
void check_backward(const Problem& pr, const Expected& e, const std::vector<float>& dqkv) {
  const int C = pr.s.C();
  const double rq = worst_ratio(dqkv, e.dqkv, e.dqkv_bound, 3, 0, C),
               rk = worst_ratio(dqkv, e.dqkv, e.dqkv_bound, 3, 1, C),
               rv = worst_ratio(dqkv, e.dqkv, e.dqkv_bound, 3, 2, C);
  INFO("largest error / bound: dq " << rq << " (|dq| <= " << pr.dq_max << "), dk " << rk << " (|dk| <= " << pr.dk_max
                                    << "), dv " << rv << " (|dv| <= " << pr.dv_max << ")");
  CHECK(rq <= 1.0);
  CHECK(rk <= 1.0);
  CHECK(rv <= 1.0);
}

std::string describe(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " hs=" + std::to_string(s.hs);
}

constexpr bool is_bf16(float) { return false; }
constexpr bool is_bf16(bf16) { return true; }

// ---- the versions ---------------------------------------------------------------------

template <class E>
void test_v1() {
  for (const Shape& s : kShapes) {
    INFO(describe(s));
    const bool rounded = is_bf16(E{});
    const Case c{Versions::V1, rounded};
    const Problem pr = make_problem(s, c);
    DeviceBuffer<E> qkv(s.qkv_n()), dout(s.out_n()), out(s.out_n()), dqkv(s.qkv_n());
    DeviceBuffer<float> att(gpt::cuda::attention_scores_floats(s.B, s.T, s.NH)),
        dscores(gpt::cuda::attention_scores_floats(s.B, s.T, s.NH)), lse(s.rows_n());
    qkv.upload(pr.qkv);
    dout.upload(pr.dout);
    gpt::cuda::attention_forward_v1(out.p, att.p, qkv.p, s.B, s.T, s.C(), s.NH, lse.p);
    gpt::cuda::attention_backward_v1(dqkv.p, dscores.p, dout.p, qkv.p, att.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "v1");
    const std::vector<float> y = out.download(), l = lse.download();
    const Expected e = expected(pr, c, y);  // v1's backward does not read out
    check_forward(e, y, &l);  // the logsumexps as well, as the flash versions write them
    const std::vector<float> g1 = dqkv.download();
    check_backward(pr, e, g1);
    if (!rounded) {  // accumulates, deterministically: a second call doubles dqkv exactly
      gpt::cuda::attention_backward_v1(dqkv.p, dscores.p, dout.p, qkv.p, att.p, s.B, s.T, s.C(), s.NH);
      const std::vector<float> g2 = dqkv.download();
      size_t differ = 0;
      for (size_t i = 0; i < g1.size(); ++i) differ += g2[i] != 2 * g1[i];
      CHECK(differ == 0);
    }
  }
}

template <class E>
void test_v2_v3() {
  for (const Shape& s : kShapes) {
    INFO(describe(s));
    const bool rounded = is_bf16(E{});
    const Case c{Versions::V2V3, rounded};
    const Problem pr = make_problem(s, c);
    DeviceBuffer<E> qkv(s.qkv_n()), dout(s.out_n()), out(s.out_n()), dqkv(s.qkv_n());
    DeviceBuffer<float> lse(s.rows_n()), dsum(s.rows_n());
    qkv.upload(pr.qkv);
    dout.upload(pr.dout);
    gpt::cuda::attention_forward_v2(out.p, lse.p, qkv.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "v2");
    const std::vector<float> y = out.download(), l = lse.download();
    const Expected e = expected(pr, c, y);  // v3's D from this out
    check_forward(e, y, &l);                // v2: out and logsumexp

    // v3 from v2's out and logsumexp.
    gpt::cuda::attention_backward_v3(dqkv.p, dsum.p, dout.p, qkv.p, out.p, lse.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "v3");
    const std::vector<float> g1 = dqkv.download();
    check_backward(pr, e, g1);
    if (!rounded) {  // accumulates, deterministically: a second call doubles dqkv exactly
      gpt::cuda::attention_backward_v3(dqkv.p, dsum.p, dout.p, qkv.p, out.p, lse.p, s.B, s.T, s.C(), s.NH);
      const std::vector<float> g2 = dqkv.download();
      size_t differ = 0;
      for (size_t i = 0; i < g1.size(); ++i) differ += g2[i] != 2 * g1[i];
      CHECK(differ == 0);
    }
  }
}

int compute_capability_major() {
  int device = 0, major = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "capability");
  return major;
}

// v4 forward and backward (or, with v5_forward, v5's forward and v4's backward from
// it: the pairing training runs on Hopper), bf16.
void test_tensor_cores(bool v5_forward) {
  for (const Shape& s : kShapes) {
    INFO(describe(s) << (v5_forward ? " (v5 forward)" : " (v4 forward)"));
    const Case c{Versions::TensorCores, true};
    const Problem pr = make_problem(s, c);
    DeviceBuffer<bf16> qkv(s.qkv_n()), dout(s.out_n()), out(s.out_n()), dqkv(s.qkv_n());
    DeviceBuffer<float> lse(s.rows_n()), dsum(s.rows_n());
    qkv.upload(pr.qkv);
    dout.upload(pr.dout);
    if (v5_forward)
      gpt::cuda::attention_forward_v5(out.p, lse.p, qkv.p, s.B, s.T, s.C(), s.NH);
    else
      gpt::cuda::attention_forward_v4(out.p, lse.p, qkv.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "forward");
    const std::vector<float> y = out.download(), l = lse.download();
    const Expected e = expected(pr, c, y);  // v4's backward: D from this out
    check_forward(e, y, &l);

    gpt::cuda::attention_backward_v4(dqkv.p, dsum.p, dout.p, qkv.p, out.p, lse.p, s.B, s.T, s.C(), s.NH);
    cuda_ok(cudaDeviceSynchronize(), "v4 backward");
    const std::vector<float> g1 = dqkv.download();
    check_backward(pr, e, g1);
    // Deterministic: the same inputs give the same bits (bf16 accumulation rounds, so
    // the check is a rerun from zero, not a doubling).
    cuda_ok(cudaMemset(dqkv.p, 0, dqkv.n * sizeof(bf16)), "cudaMemset");
    gpt::cuda::attention_backward_v4(dqkv.p, dsum.p, dout.p, qkv.p, out.p, lse.p, s.B, s.T, s.C(), s.NH);
    const std::vector<float> g2 = dqkv.download();
    size_t differ = 0;
    for (size_t i = 0; i < g1.size(); ++i) differ += g2[i] != g1[i];
    CHECK(differ == 0);
  }
}

}  // namespace

TEST_CASE("gpu attention v4 tensor cores (mma.sync): bf16", "[gpu][attention]") {
  if (compute_capability_major() < 8) {
    WARN("v4 needs compute capability 8.0 or newer: not run on this device");
    return;
  }
  test_tensor_cores(false);
}

TEST_CASE("gpu attention v5 Hopper forward (wgmma + TMA) + v4 backward: bf16", "[gpu][attention]") {
  if (compute_capability_major() != 9) {
    // Off Hopper, v5 must refuse clearly rather than launch.
    DeviceBuffer<bf16> qkv(size_t(2) * 8 * 3 * 192), out(size_t(2) * 8 * 192);
    DeviceBuffer<float> lse(size_t(2) * 3 * 8);
    CHECK_THROWS_AS(gpt::cuda::attention_forward_v5(out.p, lse.p, qkv.p, 2, 8, 192, 3), std::invalid_argument);
    WARN("v5 needs a Hopper GPU (compute capability 9.x): only its refusal was checked");
    return;
  }
  test_tensor_cores(true);
}

TEST_CASE("gpu attention v1 naive: fp32", "[gpu][attention]") { test_v1<float>(); }
TEST_CASE("gpu attention v1 naive: bf16", "[gpu][attention]") { test_v1<bf16>(); }
TEST_CASE("gpu attention v2 flash forward + v3 flash backward: fp32", "[gpu][attention]") {
  test_v2_v3<float>();
}
TEST_CASE("gpu attention v2 flash forward + v3 flash backward: bf16", "[gpu][attention]") {
  test_v2_v3<bf16>();
}

TEST_CASE("gpu attention rejects shapes it was not built for", "[gpu][attention]") {
  // Checked before anything touches the device: null pointers are never dereferenced.
  float* none = nullptr;
  CHECK_THROWS_AS(gpt::cuda::attention_forward_v2(none, none, none, 2, 8, 3 * 96, 3), std::invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::attention_backward_v3(none, none, none, none, none, none, 2, 8, 100, 3),
                  std::invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::attention_forward_v1(none, none, none, 2, 0, 192, 3), std::invalid_argument);
}
