// Tests of the Communicator and the process mesh, run as one program on every rank
// (under `mpirun -np N`, or alone for the local backend). No Catch2: a failing check on
// one rank must not make that rank skip the collectives the others are waiting in, so
// every check just counts, every rank runs every test, and at the end the failure
// counts are summed over the world and rank 0 prints the verdict.
//
// Each rank fills its buffers from (rank, index) with small integers, so the expected
// results are computed locally and exactly: sums of integers below 2^8 are exact even in
// bf16, whatever order the backend adds them in.
//
// With `--device cuda` every buffer handed to the communicator is in GPU memory (a host
// mirror holds the values), which exercises the MPI backend's staging (several ranks
// may share one GPU) and the NCCL backend; without a GPU it exits 77 (skipped).
//
// Modes:
//   comm_test [--backend B] [--expect-backend B] [--device cpu|cuda] [--timeout S]
//                              every test; exit 0 when all pass (S: the backend's
//                              timeout in seconds, 60 by default)
//   comm_test --timeout-test   rank 0 waits for a message rank 1 never sends, with a 1 s
//                              timeout; prints how long it took to give up, exits 3
//   comm_test --kill-test      rank 1 kills itself while rank 0 waits for it
//   comm_test --p2p-lost-peer  rank 0 receives (tag 5) from rank 1, which never sends
//   comm_test --p2p-wrong-tag  rank 1 sends with tag 6 what rank 0 receives with tag 5
//   comm_test --p2p-hung-peer  rank 0 receives from rank 1, which receives from rank 2,
//                              which hangs: rank 0's roll call must name rank 2
//   comm_test --late-peer      rank 1 joins a barrier 4.5 s late, with a 4 s timeout: rank 0
//                              must report it late, not lost (it comes during the roll call)
//   comm_test --device-mismatch  make_world with rank 0 on a GPU and the others on the CPU
//                              (as device=auto on mixed nodes): every rank must refuse before
//                              any collective that differs by device, naming both groups
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "common/comm.h"
#include "common/device.h"
#include "common/error.h"
#include "common/launcher.h"
#include "common/mesh.h"
#include "tests/rank_checks.h"
#include "kernels/cpu/bf16.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

using namespace gpt;

namespace {

int g_checks = 0, g_failures = 0, g_rank = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (ok) return;
  if (++g_failures <= 20) std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
}

bool g_gpu = false;  // --device cuda: buffers live in GPU memory

#ifdef GPT_HAVE_CUDA
void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail(std::string("comm_test: ") + what + ": " + cudaGetErrorString(err));
}
#endif

// A buffer of `count` elements of dtype t, read and written as doubles. at(i) is the
// address of element i to hand to the communicator: host memory, or with --device cuda
// GPU memory, kept in step with a host copy (uploaded before a call, downloaded before
// the values are read).
class Buffer {
 public:
  Buffer(DType type, size_t count) : t_(type), host_(count * dtype_size(type)) {
#ifdef GPT_HAVE_CUDA
    if (g_gpu && !host_.empty()) cuda_ok(cudaMalloc(&dev_, host_.size()), "cudaMalloc");
#endif
  }
  ~Buffer() {
#ifdef GPT_HAVE_CUDA
    if (dev_) cudaFree(dev_);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* at(size_t i = 0) {
    if (host_.empty()) return nullptr;
    const size_t offset = i * dtype_size(t_);
#ifdef GPT_HAVE_CUDA
    if (dev_) {
      if (!device_newer_) cuda_ok(cudaMemcpy(dev_, host_.data(), host_.size(), cudaMemcpyHostToDevice), "upload");
      device_newer_ = true;  // the communicator may write it
      return static_cast<std::byte*>(dev_) + offset;
    }
#endif
    return host_.data() + offset;
  }

  void set(size_t i, double v) {
    pull();
    std::byte* p = host_.data() + i * dtype_size(t_);
    if (t_ == DType::F64) {
      std::memcpy(p, &v, 8);
    } else if (t_ == DType::F32) {
      const float f = float(v);
      std::memcpy(p, &f, 4);
    } else if (t_ == DType::Byte) {
      *p = std::byte(uint8_t(v));
    } else {
      const uint16_t b = cpu::bf16_bits(float(v));
      std::memcpy(p, &b, 2);
    }
  }

  double get(size_t i) {
    pull();
    const std::byte* p = host_.data() + i * dtype_size(t_);
    if (t_ == DType::F64) {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    if (t_ == DType::F32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    if (t_ == DType::Byte) return double(uint8_t(*p));
    uint16_t b;
    std::memcpy(&b, p, 2);
    return cpu::bf16_to_float(b);
  }

 private:
  void pull() {
#ifdef GPT_HAVE_CUDA
    if (device_newer_) cuda_ok(cudaMemcpy(host_.data(), dev_, host_.size(), cudaMemcpyDeviceToHost), "download");
#endif
    device_newer_ = false;
  }

  DType t_;
  std::vector<std::byte> host_;
  void* dev_ = nullptr;
  bool device_newer_ = false;
};

// One double per rank: summed, or gathered in rank order.
double all_reduce_scalar(Communicator& c, double x) {
  Buffer b(DType::F64, 1);
  b.set(0, x);
  c.all_reduce(b.at(), 1, DType::F64);
  return b.get(0);
}

std::vector<double> all_gather_scalar(Communicator& c, double x) {
  Buffer mine(DType::F64, 1), all(DType::F64, size_t(c.size()));
  mine.set(0, x);
  c.all_gather(mine.at(), all.at(), 1, DType::F64);
  std::vector<double> out(size_t(c.size()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = all.get(i);
  return out;
}

// The value rank r contributes at index i: an integer in [-6, 6].
double value(int r, size_t i) { return double(int((size_t(r) * 7 + i * 3) % 13) - 6); }

// Compares a whole buffer with expected(i), reporting the first mismatch only.
template <class F>
void expect_all(Buffer& b, size_t offset, size_t count, F&& expected, const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    const double want = expected(i);
    if (b.get(offset + i) != want) {
      expect(false, what + ": element " + std::to_string(i) + " is " + std::to_string(b.get(offset + i)) +
                        ", expected " + std::to_string(want));
      return;
    }
  }
  expect(true, what);
}

std::string label(const char* op, DType t, size_t count) {
  return std::string(op) + " " + dtype_name(t) + " count " + std::to_string(count);
}

void test_collectives(Communicator& c, DType t, size_t count) {
  const int n = c.size(), r = c.rank();
  const size_t N = size_t(n);

  // all_reduce: every rank ends with the sum over ranks.
  {
    Buffer b(t, count);
    for (size_t i = 0; i < count; ++i) b.set(i, value(r, i));
    c.all_reduce(b.at(), count, t);
    expect_all(b, 0, count, [&](size_t i) {
      double s = 0;
      for (int q = 0; q < n; ++q) s += value(q, i);
      return s;
    }, label("all_reduce", t, count));
  }
  // reduce_scatter: rank r keeps chunk r of the sum; then the in-place form.
  {
    Buffer send(t, N * count), recv(t, count);
    for (size_t i = 0; i < N * count; ++i) send.set(i, value(r, i));
    auto want = [&](size_t i) {
      double s = 0;
      for (int q = 0; q < n; ++q) s += value(q, size_t(r) * count + i);
      return s;
    };
    c.reduce_scatter(send.at(), recv.at(), count, t);
    expect_all(recv, 0, count, want, label("reduce_scatter", t, count));
    c.reduce_scatter(send.at(), send.at(size_t(r) * count), count, t);
    expect_all(send, size_t(r) * count, count, want, label("reduce_scatter in place", t, count));
  }
  // all_gather: the concatenation of every rank's contribution; then in place.
  {
    Buffer send(t, count), recv(t, N * count);
    for (size_t i = 0; i < count; ++i) send.set(i, value(r, i));
    c.all_gather(send.at(), recv.at(), count, t);
    auto want = [&](size_t j) { return value(int(j / count), j % count); };
    expect_all(recv, 0, N * count, want, label("all_gather", t, count));
    Buffer inplace(t, N * count);
    for (size_t i = 0; i < count; ++i) inplace.set(size_t(r) * count + i, value(r, i));
    c.all_gather(inplace.at(size_t(r) * count), inplace.at(), count, t);
    expect_all(inplace, 0, N * count, want, label("all_gather in place", t, count));
  }
  // broadcast from the first and the last rank.
  for (int root : {0, n - 1}) {
    Buffer b(t, count);
    for (size_t i = 0; i < count; ++i) b.set(i, r == root ? value(root, i) : 99.0);
    c.broadcast(b.at(), count, t, root);
    expect_all(b, 0, count, [&](size_t i) { return value(root, i); },
               label("broadcast", t, count) + " root " + std::to_string(root));
  }
  // sendrecv around the ring, rank r sending count + r elements to its right
  // neighbour, so the two sides' counts differ; then to itself.
  {
    const int right = (r + 1) % n, left = (r - 1 + n) % n;
    const size_t send_n = count + size_t(r), recv_n = count + size_t(left);
    Buffer send(t, send_n), recv(t, recv_n);
    for (size_t i = 0; i < send_n; ++i) send.set(i, value(r, i));
    c.sendrecv(send.at(), send_n, right, recv.at(), recv_n, left, t);
    expect_all(recv, 0, recv_n, [&](size_t i) { return value(left, i); }, label("sendrecv ring", t, count));
    Buffer self(t, count);
    c.sendrecv(send.at(), count, r, self.at(), count, r, t);
    expect_all(self, 0, count, [&](size_t i) { return value(r, i); }, label("sendrecv self", t, count));
  }
  c.barrier();
}

// Sub-groups by parity, ordered by descending world rank; singletons; a nested split.
void test_split(Communicator& world) {
  const int n = world.size(), r = world.rank();
  std::unique_ptr<Communicator> parity = world.split(r % 2, -r);
  std::vector<int> members;  // world ranks of my group, in the group's order
  for (int q = n - 1; q >= 0; --q)
    if (q % 2 == r % 2) members.push_back(q);
  expect(parity->size() == int(members.size()), "split: parity group size");
  int my_index = 0;
  while (members[size_t(my_index)] != r) ++my_index;
  expect(parity->rank() == my_index, "split: rank ordered by key");

  const std::vector<double> all = all_gather_scalar(*parity, r);
  bool same = all.size() == members.size();
  for (size_t i = 0; same && i < members.size(); ++i) same = all[i] == members[i];
  expect(same, "split: all_gather over the parity group lists its members in key order");
  const double sum = all_reduce_scalar(*parity, r);
  double want = 0;
  for (int q : members) want += q;
  expect(sum == want, "split: all_reduce over the parity group");

  std::unique_ptr<Communicator> alone = world.split(r, 0);
  expect(alone->size() == 1 && alone->rank() == 0, "split: singleton groups");
  expect(all_reduce_scalar(*alone, 5) == 5, "split: all_reduce in a singleton group");
  // A group of one does every collective on its own data (the MPI backend without a call).
  for (DType t : {DType::F32, DType::BF16}) test_collectives(*alone, t, 7);

  std::unique_ptr<Communicator> nested = parity->split(0, parity->rank());
  expect(nested->size() == parity->size() && nested->rank() == parity->rank(), "split: nested split");
  nested->barrier();

  // The timeout: a sub-group starts with its parent's; LongerTimeout raises it for a
  // phase, never lowers it, and puts it back.
  const double before = world.timeout_s();
  expect(parity->timeout_s() == before, "timeout: a sub-group starts with its parent's");
  world.set_timeout_s(before + 7);  // a value no backend starts with
  expect(world.split(0, r)->timeout_s() == before + 7, "timeout: a sub-group starts with its parent's, as set");
  world.set_timeout_s(before);
  {
    const gpt::LongerTimeout longer(world, before + 100);
    expect(world.timeout_s() == before + 100, "timeout: raised for the phase");
    const gpt::LongerTimeout shorter(world, 0.5);
    expect(world.timeout_s() == before + 100, "timeout: never lowered");
    world.barrier();
  }
  expect(world.timeout_s() == before, "timeout: restored after the phase");
}

// Mesh coordinates and axis groups, for every shape whose world is this job's size.
void test_mesh(Communicator& world) {
  // Pure arithmetic first: the formula in mesh.h and its inverse.
  const MeshShape s{2, 3, 2, 2};
  bool roundtrip = true;
  for (int q = 0; q < s.world(); ++q) roundtrip = roundtrip && mesh_rank(s, mesh_coord(s, q)) == q;
  expect(roundtrip, "mesh_rank(mesh_coord(r)) == r");
  const MeshCoord c = mesh_coord(s, 17);  // 17 = ((1*3 + 1)*2 + 0)*2 + 1
  expect(c.dp == 1 && c.pp == 1 && c.cp == 0 && c.tp == 1, "mesh_coord: tp fastest, dp slowest");
  expect(mesh_json(MeshShape{2, 1, 1, 4}) == "{\"dp\":2,\"tp\":4,\"pp\":1,\"cp\":1}", "mesh_json");

  const int n = world.size();
  try {
    Mesh wrong(world, MeshShape{n + 1, 1, 1, 1});
    expect(false, "Mesh with a wrong world size must fail");
  } catch (const UserError& e) {
    const std::string m = e.what();
    expect(m.find("dp=" + std::to_string(n + 1)) != std::string::npos &&
               m.find("world has " + std::to_string(n)) != std::string::npos,
           "Mesh size error names the shape and the world size: " + m);
  }

  int shapes = 0;
  for (int dp = 1; dp <= n; ++dp)
    for (int pp = 1; pp <= n; ++pp)
      for (int cp = 1; cp <= n; ++cp)
        for (int tp = 1; tp <= n; ++tp) {
          const MeshShape shape{dp, pp, cp, tp};
          if (shape.world() != n) continue;
          ++shapes;
          Mesh mesh(world, shape);
          const std::string name = mesh_json(shape);
          const MeshCoord me = mesh.coord();
          expect(mesh_rank(shape, me) == world.rank(), "mesh coord of this rank " + name);
          struct Axis {
            Communicator& group;
            int MeshCoord::*coord;
            int extent;
          };
          for (Axis a : {Axis{mesh.dp(), &MeshCoord::dp, dp}, Axis{mesh.pp(), &MeshCoord::pp, pp},
                         Axis{mesh.cp(), &MeshCoord::cp, cp}, Axis{mesh.tp(), &MeshCoord::tp, tp}}) {
            expect(a.group.size() == a.extent && a.group.rank() == me.*a.coord, "mesh axis group size/rank " + name);
            // The group's members are the ranks that differ from this one only on the axis.
            const std::vector<double> all = all_gather_scalar(a.group, world.rank());
            bool ok = all.size() == size_t(a.extent);
            for (int k = 0; ok && k < a.extent; ++k) {
              MeshCoord other = me;
              other.*a.coord = k;
              ok = all[size_t(k)] == mesh_rank(shape, other);
            }
            expect(ok, "mesh axis group members " + name);
          }
          // The gradient group of context parallelism: every (dp, cp) pair with this
          // rank's pp and tp, ordered cp fastest.
          const std::unique_ptr<Communicator> grads = split_dp_cp(mesh);
          const std::vector<double> members = all_gather_scalar(*grads, world.rank());
          bool ok = grads->size() == dp * cp && grads->rank() == me.dp * cp + me.cp &&
                    members.size() == size_t(dp * cp);
          for (int k = 0; ok && k < dp * cp; ++k) {
            MeshCoord other = me;
            other.dp = k / cp, other.cp = k % cp;
            ok = members[size_t(k)] == mesh_rank(shape, other);
          }
          expect(ok, "split_dp_cp: the dp x cp ranks of this pp and tp, cp fastest " + name);
        }
  expect(shapes > 0, "at least one mesh shape tested");
}

// sum_into's bf16 rounding: to nearest, ties to even, on the exact fp32 sum.
void test_bf16_rounding(Communicator& world) {
  auto add = [](float a, float b) {
    const uint16_t x = cpu::bf16_bits(a), y = cpu::bf16_bits(b);
    uint16_t out = 0;
    sum_into(&out, &x, &y, 1, DType::BF16);
    return cpu::bf16_to_float(out);
  };
  const float ulp = 1.0f / 128;  // bf16 spacing at 1: 7 mantissa bits
  expect(add(1.0f, ulp / 2) == 1.0f, "bf16: 1 + half ulp ties to even (down to 1)");
  expect(add(1.0f + ulp, ulp / 2) == 1.0f + 2 * ulp, "bf16: 1+ulp + half ulp ties to even (up)");
  expect(add(1.0f, ulp * 0.75f) == 1.0f + ulp, "bf16: above half rounds up");
  expect(add(1.0f, ulp / 4) == 1.0f, "bf16: below half rounds down");
  expect(add(3.0f, 4.0f) == 7.0f, "bf16: small integers are exact");
  const float big = cpu::bf16_to_float(0x7F7F);  // largest finite bf16
  expect(std::isinf(add(big, big)), "bf16: overflow to infinity");
  expect(std::isnan(add(std::nanf(""), 1.0f)), "bf16: NaN stays NaN");
  // sum_into with out aliasing an input, over many elements.
  std::vector<uint16_t> a(1000), b(1000);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = cpu::bf16_bits(float(i % 100));
    b[i] = cpu::bf16_bits(-float(i % 7));
  }
  sum_into(a.data(), a.data(), b.data(), a.size(), DType::BF16);
  bool ok = true;
  for (size_t i = 0; i < a.size(); ++i) ok = ok && cpu::bf16_to_float(a[i]) == float(i % 100) - float(i % 7);
  expect(ok, "bf16: sum_into in place");
  // The backend's bf16 all-reduce rounds the same way: 1 + half an ulp is 1.
  if (world.size() == 2) {
    Buffer v(DType::BF16, 1);
    v.set(0, world.rank() == 0 ? 1.0 : ulp / 2);
    world.all_reduce(v.at(), 1, DType::BF16);
    expect(v.get(0) == 1.0, "bf16 all_reduce rounds to nearest even");
  }
}

// Stage 02's pattern: a communication thread all-reduces on its own communicator while
// the main thread uses the world (MPI_THREAD_MULTIPLE, or the backend's lock).
void test_threads(Communicator& world) {
  std::unique_ptr<Communicator> side = world.split(0, world.rank());
  const int n = world.size();
  bool side_ok = true, main_ok = true;
#ifdef GPT_HAVE_CUDA
  int gpu = 0;
  if (g_gpu) cuda_ok(cudaGetDevice(&gpu), "cudaGetDevice");
#endif
  std::string side_error;
  std::thread comm_thread([&] {
    try {
#ifdef GPT_HAVE_CUDA
      if (g_gpu) cuda_ok(cudaSetDevice(gpu), "cudaSetDevice");  // the current GPU is per thread
#endif
      for (int k = 0; k < 50; ++k) {
        Buffer v(DType::F32, 1000);
        for (size_t i = 0; i < 1000; ++i) v.set(i, k);
        side->all_reduce(v.at(), 1000, DType::F32);
        side_ok = side_ok && v.get(0) == k * n && v.get(999) == k * n;
      }
    } catch (const std::exception& e) {
      side_ok = false;
      side_error = e.what();
    }
  });
  for (int k = 0; k < 50; ++k)
    main_ok = main_ok && all_reduce_scalar(world, world.rank() + k) == double(n * (n - 1) / 2 + n * k);
  comm_thread.join();
  expect(side_ok && main_ok, "all-reduces on two communicators from two threads at once " + side_error);
}

// The value element i of the message from `source` to `dest` with `tag` carries: an
// integer below 251, exact in every type, that differs when any of the four differs,
// so a message delivered to the wrong receive shows.
double message_value(int source, int dest, int tag, size_t i) {
  return double((size_t(source) * 31 + size_t(dest) * 17 + size_t(tag) * 7 + i) % 251);
}

// Point to point among all ranks: every rank sends one message to every rank (itself
// included) for each (type, size), all posted non-blocking in an order shuffled per
// rank with random pauses between posts, then waited for in another shuffled order.
// 16 MiB is far above MPI's eager limit: a message that size is only delivered once its
// receive is posted, so a backend that waited for sends in order would deadlock here.
// Then the blocking forms, in a ring pattern that cannot deadlock.
void test_point_to_point(Communicator& world) {
  const int n = world.size(), me = world.rank();
  struct Kind {
    DType type;
    size_t count;
  };
  std::vector<Kind> kinds = {{DType::Byte, 0}, {DType::Byte, 1}, {DType::F32, 1}, {DType::F64, 1}, {DType::F64, 1000}};
  if (n <= 4)  // 16 MiB messages between every pair: on 2 to 4 ranks (8 would move 2 GiB)
    kinds.insert(kinds.end(), {{DType::Byte, size_t(16) << 20}, {DType::F32, size_t(4) << 20}});
  std::mt19937 rng(1234u + unsigned(me));
  std::printf("comm_test: rank %d: point-to-point order seed %u\n", me, 1234u + unsigned(me));
  struct Op {
    bool receive;
    int peer;
    size_t kind;
    std::unique_ptr<Buffer> buf;
    Request request;
  };
  std::vector<Op> ops;
  for (int peer = 0; peer < n; ++peer)
    for (size_t k = 0; k < kinds.size(); ++k)
      for (bool receive : {false, true}) {
        Op op{receive, peer, k, std::make_unique<Buffer>(kinds[k].type, kinds[k].count), Request()};
        const int tag = int(k);  // one message per (pair, kind): the tag tells them apart
        for (size_t i = 0; i < kinds[k].count && !receive; ++i)
          op.buf->set(i, message_value(me, peer, tag, i));
        ops.push_back(std::move(op));
      }
  std::vector<size_t> order(ops.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> pause_us(0, 3000);
  for (size_t i : order) {
    Op& op = ops[i];
    const Kind& k = kinds[op.kind];
    op.request = op.receive ? world.irecv(op.buf->at(), k.count, k.type, op.peer, int(op.kind))
                            : world.isend(op.buf->at(), k.count, k.type, op.peer, int(op.kind));
    if (pause_us(rng) < 300) std::this_thread::sleep_for(std::chrono::microseconds(pause_us(rng)));
  }
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i : order) world.wait(ops[i].request);
  for (Op& op : ops) {
    expect(!op.request.pending(), "wait leaves the request empty");
    if (!op.receive) continue;
    const Kind& k = kinds[op.kind];
    expect_all(*op.buf, 0, k.count, [&](size_t i) { return message_value(op.peer, me, int(op.kind), i); },
               label("irecv from a peer", k.type, k.count));
  }

  // Blocking forms: at distance d in the ring, send to me+d and receive from me-d; one
  // side of each pair is blocking, the other posted first, so no cycle of waits forms.
  for (int d = 1; d <= n; ++d) {
    const int to = (me + d) % n, from = (me - d % n + n) % n;
    Buffer out(DType::F32, 1000), in(DType::F32, 1000), back(DType::F32, 1000);
    for (size_t i = 0; i < 1000; ++i) out.set(i, message_value(me, to, 9, i));
    Request r = world.irecv(in.at(), 1000, DType::F32, from, 9);
    world.send(out.at(), 1000, DType::F32, to, 9);
    world.wait(r);
    expect_all(in, 0, 1000, [&](size_t i) { return message_value(from, me, 9, i); }, "blocking send, irecv");
    Request s = world.isend(out.at(), 1000, DType::F32, to, 10);
    world.recv(back.at(), 1000, DType::F32, from, 10);
    world.wait(s);
    expect_all(back, 0, 1000, [&](size_t i) { return message_value(from, me, 9, i); }, "isend, blocking recv");
  }

  // In order: three messages to every rank (itself included) on one tag, all sent before
  // any of their receives is posted, must be received in the order they were sent.
  constexpr int kQueued = 3, kOrderTag = 11;
  std::vector<std::unique_ptr<Buffer>> sent, got;
  std::vector<Request> sends, recvs;
  for (int peer = 0; peer < n; ++peer)
    for (int k = 0; k < kQueued; ++k) {
      sent.push_back(std::make_unique<Buffer>(DType::F64, 4));
      for (size_t i = 0; i < 4; ++i) sent.back()->set(i, message_value(me, peer, kOrderTag + k, i));
      sends.push_back(world.isend(sent.back()->at(), 4, DType::F64, peer, kOrderTag));
    }
  for (int peer = 0; peer < n; ++peer)
    for (int k = 0; k < kQueued; ++k) {
      got.push_back(std::make_unique<Buffer>(DType::F64, 4));
      recvs.push_back(world.irecv(got.back()->at(), 4, DType::F64, peer, kOrderTag));
    }
  for (Request& r : recvs) world.wait(r);
  for (Request& r : sends) world.wait(r);
  for (int peer = 0; peer < n; ++peer)
    for (int k = 0; k < kQueued; ++k)
      expect_all(*got[size_t(peer * kQueued + k)], 0, 4,
                 [&](size_t i) { return message_value(peer, me, kOrderTag + k, i); },
                 "message " + std::to_string(k) + " of " + std::to_string(kQueued) + " on one tag, in order");
  world.barrier();
}

// Bad arguments fail locally with a message, before any communication.
void test_bad_arguments(Communicator& world) {
  float x = 0;
  try {
    world.broadcast(&x, 1, DType::F32, world.size());
    expect(false, "broadcast from a root outside the group must fail");
  } catch (const UserError& e) {
    expect(std::string(e.what()).find("root") != std::string::npos, "broadcast root error names the root");
  }
  try {
    world.sendrecv(&x, 1, -1, &x, 1, 0, DType::F32);
    expect(false, "sendrecv to rank -1 must fail");
  } catch (const UserError&) {
    expect(true, "sendrecv to rank -1 fails");
  }
  try {
    Request r = world.isend(&x, 1, DType::F32, 0, kMaxTag + 1);
    expect(false, "a tag above kMaxTag must fail");
  } catch (const UserError& e) {
    expect(std::string(e.what()).find("tag") != std::string::npos, "a bad tag's error names the tag");
  }
  try {
    world.all_reduce(&x, 1, DType::Byte);
    expect(false, "summing bytes must fail");
  } catch (const UserError& e) {
    expect(std::string(e.what()).find("bytes") != std::string::npos, "summing bytes is refused by name");
  }
}

int run_tests(Communicator& world, const std::string& expect_backend) {
  g_rank = world.rank();
  const int n = world.size();
  if (!expect_backend.empty())
    expect(expect_backend == world.backend(), "backend is " + expect_backend + ", not " + world.backend());
  const size_t N = size_t(n);
  for (DType t : {DType::F32, DType::F64, DType::BF16})
    for (size_t count : {size_t(0), size_t(1), N - 1, N + 1, size_t(100003)}) test_collectives(world, t, count);
  test_split(world);
  test_mesh(world);
  test_bf16_rounding(world);
  test_point_to_point(world);
  // Two NCCL communicators driven at once from two threads can deadlock on one GPU
  // (their kernels may wait on each other); stage 02 overlaps NCCL with compute only.
  if (std::string(world.backend()) != "nccl") test_threads(world);
  test_bad_arguments(world);

  const double checks = all_reduce_scalar(world, g_checks);
  const double failures = all_reduce_scalar(world, g_failures);
  if (world.rank() == 0)
    std::printf("comm_test: %s on %d rank(s), backend %s, %s buffers: %.0f checks, %.0f failures\n",
                failures == 0 ? "PASS" : "FAIL", n, world.backend(), g_gpu ? "GPU" : "CPU", checks, failures);
  return failures == 0 ? 0 : 1;
}

// The end of a failure test on a rank that timed out: prints how long it waited and why,
// and exits 3 after a second, which gives the other ranks time to report before this exit
// makes mpirun end the job.
int gave_up(Communicator& world, std::chrono::steady_clock::time_point start, const UserError& e) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("comm_test: rank %d gave up after %.2f s: %s\n", world.rank(), s, e.what());
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  return 3;
}

// Rank 0 waits for a message from rank 1 that never comes; every other rank waits in a
// barrier rank 0 never joins. Each gives up after the 1 s timeout, and each finds at its
// roll call that every rank is alive: the calls do not match.
int timeout_test(Communicator& world) {
  if (world.size() < 2) fail("--timeout-test needs at least 2 ranks");
  world.barrier();  // the waits start together, so the ranks time out together
  const auto start = std::chrono::steady_clock::now();
  try {
    float x = 1, y = 0;
    if (world.rank() == 0)
      world.sendrecv(&x, 1, 1, &y, 1, 1, DType::F32);
    else
      world.barrier();
    std::printf("comm_test: rank %d: the operation completed, but it should have timed out\n", world.rank());
    return 1;
  } catch (const UserError& e) {
    return gave_up(world, start, e);
  }
}

// A receive that no send matches: rank 0 waits for a message rank 1 never sends
// (--p2p-lost-peer) or sends with another tag (--p2p-wrong-tag); the other ranks wait in
// a barrier. Each gives up after the 1 s timeout, naming the operation, rank and tag.
int p2p_failure_test(Communicator& world, bool wrong_tag) {
  if (world.size() < 2) fail("the point-to-point failure tests need at least 2 ranks");
  world.barrier();  // the waits start together, so the ranks time out together
  const auto start = std::chrono::steady_clock::now();
  try {
    float x = 1, y = 0;
    if (world.rank() == 0) {
      world.recv(&y, 1, DType::F32, 1, 5);
    } else {
      if (wrong_tag && world.rank() == 1) {
        Request r = world.isend(&x, 1, DType::F32, 0, 6);
        (void)r;  // never taken: dropped unwaited (a one-element send is buffered)
      }
      world.barrier();
    }
    std::printf("comm_test: rank %d: the operation completed, but it should have timed out\n", world.rank());
    return 1;
  } catch (const UserError& e) {
    return gave_up(world, start, e);
  }
}

// A stall two hops away, as in a pipeline whose last stage hangs: rank 0 waits for rank 1,
// rank 1 (half a second later) for rank 2, and rank 2 hangs outside any communication.
// Rank 0 times out first, while rank 1 still waits: rank 1 answers rank 0's roll call
// from inside its wait, rank 2 cannot, so rank 0's error names rank 2 as the silent one.
int p2p_hung_peer_test(Communicator& world) {
  if (world.size() < 3) fail("--p2p-hung-peer needs at least 3 ranks");
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  if (world.rank() >= 2) {
    std::this_thread::sleep_for(std::chrono::seconds(20));  // hung; the launcher ends it
    return 0;
  }
  try {
    float y = 0;
    if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    world.recv(&y, 1, DType::F32, world.rank() + 1, 5);
    std::printf("comm_test: rank %d: the operation completed, but it should have timed out\n", world.rank());
    return 1;
  } catch (const UserError& e) {
    return gave_up(world, start, e);
  }
}

// Rank 1 is late, not lost: it joins the barrier 4.5 s after rank 0, whose timeout is 4 s,
// so it arrives during rank 0's roll call (1 s of grace at that timeout), and rank 0's error
// must say the barrier completed then, instead of naming rank 1 as silent.
int late_peer_test(Communicator& world) {
  if (world.size() != 2) fail("--late-peer needs 2 ranks");
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(4500));
  try {
    world.barrier();
    std::printf("comm_test: rank %d: the barrier completed\n", world.rank());
    return world.rank() == 1 ? 0 : 1;  // rank 0 should have timed out
  } catch (const UserError& e) {
    return gave_up(world, start, e);
  }
}

// Rank 1 dies (SIGKILL) while rank 0 waits for its message: the launcher must end the job.
int kill_test(Communicator& world) {
  if (world.size() < 2) fail("--kill-test needs at least 2 ranks");
  world.barrier();
  if (world.rank() == 1) std::raise(SIGKILL);
  float x = 1, y = 0;
  if (world.rank() == 0) world.sendrecv(&x, 1, 1, &y, 1, 1, DType::F32);
  else world.barrier();
  std::printf("comm_test: rank %d: completed, but rank 1 is dead\n", world.rank());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main("comm_test", [&] {
    CommOptions options;
    std::string mode, expect_backend;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--backend" && i + 1 < argc) options.backend = argv[++i];
      else if (a == "--expect-backend" && i + 1 < argc) expect_backend = argv[++i];
      else if (a == "--device" && i + 1 < argc) g_gpu = std::string(argv[++i]) == "cuda";
      else if (a == "--timeout" && i + 1 < argc) options.timeout_s = std::stod(argv[++i]);
      else if (a == "--timeout-test" || a == "--kill-test" || a == "--p2p-lost-peer" || a == "--p2p-wrong-tag" ||
               a == "--p2p-hung-peer" || a == "--late-peer" || a == "--device-mismatch")
        mode = a;
      else fail("unknown argument '" + a + "'");
    }
    if (g_gpu) {
      // Skipped (77) where this cannot run: no CUDA in the build, no GPU, or for NCCL
      // fewer GPUs than ranks on this node.
      const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
      const int gpus = cuda_device_count();
      if (gpus == 0 || (options.backend == "nccl" && local && std::atoi(local) > gpus)) {
        std::printf("comm_test: skipped: %d CUDA GPU(s) for %s rank(s) on this node\n", gpus, local ? local : "1");
        return 77;
      }
      options.device = Device::CUDA;
    }
    if (mode == "--timeout-test" || mode == "--p2p-lost-peer" || mode == "--p2p-wrong-tag" ||
        mode == "--p2p-hung-peer")
      options.timeout_s = 1;
    if (mode == "--kill-test") options.timeout_s = 30;
    if (mode == "--late-peer") options.timeout_s = 4;
    // As device=auto on nodes with and without a GPU: rank 0 (the launcher's number, as
    // the world is not made yet) asks for the GPU, the others for the CPU.
    if (mode == "--device-mismatch") options.device = launcher_rank() == 0 ? Device::CUDA : Device::CPU;
    std::unique_ptr<Communicator> world = make_world(&argc, &argv, options);
    gpt::test::require_world_size(*world, "comm_test");
    if (mode == "--timeout-test") return timeout_test(*world);
    if (mode == "--kill-test") return kill_test(*world);
    if (mode == "--p2p-lost-peer" || mode == "--p2p-wrong-tag") return p2p_failure_test(*world, mode == "--p2p-wrong-tag");
    if (mode == "--p2p-hung-peer") return p2p_hung_peer_test(*world);
    if (mode == "--late-peer") return late_peer_test(*world);
    if (mode == "--device-mismatch") {
      std::printf("comm_test: rank %d: ranks on different devices were accepted\n", world->rank());
      return 0;
    }
    agree_on_device(*world, Device::CUDA);  // every rank on a GPU: one kind, accepted (no GPU needed)
    return run_tests(*world, expect_backend);
  });
}
