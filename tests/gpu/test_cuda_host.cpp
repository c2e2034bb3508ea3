// The host side of the CUDA kernels, on any machine with a CUDA build, GPU or not: every
// check that must refuse a bad call before anything reaches the device. A call that got
// past its checks on a machine without a GPU would fail with std::runtime_error (the
// CUDA error), not std::invalid_argument, so each CHECK_THROWS_AS below also proves the
// refusal happens first, naming the argument.
//
// What a GPU is needed for (the kernels' results) is in the other files of this folder.
#include <catch2/catch.hpp>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/bf16.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/cublaslt_library.h"
#include "kernels/cuda/gemm/gemm.h"

namespace {

using gpt::cuda::GemmArgs;
using gpt::cuda::GemmVersion;
using nv_bf16 = __nv_bfloat16;

constexpr GemmVersion kAllVersions[] = {GemmVersion::Cublas, GemmVersion::V1, GemmVersion::V2,
                                        GemmVersion::V3,     GemmVersion::V4, GemmVersion::V5};

// The message of the exception E that f throws ("" if it throws nothing).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

// The message of the std::invalid_argument that f throws ("" if it throws nothing).
template <class F>
std::string refusal(F&& f) {
  return message_of<std::invalid_argument>(std::forward<F>(f));
}

bool has_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

// A valid 16 x 16 x 16 NT product (the forward's layout) on 16-byte aligned host storage:
// the checks only look at the pointers' values, and none of these calls gets further.
template <class T>
GemmArgs<T, T> valid_call() {
  alignas(256) static T storage[16 * 16] = {};
  GemmArgs<T, T> a;
  a.trans_b = true;
  a.M = a.N = a.K = 16;
  a.A = a.B = storage;
  a.C = storage;
  a.lda = a.ldb = a.ldc = 16;
  return a;
}

}  // namespace

TEST_CASE("gemm refuses bad shapes and strides, naming them, for every version", "[cuda_host]") {
  for (GemmVersion v : kAllVersions) {
    INFO("version " << gpt::cuda::gemm_version_name(v));
    auto a = valid_call<nv_bf16>();
    a.M = 0;
    CHECK(refusal([&] { gpt::cuda::gemm(v, a); }).find("M = 0") != std::string::npos);
    a = valid_call<nv_bf16>();
    a.A = nullptr;
    CHECK(refusal([&] { gpt::cuda::gemm(v, a); }).find("A is null") != std::string::npos);
    a = valid_call<nv_bf16>();
    a.lda = 15;  // A is stored M x K = 16 x 16: rows of 16
    CHECK(refusal([&] { gpt::cuda::gemm(v, a); }).find("lda = 15") != std::string::npos);
    a = valid_call<nv_bf16>();
    a.trans_b = false;
    a.ldb = 8;  // B stored K x N: rows of N = 16
    CHECK(refusal([&] { gpt::cuda::gemm(v, a); }).find("ldb = 8") != std::string::npos);
    a = valid_call<nv_bf16>();
    a.accumulate = true;
    a.gelu_out = a.C;
    CHECK(refusal([&] { gpt::cuda::gemm(v, a); }).find("gelu_out with accumulate") != std::string::npos);
  }
}

TEST_CASE("the tensor-core GEMMs say beforehand which calls they cannot take", "[cuda_host]") {
  for (GemmVersion v : {GemmVersion::V4, GemmVersion::V5}) {
    INFO("version " << gpt::cuda::gemm_version_name(v));
    // fp32 inputs: v4 and v5 are bf16 only.
    CHECK_FALSE(gpt::cuda::gemm_version_supports(v, valid_call<float>()));
    CHECK_THROWS_AS(gpt::cuda::gemm(v, valid_call<float>()), std::invalid_argument);
    // A row stride that is not a multiple of 8 elements (16 bytes).
    auto a = valid_call<nv_bf16>();
    a.M = a.K = 12;
    a.lda = 12;
    CHECK_FALSE(gpt::cuda::gemm_version_supports(v, a));
    CHECK_THROWS_AS(gpt::cuda::gemm(v, a), std::invalid_argument);
    // A misaligned base pointer.
    a = valid_call<nv_bf16>();
    a.A = a.A + 1;
    CHECK_FALSE(gpt::cuda::gemm_version_supports(v, a));
  }
  if (!has_gpu()) {  // no device: no tensor cores
    CHECK_FALSE(gpt::cuda::gemm_version_supports(GemmVersion::V4, valid_call<nv_bf16>()));
    CHECK_FALSE(gpt::cuda::gemm_version_supports(GemmVersion::V5, valid_call<nv_bf16>()));
  }
  // v1..v3 and cuBLAS take every valid call.
  for (GemmVersion v : {GemmVersion::Cublas, GemmVersion::V1, GemmVersion::V2, GemmVersion::V3})
    CHECK(gpt::cuda::gemm_version_supports(v, valid_call<float>()));
}

TEST_CASE("set_gemm takes the documented names and refuses others, naming them", "[cuda_host]") {
  for (const char* name : {"hand", "cublas", "v1", "v2", "v3", "v4", "v5"}) CHECK_NOTHROW(gpt::cuda::set_gemm(name));
  const std::string why = refusal([] { gpt::cuda::set_gemm("bogus"); });
  CHECK(why.find("bogus") != std::string::npos);
  CHECK(why.find("cublas") != std::string::npos);  // and lists the choices
  CHECK_THROWS_AS(gpt::cuda::set_gemm("V3"), std::invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::set_gemm(nullptr), std::invalid_argument);
  gpt::cuda::set_gemm("hand");
  // "hand" steps down the ladder to what the device can run: without a GPU, v3.
  if (!has_gpu()) {
    CHECK(std::string(gpt::cuda::gemm_in_use(true)) == "v3");
    CHECK(std::string(gpt::cuda::gemm_in_use(false)) == "v3");
  } else {
    CHECK(std::string(gpt::cuda::gemm_in_use(false)) == "v3");  // fp32: v4/v5 are bf16 only
  }
  gpt::cuda::set_gemm("v2");
  CHECK(std::string(gpt::cuda::gemm_in_use(true)) == "v2");  // a rung below v4 is taken as asked
  gpt::cuda::set_gemm("hand");
}

TEST_CASE("attention versions refuse shapes they were not built for", "[cuda_host]") {
  float* none = nullptr;
  nv_bf16* none_bf16 = nullptr;
  // hs = 96: the flash versions are compiled for 64 and 128.
  CHECK(refusal([&] { gpt::cuda::attention_forward_v2(none, none, none, 2, 8, 3 * 96, 3); })
            .find("head size") != std::string::npos);
  CHECK_THROWS_AS(gpt::cuda::attention_forward_v4(none_bf16, none, none_bf16, 2, 8, 3 * 96, 3),
                  std::invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::attention_forward_v5(none_bf16, none, none_bf16, 2, 8, 3 * 96, 3),
                  std::invalid_argument);
  // T = 0, C not a multiple of NH.
  CHECK_THROWS_AS(gpt::cuda::attention_forward_v1(none, none, none, 2, 0, 192, 3), std::invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::attention_backward_v3(none, none, none, none, none, none, 2, 8, 100, 3),
                  std::invalid_argument);
  // v5 reads qkv with TMA: a base that is not 16-byte aligned is refused.
  alignas(16) static nv_bf16 qkv[2 * 8 * 3 * 192 + 1];
  alignas(16) static nv_bf16 out[2 * 8 * 192];
  CHECK(refusal([&] { gpt::cuda::attention_forward_v5(out, none, qkv + 1, 2, 8, 192, 3); })
            .find("16-byte aligned") != std::string::npos);
}

TEST_CASE("the memory-bound ops refuse null pointers and empty shapes", "[cuda_host]") {
  gpt::bf16* none = nullptr;
  float* nonef = nullptr;
  const int32_t* no_targets = nullptr;
  CHECK_THROWS_AS(gpt::cuda::layernorm_forward(none, nonef, nonef, none, none, none, 4, 8), std::invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::layernorm_forward(none, nonef, nonef, none, none, none, 0, 8), std::invalid_argument);
  CHECK(refusal([&] { gpt::cuda::softmax_crossentropy(nonef, none, none, no_targets, 1.0f, 4, 10, 8); })
            .find("Vp = 8") != std::string::npos);
  CHECK_THROWS_AS(gpt::cuda::softmax_crossentropy(nonef, none, none, no_targets, 1.0f, 4, 8, 8),
                  std::invalid_argument);
  CHECK_THROWS_AS(gpt::cuda::gelu_forward(none, none, 16), std::invalid_argument);
}

TEST_CASE("the vocabulary-range ops refuse null pointers and impossible ranges", "[cuda_host]") {
  float* nonef = nullptr;
  const int32_t* no_tokens = nullptr;
  alignas(16) static float buf[64] = {};
  alignas(16) static int32_t tokens[8] = {};
  // A range that ends before it starts, a negative first position.
  CHECK(refusal([&] { gpt::cuda::embedding_range_forward(buf, tokens, buf, 5, 4, nonef, 0, 1, 2, 4); })
            .find("vocabulary range [5, 4)") != std::string::npos);
  CHECK(refusal([&] { gpt::cuda::embedding_range_backward(buf, buf, buf, tokens, 0, 4, -1, 1, 2, 4); })
            .find("first position -1") != std::string::npos);
  // A non-empty range needs its rows; the tokens are always needed.
  CHECK(refusal([&] { gpt::cuda::embedding_range_forward(buf, tokens, nonef, 0, 4, nonef, 0, 1, 2, 4); })
            .find("wte") != std::string::npos);
  CHECK(refusal([&] { gpt::cuda::embedding_range_backward(buf, buf, buf, no_tokens, 0, 4, 0, 1, 2, 4); })
            .find("tokens") != std::string::npos);
  // The cross-entropy of a range: no rows, a negative v0, null statistics.
  CHECK(refusal([&] { gpt::cuda::crossentropy_stats(buf, buf, buf, buf, tokens, 0, 10, 0, 8); })
            .find("N = 0") != std::string::npos);
  CHECK(refusal([&] { gpt::cuda::crossentropy_stats(buf, buf, buf, buf, tokens, -8, 10, 2, 8); })
            .find("v0 = -8") != std::string::npos);
  CHECK(refusal([&] {
          gpt::cuda::crossentropy_from_stats(buf, buf, buf, nonef, buf, buf, tokens, 1.0f, 0, 10, 2, 8);
        }).find("row_max") != std::string::npos);
}

// Whether a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}


// cuBLASLt is not linked but opened by the first gemm=cublas (cublaslt_library.h): a
// process that never asks for it does not map it, and one that does finds every function.
// (No other test case of this program opens it, so the first check holds in any order.)
TEST_CASE("cuBLASLt is opened on first use, not at start, and a missing one is named", "[cuda_host]") {
  CHECK_FALSE(mapped("libcublasLt"));  // linked, it would be mapped from the start
  const gpt::cuda::CublasLt& lt = gpt::cuda::cublaslt();
  CHECK(mapped("libcublasLt"));
  CHECK(std::string(lt.cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
  CHECK(lt.cublasLtMatmul != nullptr);
  CHECK(&gpt::cuda::cublaslt() == &lt);  // opened once

  // No such file: every file tried is named with the loader's reason, and the way around.
  const std::string missing =
      message_of<std::runtime_error>([] { gpt::cuda::open_cublaslt({"/nonexistent/libcublasLt.so", "libnone.so.1"}); });
  CHECK(missing.find("could not be loaded") != std::string::npos);
  CHECK(missing.find("/nonexistent/libcublasLt.so: ") != std::string::npos);
  CHECK(missing.find("libnone.so.1: ") != std::string::npos);
  CHECK(missing.find("gemm=hand") != std::string::npos);
  // A library that loads but is not cuBLASLt: the first function it lacks is named.
  const std::string not_cublaslt = message_of<std::runtime_error>([] { gpt::cuda::open_cublaslt({"libm.so.6"}); });
  CHECK(not_cublaslt.find("no function cublasLtCreate") != std::string::npos);
}
