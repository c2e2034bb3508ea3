// Every CPU kernel computes the same bits on 1 thread as on 3: no sum's order depends on
// OpenMP's team, and a loop too small to wake the threads (kernels/cpu/parallel.h) runs
// on the caller alone, which must give the bits the team gives. Each op runs at a size
// above its threshold, checked first, so that on 3 threads the team does share the loop.
// Control: a float sum written as a plain OpenMP reduction, whose partial sums are the
// team's, must give other bits on 1 and 3 threads, or the comparison could not see a
// thread-dependent kernel.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/parallel.h"
#include "tests/ops/gradcheck.h"

namespace cpu = gpt::cpu;
using gpt::bf16;
using gpt::test::Rng;

namespace {

std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * float(rng.normal());
  return v;
}

std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = rng.below(vocab);
  return t;
}

// Appends the bytes of a buffer to a run's result, so one comparison covers every output.
template <class T>
void append(std::vector<unsigned char>& out, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
}

// The op's outputs, computed with `threads` OpenMP threads.
std::vector<unsigned char> on_threads(int threads, const std::function<std::vector<unsigned char>()>& op) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<unsigned char> result = op();
  omp_set_num_threads(saved);
  return result;
}

// The op on 1 thread and on 3, byte for byte.
void require_same_bits(const std::string& what, const std::function<std::vector<unsigned char>()>& op) {
  INFO(what);
  const std::vector<unsigned char> one = on_threads(1, op), three = on_threads(3, op);
  REQUIRE(!one.empty());
  REQUIRE(one.size() == three.size());
  CHECK(std::memcmp(one.data(), three.data(), one.size()) == 0);
}

}  // namespace

TEST_CASE("threads: the control, a plain OpenMP float reduction, differs between 1 and 3 threads", "[ops][threads]") {
  const std::vector<float> x = random_floats(100003, 1, 1000.0f);
  auto sum = [&] {
    float s = 0;
#pragma omp parallel for reduction(+ : s)
    for (size_t i = 0; i < x.size(); ++i) s += x[i];
    std::vector<unsigned char> out(sizeof s);
    std::memcpy(out.data(), &s, sizeof s);
    return out;
  };
  CHECK(on_threads(1, sum) != on_threads(3, sum));
}

TEST_CASE("threads: fp32 kernels give the same bits on 1 and 3 threads", "[ops][threads]") {
  SECTION("matmul forward and backward (GEMM, bias, bias gradient)") {
    const int N = 256, C = 64, OC = 256;
    REQUIRE(cpu::worth_threads_macs(double(N) * C * OC));
    REQUIRE(cpu::worth_threads(double(N) * OC));
    const auto inp = random_floats(size_t(N) * C, 2), w = random_floats(size_t(OC) * C, 3),
               bias = random_floats(OC, 4), dout = random_floats(size_t(N) * OC, 5);
    require_same_bits("matmul", [&] {
      std::vector<float> out(size_t(N) * OC), dinp(inp.size()), dw(w.size()), dbias(OC);
      cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
      cpu::matmul_backward(dinp.data(), dw.data(), dbias.data(), dout.data(), inp.data(), w.data(), N, C, OC);
      std::vector<unsigned char> r;
      append(r, out), append(r, dinp), append(r, dw), append(r, dbias);
      return r;
    });
  }
  SECTION("layernorm forward and backward") {
    const int N = 64, C = 768;
    REQUIRE(cpu::worth_threads(double(N) * C));
    const auto inp = random_floats(size_t(N) * C, 6), w = random_floats(C, 7), b = random_floats(C, 8),
               dout = random_floats(size_t(N) * C, 9);
    require_same_bits("layernorm", [&] {
      std::vector<float> out(inp.size()), mean(N), rstd(N), dinp(inp.size()), dw(C), db(C);
      cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
      cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                              rstd.data(), N, C);
      std::vector<unsigned char> r;
      append(r, out), append(r, mean), append(r, rstd), append(r, dinp), append(r, dw), append(r, db);
      return r;
    });
  }
  SECTION("elementwise: gelu, residual, scale") {
    const size_t n = 65536;
    REQUIRE(cpu::worth_threads(double(n)));
    const auto x = random_floats(n, 10), y = random_floats(n, 11), d = random_floats(n, 12);
    require_same_bits("elementwise", [&] {
      std::vector<float> g(n), dg(n), sum(n), da(n, 0.5f), db(n, -0.25f);
      cpu::gelu_forward(g.data(), x.data(), n);
      cpu::gelu_backward(dg.data(), x.data(), d.data(), n);
      cpu::residual_forward(sum.data(), x.data(), y.data(), n);
      cpu::residual_backward(da.data(), db.data(), d.data(), n);
      cpu::scale(sum.data(), n, 0.3f);
      std::vector<unsigned char> r;
      append(r, g), append(r, dg), append(r, sum), append(r, da), append(r, db);
      return r;
    });
  }
  SECTION("embedding forward and backward") {
    const int B = 4, T = 64, C = 256, V = 100;
    REQUIRE(cpu::worth_threads(double(B) * T * C));
    const auto wte = random_floats(size_t(V) * C, 13), wpe = random_floats(size_t(T) * C, 14),
               dout = random_floats(size_t(B) * T * C, 15);
    const auto tokens = random_tokens(size_t(B) * T, V, 16);
    require_same_bits("embedding", [&] {
      std::vector<float> out(dout.size()), dwte(wte.size()), dwpe(wpe.size());
      cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
      cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
      std::vector<unsigned char> r;
      append(r, out), append(r, dwte), append(r, dwpe);
      return r;
    });
  }
  SECTION("cross-entropy: fused, and from a vocabulary range's statistics") {
    const int N = 64, V = 1000, Vp = 1024;
    REQUIRE(cpu::worth_threads(double(N) * Vp));
    const auto logits = random_floats(size_t(N) * Vp, 17, 3.0f);
    const auto targets = random_tokens(N, V, 18);
    require_same_bits("cross-entropy", [&] {
      std::vector<float> losses(N), dlogits(logits.size()), mx(N), se(N), tl(N), losses2(N), dlogits2(logits.size());
      cpu::softmax_crossentropy(losses.data(), dlogits.data(), logits.data(), targets.data(), 1.0f / N, N, V, Vp);
      cpu::crossentropy_stats(mx.data(), se.data(), tl.data(), logits.data(), targets.data(), 0, V, N, Vp);
      cpu::crossentropy_from_stats(losses2.data(), dlogits2.data(), logits.data(), mx.data(), se.data(), tl.data(),
                                   targets.data(), 1.0f / N, 0, V, N, Vp);
      std::vector<unsigned char> r;
      append(r, losses), append(r, dlogits), append(r, mx), append(r, se), append(r, tl), append(r, losses2),
          append(r, dlogits2);
      return r;
    });
  }
  SECTION("attention, naive and flash, forward and backward") {
    const int B = 2, T = 128, C = 128, NH = 4;
    REQUIRE(cpu::worth_threads_macs(double(B) * NH * T * T * (C / NH)));
    const auto qkv = random_floats(size_t(B) * T * 3 * C, 19), dout = random_floats(size_t(B) * T * C, 20);
    require_same_bits("attention", [&] {
      std::vector<float> out(dout.size()), att(size_t(B) * NH * T * T), dqkv(qkv.size()), fout(dout.size()),
          lse(size_t(B) * NH * T), fdqkv(qkv.size());
      cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
      cpu::flash_attention_forward(fout.data(), lse.data(), qkv.data(), B, T, C, NH, 32, 16);
      cpu::flash_attention_backward(fdqkv.data(), dout.data(), qkv.data(), fout.data(), lse.data(), B, T, C, NH,
                                    32, 16);
      std::vector<unsigned char> r;
      append(r, out), append(r, att), append(r, dqkv), append(r, fout), append(r, lse), append(r, fdqkv);
      return r;
    });
  }
  SECTION("optimizer: sum of squares and AdamW (with its bf16 copy)") {
    const size_t n = 1 << 17;
    REQUIRE(cpu::worth_threads(double(n)));
    const auto p0 = random_floats(n, 21), g = random_floats(n, 22), m0 = random_floats(n, 23, 0.1f);
    std::vector<float> v0 = random_floats(n, 24);
    for (float& x : v0) x *= x;  // a second moment is never negative
    require_same_bits("optimizer", [&] {
      const gpt::ops::AdamWArgs args{1e-3, 0.9, 0.95, 1e-8, 0.1, 0.7, 3};
      std::vector<float> p = p0, m = m0, v = v0, copy(n);
      const double sumsq = cpu::sum_of_squares(g.data(), n);
      cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, args, copy.data(), true);
      std::vector<unsigned char> r;
      append(r, std::vector<double>{sumsq}), append(r, p), append(r, m), append(r, v), append(r, copy);
      return r;
    });
  }
}

TEST_CASE("threads: bf16 kernels give the same bits on 1 and 3 threads", "[ops][threads][bf16]") {
  const int B = 4, T = 64, C = 256, V = 100, N = 64, Vl = 1024;
  REQUIRE(cpu::worth_threads(double(B) * T * C));
  REQUIRE(cpu::worth_threads(double(N) * Vl));
  const auto wte32 = random_floats(size_t(V) * C, 25), wpe32 = random_floats(size_t(T) * C, 26),
             logits32 = random_floats(size_t(N) * Vl, 27, 3.0f);
  const auto tokens = random_tokens(size_t(B) * T, V, 28);
  const auto targets = random_tokens(N, 1000, 29);
  require_same_bits("bf16", [&] {
    std::vector<bf16> wte(wte32.size()), wpe(wpe32.size()), logits(logits32.size()), out(size_t(B) * T * C),
        dlogits(logits32.size());
    cpu::convert(wte.data(), wte32.data(), wte.size());
    cpu::convert(wpe.data(), wpe32.data(), wpe.size());
    cpu::convert(logits.data(), logits32.data(), logits.size());
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    std::vector<float> widened(out.size()), mx(N), se(N), tl(N), losses(N), rounded = logits32;
    cpu::convert(widened.data(), out.data(), out.size());
    cpu::crossentropy_stats(mx.data(), se.data(), tl.data(), logits.data(), targets.data(), 0, 1000, N, Vl);
    cpu::crossentropy_from_stats(losses.data(), dlogits.data(), logits.data(), mx.data(), se.data(), tl.data(),
                                 targets.data(), 1.0f / N, 0, 1000, N, Vl);
    cpu::round_to_bf16(rounded.data(), rounded.size());
    std::vector<unsigned char> r;
    append(r, widened), append(r, mx), append(r, se), append(r, tl), append(r, losses), append(r, dlogits),
        append(r, rounded);
    return r;
  });
}

// zero_bytes splits the bytes into one share a thread: every byte of the range must be
// zero and none outside it touched, on 1, 2 and 3 threads, for sizes that divide into
// neither 64-byte lines nor thread shares evenly and an unaligned start, and for one
// below the threshold (one thread alone).
TEST_CASE("threads: zero_bytes clears exactly its range on any thread count", "[ops][threads]") {
  const size_t guard = 100;
  for (const size_t bytes : {size_t(1000003), size_t(262147), size_t(4096), size_t(7)}) {
    for (const int threads : {1, 2, 3}) {
      INFO(bytes << " bytes on " << threads << " threads");
      std::vector<unsigned char> buffer(bytes + 2 * guard + 1, 0xAB);
      unsigned char* start = buffer.data() + guard + 1;  // not on a cache line's start
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      cpu::zero_bytes(start, bytes);
      omp_set_num_threads(saved);
      size_t nonzero = 0, guard_changed = 0;
      for (size_t i = 0; i < bytes; ++i) nonzero += start[i] != 0;
      for (size_t i = 0; i < guard + 1; ++i) guard_changed += buffer[i] != 0xAB;
      for (size_t i = guard + 1 + bytes; i < buffer.size(); ++i) guard_changed += buffer[i] != 0xAB;
      CHECK(nonzero == 0);
      CHECK(guard_changed == 0);
    }
  }
  REQUIRE(cpu::worth_threads(1000003.0 / sizeof(float)));
  REQUIRE(!cpu::worth_threads(4096.0 / sizeof(float)));
}
