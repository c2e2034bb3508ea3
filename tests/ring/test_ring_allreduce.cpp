// Stage 02's ring all-reduce against the backend's all-reduce (MPI_Allreduce), on CPU
// ranks under mpirun: `mpirun -np N test_ring_allreduce N`, registered for N = 1..8 in
// tests/ring/CMakeLists.txt. For counts 0, 1, N-1, N+1 and 100003, fp32 and bf16:
//
//   exact inputs   small integers (bf16) or multiples of 1/16 (fp32): every partial sum
//                  fits the significand, so every order of addition gives the exact sum,
//                  and ring, backend and the exact sum agree bit for bit;
//   random inputs  standard normal values (rounded to bf16 for bf16): ring and backend
//                  add in different orders and may differ, within the bound below;
//   every rank     ends with the same bits (the all-gather copies finished chunks);
//   the halves     ring_reduce_scatter leaves rank r the exact sum of chunk r, and
//                  ring_all_gather hands every rank every rank's chunk;
//   small pieces   a chunk cut into many messages gives the same sums;
//   traffic        the calls and bytes a CountingCommunicator sees equal the closed
//                  forms of ring_allreduce.h on every rank: ring_all_reduce_traffic for
//                  every count and for many small pieces, and each half on chunks of
//                  unequal sizes (one empty from N = 4 on); the form for one element more
//                  is rejected; a split of the counting communicator, used by a second
//                  thread while the first counts too, adds into the same tally (that the
//                  tally's lock is needed this shows only under ThreadSanitizer: a lost
//                  update is too rare to count on);
//   controls       (N > 1) a ring whose last rank passes zeros instead of its input must
//                  be rejected by the same comparisons, exact and random.
//
// Bound for the random inputs. Both results are sums of N values x_r made by N-1
// rounded additions, in some order or tree. Each addition a+b returns (a+b)(1+d) with
// |d| <= u, the unit roundoff (2^-24 for fp32; 2^-8 for bf16, whose significand has 8
// bits, and sum_into rounds to bf16 after every addition). Unrolling, each x_r is
// multiplied by at most N-1 such factors, so (Higham, "Accuracy and Stability of
// Numerical Algorithms", sec. 4.2)
//     |computed - exact| <= gamma(N-1) * sum_r |x_r|,   gamma(k) = k u / (1 - k u).
// A backend that sums in fp32 and rounds to bf16 once at the end stays within this too
// (one rounding costs u |exact| <= gamma(1) sum |x_r|). So the two computed sums differ
// by at most 2 gamma(N-1) sum_r |x_r|. For fp32, with N <= 8, (N-1) u < 2^-21 makes
// 1/(1 - (N-1) u) < 2, so 2 gamma(N-1) <= 2 (N-1) eps32 with eps32 = 2^-23 = 2u, the
// bound the test uses; for bf16 it uses 2 gamma(N-1) itself. The ring is also checked
// against the exact sum (computed in double) with gamma(N-1).
//
// Not Catch2: a failed REQUIRE on one rank would leave the others waiting in the next
// collective. Here every rank runs every collective of every case, counts its own
// failures and prints them; an all-reduce after each case votes, so all ranks go on
// together, rank 0 prints one line per case, and the exit status is 1 if any rank failed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/comm.h"
#include "common/comm_counter.h"
#include "common/rng.h"
#include "kernels/cpu/bf16.h"
#include "stages/02_ddp/ring_allreduce.h"

using namespace gpt;

namespace {

constexpr uint64_t kSeed = 20240520;

enum class Inputs { Exact, Random };

// Rank r's input element i for a case: a pure function, so every rank can make every
// rank's inputs. The value is representable in t.
float input_value(Inputs kind, DType t, uint64_t case_id, int r, size_t i) {
  const uint64_t stream = case_id * 64 + uint64_t(r);
  if (kind == Inputs::Exact) {
    const uint64_t bits = bits64_at(kSeed, stream, i);
    if (t == DType::BF16) return float(int(bits % 33) - 16);  // |sum| <= 128 < 2^8
    return float(int(bits % 257) - 128) / 16.0f;              // |sum| <= 64, step 1/16
  }
  const float x = float(normal_at(kSeed, stream, i));
  return t == DType::BF16 ? cpu::bf16_round(x) : x;
}

// A buffer of `count` elements of type t, filled from and read back as floats.
struct Buffer {
  DType type;
  std::vector<std::byte> bytes;

  Buffer(DType t, size_t count) : type(t), bytes(count * dtype_size(t)) {}
  size_t size() const { return bytes.size() / dtype_size(type); }
  void* data() { return bytes.data(); }

  void set(size_t i, float x) {
    if (type == DType::BF16) {
      const uint16_t b = cpu::bf16_bits(x);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    }
  }
  float get(size_t i) const {
    if (type == DType::BF16) {
      uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      return cpu::bf16_to_float(b);
    }
    float x;
    std::memcpy(&x, bytes.data() + 4 * i, 4);
    return x;
  }
};

// Exact sums and sum_r |x_r| of every element, over all ranks' inputs, in double
// (exact here: at most 8 terms of at most 24 significant bits each).
struct Reference {
  std::vector<double> sum, abs_sum;
};

Reference reference(Inputs kind, DType t, uint64_t case_id, int n, size_t count) {
  Reference ref{std::vector<double>(count, 0.0), std::vector<double>(count, 0.0)};
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) {
      const double x = input_value(kind, t, case_id, r, i);
      ref.sum[i] += x;
      ref.abs_sum[i] += std::fabs(x);
    }
  return ref;
}

Buffer make_input(Inputs kind, DType t, uint64_t case_id, int r, size_t count) {
  Buffer b(t, count);
  for (size_t i = 0; i < count; ++i) b.set(i, input_value(kind, t, case_id, r, i));
  return b;
}

// gamma(k) = k u / (1 - k u): the relative error bound of k rounded additions.
double gamma_bound(int k, DType t) {
  const double u = t == DType::BF16 ? 0x1p-8 : 0x1p-24;
  return k * u / (1.0 - k * u);
}

class Checker {
 public:
  explicit Checker(Communicator& comm) : comm_(comm) {}

  // Records a failure of this rank in the current case (details for the first few).
  void fail(const std::string& what) {
    if (case_failures_++ < 5)
      std::fprintf(stderr, "rank %d: %s: %s\n", comm_.rank(), case_name_.c_str(), what.c_str());
  }
  void start(const std::string& name) {
    case_name_ = name;
    case_failures_ = 0;
  }
  // Collective: every rank learns whether any rank failed; rank 0 reports the case.
  void finish() {
    double failed = case_failures_ > 0 ? 1.0 : 0.0;
    comm_.all_reduce(&failed, 1, DType::F64);
    if (comm_.rank() == 0)
      std::printf("%s %s%s\n", failed > 0 ? "FAIL" : "ok  ", case_name_.c_str(),
                  failed > 0 ? (" (" + std::to_string(int(failed)) + " ranks)").c_str() : "");
    std::fflush(stdout);
    if (failed > 0) ++failed_cases_;
    ++cases_;
  }
  int failed_cases() const { return failed_cases_; }
  int cases() const { return cases_; }

 private:
  Communicator& comm_;
  std::string case_name_;
  int case_failures_ = 0, failed_cases_ = 0, cases_ = 0;
};

std::string describe(size_t i, double got, double want) {
  char line[160];
  std::snprintf(line, sizeof(line), "element %zu: %.9g, expected %.9g", i, got, want);
  return line;
}

// Collective: every rank's buffer has the same bytes as rank 0's.
void check_same_on_every_rank(Communicator& comm, Checker& check, const Buffer& b) {
  Buffer root = b;
  comm.broadcast(root.data(), root.size(), root.type, 0);
  if (root.bytes != b.bytes) check.fail("result differs from rank 0's bits");
}

// The comparisons of one case: the ring's sum against the exact one (bit for bit for
// exact inputs; within gamma(N-1) sum|x| for random ones, and within the bound of the file
// comment of the backend's). Returns the first mismatch, "" when there is none.
std::string first_mismatch(Inputs kind, DType t, int n, const Buffer& ring, const Buffer& backend,
                           const Reference& ref, size_t count) {
  if (kind == Inputs::Exact) {
    for (size_t i = 0; i < count; ++i)
      if (ring.get(i) != ref.sum[i]) return "ring vs exact sum, " + describe(i, ring.get(i), ref.sum[i]);
      else if (backend.get(i) != ref.sum[i]) return "backend vs exact sum, " + describe(i, backend.get(i), ref.sum[i]);
    return "";
  }
  // See the file comment: 2 (N-1) eps32 for fp32, 2 gamma(N-1) for bf16.
  const double between = t == DType::F32 ? 2.0 * (n - 1) * 0x1p-23 : 2.0 * gamma_bound(n - 1, t);
  const double to_exact = gamma_bound(n - 1, t);
  for (size_t i = 0; i < count; ++i) {
    const double r = ring.get(i), b = backend.get(i);
    if (std::fabs(r - b) > between * ref.abs_sum[i])
      return "ring vs backend beyond " + std::to_string(between) + " sum|x|, " + describe(i, r, b);
    if (std::fabs(r - ref.sum[i]) > to_exact * ref.abs_sum[i])
      return "ring vs exact beyond gamma(N-1) sum|x|, " + describe(i, r, ref.sum[i]);
  }
  return "";
}

// ring_all_reduce vs comm.all_reduce (and vs the exact sum) for one case. With
// `drop_last_rank` (a negative control) the last rank gives the ring zeros instead of
// its input: the comparisons must see that sum, short of one rank's part, on some rank.
void check_all_reduce(Communicator& comm, Checker& check, Inputs kind, DType t, size_t count,
                      uint64_t case_id, size_t piece_bytes = kRingPieceBytes, bool drop_last_rank = false) {
  const int n = comm.size();
  std::string name = std::string(drop_last_rank ? "negative control: all_reduce without the last rank's part " :
                                                  "all_reduce ") +
                     dtype_name(t) + " N=" + std::to_string(n) + " count=" + std::to_string(count) +
                     (kind == Inputs::Exact ? " exact" : " random");
  if (piece_bytes != kRingPieceBytes) name += " pieces of " + std::to_string(piece_bytes) + " B";
  check.start(name);

  const Buffer input = make_input(kind, t, case_id, comm.rank(), count);
  Buffer ring = input, backend = input;
  if (drop_last_rank && comm.rank() == n - 1)
    for (size_t i = 0; i < count; ++i) ring.set(i, 0.0f);
  ring_all_reduce(comm, Device::CPU, ring.data(), count, t, piece_bytes);
  comm.all_reduce(backend.data(), count, t);

  const Reference ref = reference(kind, t, case_id, n, count);
  const std::string mismatch = first_mismatch(kind, t, n, ring, backend, ref, count);
  if (!drop_last_rank) {
    if (!mismatch.empty()) check.fail(mismatch);
    check_same_on_every_rank(comm, check, ring);
  } else {
    double seen = mismatch.empty() ? 0.0 : 1.0;  // on any rank
    comm.all_reduce(&seen, 1, DType::F64);
    if (seen == 0.0) check.fail("accepted: a sum without the last rank's part passed every comparison");
  }
  check.finish();
}

// The halves on their own: after ring_reduce_scatter rank r holds the exact sum of
// chunk r; ring_all_gather then hands every rank all chunks (exact inputs).
void check_halves(Communicator& comm, Checker& check, DType t, size_t count, uint64_t case_id) {
  const int n = comm.size(), r = comm.rank();
  check.start(std::string("reduce_scatter + all_gather ") + dtype_name(t) + " N=" +
              std::to_string(n) + " count=" + std::to_string(count));

  Buffer buf = make_input(Inputs::Exact, t, case_id, r, count);
  ring_reduce_scatter(comm, Device::CPU, buf.data(), count, t);
  const Reference ref = reference(Inputs::Exact, t, case_id, n, count);
  const size_t begin = ring_chunk_begin(count, n, r), end = ring_chunk_begin(count, n, r + 1);
  for (size_t i = begin; i < end; ++i)
    if (buf.get(i) != ref.sum[i])
      check.fail("reduce_scatter, own chunk, " + describe(i, buf.get(i), ref.sum[i]));

  // Poison the chunks this rank does not own: the all-gather must overwrite them all.
  for (size_t i = 0; i < count; ++i)
    if (i < begin || i >= end) buf.set(i, std::nanf(""));
  ring_all_gather(comm, buf.data(), count, t);
  for (size_t i = 0; i < count; ++i)
    if (!(buf.get(i) == ref.sum[i]))
      check.fail("all_gather, " + describe(i, buf.get(i), ref.sum[i]));
  check_same_on_every_rank(comm, check, buf);
  check.finish();
}

// The ring's traffic, counted, against ring_all_reduce_traffic's closed form (exact: both
// are whole numbers of calls and bytes). Control (N > 1): the form of a buffer one element
// longer, which moves one chunk's size by one, must not match what was counted.
void check_traffic(Communicator& comm, Checker& check, DType t, size_t count, size_t piece_bytes) {
  const int n = comm.size(), r = comm.rank();
  check.start(std::string("traffic ") + dtype_name(t) + " N=" + std::to_string(n) + " count=" +
              std::to_string(count) + " pieces of " + std::to_string(piece_bytes) + " B");
  CountingCommunicator counted(comm);
  Buffer buf = make_input(Inputs::Exact, t, 0, r, count);
  ring_all_reduce(counted, Device::CPU, buf.data(), count, t, piece_bytes);
  const CommTally formula = ring_all_reduce_traffic(count, n, r, t, piece_bytes);
  const CommTally seen = counted.tally();
  if (seen != formula) check.fail("counted\n" + seen.table() + "formula\n" + formula.table());
  if (n > 1 && seen == ring_all_reduce_traffic(count + 1, n, r, t, piece_bytes))
    check.fail("control accepted: the traffic of count + 1 elements matches what was counted");

  // A split counts into the same tally, also while another thread counts on the first:
  // two more all-reduces at once, one on each, make three in all.
  std::unique_ptr<Communicator> twin = counted.split(0, r);
  Buffer other = buf;
  std::thread on_twin([&] { ring_all_reduce(*twin, Device::CPU, other.data(), count, t, piece_bytes); });
  ring_all_reduce(counted, Device::CPU, buf.data(), count, t, piece_bytes);
  on_twin.join();
  CommTally three = formula;
  three += formula, three += formula;
  const CommTally all = counted.tally();
  if (all != three)
    check.fail("with a split, counted\n" + all.table() + "three all-reduces' formula\n" + three.table());
  check.finish();
}

// The halves' traffic on chunks of unequal sizes, chunk i of (7 i + 3) mod 8 elements
// (3, 2, 1, 0, 7, ...: chunk 3 empty from N = 4 on), against their closed forms, with the
// same control.
void check_traffic_v(Communicator& comm, Checker& check, DType t, size_t piece_bytes) {
  const int n = comm.size(), r = comm.rank();
  check.start(std::string("traffic of the halves, unequal chunks ") + dtype_name(t) + " N=" + std::to_string(n) +
              " pieces of " + std::to_string(piece_bytes) + " B");
  std::vector<size_t> bounds = {0};
  for (int i = 0; i < n; ++i) bounds.push_back(bounds.back() + size_t(7 * i + 3) % 8);
  CountingCommunicator counted(comm);
  Buffer buf = make_input(Inputs::Exact, t, 0, r, bounds.back());
  ring_reduce_scatter_v(counted, Device::CPU, buf.data(), bounds, t, piece_bytes);
  ring_all_gather_v(counted, buf.data(), bounds, t, piece_bytes);
  const auto halves = [&](const std::vector<size_t>& chunks) {  // both halves' closed forms
    CommTally traffic = ring_reduce_scatter_traffic(chunks, r, t, piece_bytes);
    traffic += ring_all_gather_traffic(chunks, r, t, piece_bytes);
    return traffic;
  };
  const CommTally formula = halves(bounds), seen = counted.tally();
  if (seen != formula) check.fail("counted\n" + seen.table() + "formula\n" + formula.table());
  std::vector<size_t> longer = bounds;
  for (size_t i = 1; i < longer.size(); ++i) longer[i] += 1;  // chunk 0 one element longer
  if (n > 1 && seen == halves(longer))
    check.fail("control accepted: the traffic of a longer chunk 0 matches what was counted");
  check.finish();
}

int run(Communicator& comm, int expected_ranks) {
  const int n = comm.size();
  if (n != expected_ranks) {
    // A world of the wrong size would pass vacuously (e.g. a build without MPI, where
    // every process is a world of one): refuse it.
    std::fprintf(stderr, "test_ring_allreduce: expected %d ranks, the world has %d (backend %s)\n",
                 expected_ranks, n, comm.backend());
    return 1;
  }
  if (comm.rank() == 0)
    std::printf("ring all-reduce vs %s all_reduce, %d ranks\n", comm.backend(), n);

  // 0, 1, N-1, N+1 and a large prime, without repeats (N-1 is 0 or 1 for N <= 2).
  std::vector<size_t> counts = {0, 1, size_t(n - 1), size_t(n + 1), 100003};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());

  Checker check(comm);
  uint64_t case_id = 0;
  for (DType t : {DType::F32, DType::BF16}) {
    for (size_t count : counts) {
      check_all_reduce(comm, check, Inputs::Exact, t, count, ++case_id);
      check_all_reduce(comm, check, Inputs::Random, t, count, ++case_id);
      check_halves(comm, check, t, count, ++case_id);
      check_traffic(comm, check, t, count, kRingPieceBytes);
    }
    check_traffic(comm, check, t, 1001, 12);  // many pieces: ceil(largest chunk / piece) per chunk
    check_traffic_v(comm, check, t, kRingPieceBytes);
    check_traffic_v(comm, check, t, 8);
    // Many messages per chunk, pieces of unequal sizes (12 bytes: 3 fp32 or 6 bf16).
    check_all_reduce(comm, check, Inputs::Exact, t, 1001, ++case_id, 12);
    if (n > 1)
      for (Inputs kind : {Inputs::Exact, Inputs::Random})
        check_all_reduce(comm, check, kind, t, 100003, ++case_id, kRingPieceBytes, /*drop_last_rank=*/true);
  }

  if (comm.rank() == 0)
    std::printf("%d of %d cases passed\n", check.cases() - check.failed_cases(), check.cases());
  return check.failed_cases() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<Communicator> comm;
  try {
    comm = make_world(&argc, &argv, CommOptions{});
    if (argc != 2) {
      std::fprintf(stderr, "usage: mpirun -np N %s N\n", argv[0]);
      return 2;
    }
    return run(*comm, std::atoi(argv[1]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_ring_allreduce: %s\n", e.what());
    if (comm) comm->abort(1);
    return 1;
  }
}
