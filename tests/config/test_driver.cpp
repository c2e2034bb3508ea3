// The shared driver's layout checks (common/driver.h): the mesh from the config keys
// dp, tp, pp, cp against the job's rank count, and a stage refusing by name an axis it
// does not implement; the model FLOPs utilisation it reports (common/mfu.h); and the stop
// signal held back until its handler is in place (common/stop_request.h).
#include <catch2/catch.hpp>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "common/driver.h"
#include "common/error.h"
#include "common/gpt2_layout.h"
#include "common/mfu.h"
#include "common/stop_request.h"

using namespace gpt;

namespace {
Config with_axes(int dp, int tp, int pp, int cp, int vs = 1) {
  Config c;
  c.dp = dp, c.tp = tp, c.pp = pp, c.cp = cp, c.virtual_stages = vs;
  return c;
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("driver: the mesh takes tp, pp, cp from the config and dp from the rest", "[config][driver]") {
  const MeshShape a = mesh_shape_for(with_axes(0, 2, 1, 1), 8);
  CHECK((a.dp == 4 && a.tp == 2 && a.pp == 1 && a.cp == 1));
  const MeshShape b = mesh_shape_for(with_axes(2, 2, 3, 1), 12);
  CHECK((b.dp == 2 && b.tp == 2 && b.pp == 3 && b.cp == 1));
  const MeshShape c = mesh_shape_for(with_axes(0, 1, 1, 1), 5);
  CHECK((c.dp == 5 && c.world() == 5));
}

TEST_CASE("driver: a mesh that does not match the ranks names the keys and the rank count", "[config][driver]") {
  const std::string odd = error_of([] { mesh_shape_for(with_axes(0, 3, 1, 1), 8); });
  CHECK(odd.find("tp=3") != std::string::npos);
  CHECK(odd.find("8 ranks") != std::string::npos);
  const std::string wrong_dp = error_of([] { mesh_shape_for(with_axes(3, 2, 1, 1), 8); });
  CHECK(wrong_dp.find("dp=3") != std::string::npos);
  CHECK(wrong_dp.find("has 8") != std::string::npos);
  CHECK(error_of([] { mesh_shape_for(with_axes(2, 2, 1, 1), 4); }).empty());  // control: a matching mesh passes
}

// Axes whose product passes int's end: 2^16 x 2^16 wraps to 0 in int arithmetic (a
// division by zero next), 1431655766 x 3 to 2, which could pass for the job's ranks, and
// three axes of 2^30 pass even int64's end.
TEST_CASE("driver: axes whose product passes int's end are refused, not wrapped", "[config][driver]") {
  const std::string wrapped = error_of([] { mesh_shape_for(with_axes(0, 65536, 65536, 1), 2); });
  CHECK(wrapped.find("tp=65536 x pp=65536 x cp=1 is more ranks than the job's 2") != std::string::npos);
  const std::string wide_dp = error_of([] { mesh_shape_for(with_axes(1431655766, 3, 1, 1), 2); });
  CHECK(wide_dp.find("dp=1431655766 x tp=3 x pp=1 x cp=1 is more ranks than the job's 2") != std::string::npos);
  const std::string past_int64 = error_of([] { mesh_shape_for(with_axes(0, 1 << 30, 1 << 30, 1 << 30), 8); });
  CHECK(past_int64.find("is more ranks than the job's 8") != std::string::npos);
  const auto too_many = [](const Config& cfg) {
    return error_of([&] { validate(cfg, std::max(cfg.dp, 1)); }).find("is more ranks than a job can have");
  };
  for (const Config& cfg : {with_axes(0, 65536, 65536, 1), with_axes(1431655766, 3, 1, 1),
                            with_axes(2, 1 << 30, 1 << 30, 1 << 30), with_axes(2, 1, 1 << 30, 1)})
    CHECK(too_many(cfg) != std::string::npos);
  // Controls: the largest mesh an int numbers passes both (validate fails later, on the
  // batch), and so does a mesh one rank short of the job's in the driver's check.
  CHECK(too_many(with_axes(2147483647, 1, 1, 1)) == std::string::npos);
  CHECK(too_many(with_axes(1, 1, 1, 1)) == std::string::npos);
  CHECK(error_of([] { mesh_shape_for(with_axes(0, 2, 2, 2), 8); }).empty());
}

TEST_CASE("driver: threads beyond the CPUs a rank may use, or beyond the machine's cores, are noted",
          "[config][driver]") {
  // thread_notes(threads per rank, ranks on this machine, cores, CPUs this rank may use)
  const std::string bound = thread_notes(2, 1, 2, 1);  // one rank pinned to a core, two threads
  CHECK_THAT(bound, Catch::Contains("2 OpenMP threads per rank on the 1 CPU(s) this rank may run on"));
  CHECK_THAT(bound, Catch::Contains("set threads=1"));
  const std::string crowded = thread_notes(2, 2, 2, 2);  // --bind-to none, OpenMP's default of every core
  CHECK_THAT(crowded, Catch::Contains("2 ranks on this machine x 2 OpenMP threads = 4 threads on 2 cores"));
  CHECK_THAT(crowded, Catch::Contains("set threads=1"));
  CHECK_THAT(thread_notes(3, 4, 2, 2), Catch::Contains("set threads=1"));  // more ranks than cores: still 1
  // Already one thread a rank: the advice is fewer ranks, not the threads it has.
  const std::string ranks_only = thread_notes(1, 8, 2, 2);
  CHECK_THAT(ranks_only, Catch::Contains("8 ranks on this machine x 1 OpenMP thread = 8 threads on 2 cores"));
  CHECK_THAT(ranks_only, Catch::Contains("run at most 2 ranks on this machine"));
  CHECK_THAT(ranks_only, !Catch::Contains("set threads"));
  // Controls: as many threads as the CPUs, or fewer, say nothing.
  CHECK(thread_notes(1, 2, 2, 2).empty());
  CHECK(thread_notes(4, 4, 16, 16).empty());
  CHECK(thread_notes(2, 1, 2, 2).empty());
  CHECK(thread_notes(1, 1, 8, 1).empty());
}

TEST_CASE("driver: a stage refuses by name an axis it does not implement", "[config][driver]") {
  const StageSpec zero1{"03_zero1"};
  const std::string tp = error_of([&] { require_axes(with_axes(0, 2, 1, 1), zero1); });
  CHECK(tp.find("tp=2") != std::string::npos);
  CHECK(tp.find("03_zero1") != std::string::npos);
  CHECK(tp.find("tensor parallelism") != std::string::npos);
  CHECK(error_of([&] { require_axes(with_axes(0, 1, 2, 1), zero1); }).find("pp=2") != std::string::npos);
  CHECK(error_of([&] { require_axes(with_axes(0, 1, 1, 2), zero1); }).find("cp=2") != std::string::npos);
  CHECK(error_of([&] { require_axes(with_axes(0, 1, 1, 1, 2), zero1); }).find("virtual_stages=2") != std::string::npos);
  StageSpec tensor{"06_tensor_parallel"};
  tensor.tp = true;
  CHECK(error_of([&] { require_axes(with_axes(0, 2, 1, 1), tensor); }).empty());  // an implemented axis passes
  CHECK(error_of([&] { require_axes(with_axes(0, 1, 1, 1), zero1); }).empty());
  // activation_checkpointing: refused where the stage does not read it, read where it does.
  Config recompute = with_axes(0, 1, 1, 1);
  for (const char* mode : {"selective", "full"}) {
    recompute.activation_checkpointing = mode;
    CHECK(error_of([&] { require_axes(recompute, zero1); }).find(std::string("activation_checkpointing=") + mode) !=
          std::string::npos);
  }
  StageSpec four_d{"11_4d"};
  four_d.activation_checkpointing_key = true;
  CHECK(error_of([&] { require_axes(recompute, four_d); }).empty());
  recompute.activation_checkpointing = "none";
  CHECK(error_of([&] { require_axes(recompute, zero1); }).empty());
  // zero3_prefetch=false: read where ZeRO-3 runs (stage 05; zero=3 where `zero` is read),
  // refused elsewhere, naming the stage (and the zero it was given).
  Config no_prefetch = with_axes(0, 1, 1, 1);
  no_prefetch.zero3_prefetch = false;
  StageSpec zero3{"05_zero3"};
  zero3.zero3 = true;
  CHECK(error_of([&] { require_axes(no_prefetch, zero3); }).empty());
  const std::string refused = error_of([&] { require_axes(no_prefetch, zero1); });
  CHECK(refused.find("zero3_prefetch=false: stage 03_zero1") != std::string::npos);
  StageSpec zero_key{"06_tensor_parallel"};
  zero_key.zero_key = true;
  no_prefetch.zero = 2;
  CHECK(error_of([&] { require_axes(no_prefetch, zero_key); }).find("at zero=2") != std::string::npos);
  no_prefetch.zero = 3;
  CHECK(error_of([&] { require_axes(no_prefetch, zero_key); }).empty());
}

TEST_CASE("mfu: the job's peak counts each GPU once, and no peak is reported without every rank's",
          "[config][driver][mfu]") {
  const std::array<unsigned char, 16> gpu_a{1, 2, 3}, gpu_b{9, 8, 7};
  // Two ranks sharing one GPU share its peak; two GPUs add theirs.
  CHECK(distinct_peak_sum({{gpu_a, 1e15}, {gpu_a, 1e15}}) == std::optional<double>(1e15));
  CHECK(distinct_peak_sum({{gpu_a, 1e15}, {gpu_b, 2e15}, {gpu_a, 1e15}}) == std::optional<double>(3e15));
  // A rank without a peak (the CPU, an unlisted GPU) leaves the job without an MFU.
  CHECK_FALSE(distinct_peak_sum({{gpu_a, 1e15}, {gpu_b, 0}}).has_value());
  CHECK_FALSE(distinct_peak_sum({}).has_value());
  // What world_peak_flops gathers: each rank's bytes, concatenated in rank order.
  std::vector<unsigned char> gathered;
  for (const RankPeak& r : {RankPeak{gpu_a, 989e12}, RankPeak{gpu_b, 67e12}, RankPeak{gpu_a, 989e12}}) {
    const std::vector<unsigned char> bytes = pack_rank_peak(r);
    gathered.insert(gathered.end(), bytes.begin(), bytes.end());
  }
  const std::vector<RankPeak> ranks = unpack_rank_peaks(gathered);
  REQUIRE(ranks.size() == 3);
  CHECK((ranks[1].gpu == gpu_b && ranks[1].flops == 67e12));
  CHECK(distinct_peak_sum(ranks) == std::optional<double>(989e12 + 67e12));
}

TEST_CASE("mfu: tokens/s x flops per token over the peak, and nothing without a peak", "[config][driver][mfu]") {
  // GPT-2 124M at T = 1024 (N = 124,475,904 with wte's rows padded to 50304), by hand:
  // 6 N + 12 L C T = 746,855,424 + 113,246,208 = 860,101,632 flops a token.
  const ModelConfig gpt2{12, 768, 12, 1024, 50257};
  CHECK(ParamLayout(gpt2).total() == 124475904);
  const double flops = training_flops_per_token(ParamLayout(gpt2).total(), gpt2, 1024);
  CHECK(flops == 860101632.0);
  CHECK_FALSE(model_flops_utilisation(241889, flops, std::nullopt).has_value());
  // The H200 step of docs/benchmarks (241,889 tokens/s against 989 TFLOP/s): 21.0 %.
  const std::optional<double> mfu = model_flops_utilisation(241889, flops, 989e12);
  REQUIRE(mfu.has_value());
  CHECK(*mfu == Approx(0.2104).margin(5e-5));
}

// In a child process, as the trainers start: a SIGUSR1 raised before the handler is
// installed. Held (hold_stop_signal), it waits and reaches the handler once installed: the
// child sees stop_signal() == SIGUSR1 and exits 0. Control: not held, the signal's default
// action ends the child at once.
TEST_CASE("stop signal: a SIGUSR1 before the handler waits for it when held, and kills without the hold",
          "[config][driver]") {
  auto child_status = [](bool hold) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // As a trainer starts: SIGUSR1 at its default action and not blocked, whatever
      // the test runner had set.
      std::signal(SIGUSR1, SIG_DFL);
      sigset_t usr1;
      sigemptyset(&usr1);
      sigaddset(&usr1, SIGUSR1);
      pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
      if (hold) hold_stop_signal();
      std::raise(SIGUSR1);
      install_stop_handlers(/*announce=*/false, /*terminal_signals=*/false);
      _exit(stop_signal() == SIGUSR1 ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return status;
  };
  const int held = child_status(true);
  CHECK(WIFEXITED(held));
  CHECK(WEXITSTATUS(held) == 0);
  const int unheld = child_status(false);
  CHECK(WIFSIGNALED(unheld));
  CHECK(WTERMSIG(unheld) == SIGUSR1);
}
