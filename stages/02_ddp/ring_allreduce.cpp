// The ring all-reduce: reduce-scatter, then all-gather, each N-1 sendrecv steps around
// the ring. The derivation, the chunk rule and a worked N = 3 example are in
// ring_allreduce.h.
#include "stages/02_ddp/ring_allreduce.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "common/bf16.h"
#include "common/device_array.h"
#include "common/error.h"
#include "kernels/ops.h"

namespace gpt {

namespace {

// Elements in the largest chunk of `bounds`.
size_t largest_chunk(const std::vector<size_t>& bounds) {
  size_t largest = 0;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) largest = std::max(largest, bounds[i + 1] - bounds[i]);
  return largest;
}

// Messages per chunk: every chunk is cut into as many pieces as the largest one needs, so
// that all ranks send the same number of messages.
size_t ring_pieces(const std::vector<size_t>& bounds, size_t elem, size_t max_piece_bytes) {
  const size_t piece_elems = std::max<size_t>(1, max_piece_bytes / elem);
  return std::max<size_t>(1, (largest_chunk(bounds) + piece_elems - 1) / piece_elems);
}

// One ring of N ranks over one buffer: this rank's neighbours and the chunk layout.
struct Ring {
  Communicator& comm;
  std::byte* base;  // the buffer, as bytes
  const std::vector<size_t>& bounds;  // chunk c is [bounds[c], bounds[c+1])
  DType type;
  size_t elem;      // bytes per element
  int n, rank, next, prev;
  size_t largest;   // elements in the largest chunk
  size_t pieces;    // messages per chunk, the same on every rank (ring_pieces)

  Ring(Communicator& c, void* buf, const std::vector<size_t>& bounds_, DType t, size_t max_piece_bytes)
      : comm(c),
        base(static_cast<std::byte*>(buf)),
        bounds(bounds_),
        type(t),
        elem(dtype_size(t)),
        n(c.size()),
        rank(c.rank()),
        next((c.rank() + 1) % c.size()),
        prev((c.rank() + c.size() - 1) % c.size()),
        largest(largest_chunk(bounds_)),
        pieces(ring_pieces(bounds_, elem, max_piece_bytes)) {}

  // Chunk index c, taken mod N (step arithmetic like r-1-s goes negative).
  int wrap(int c) const { return ((c % n) + n) % n; }

  // Piece k of chunk c: [begin, begin + size) in elements, by the same floor rule
  // the chunks use, now applied inside the chunk.
  size_t piece_begin(int c, size_t k) const {
    return bounds[c] + k * (bounds[c + 1] - bounds[c]) / pieces;
  }
  size_t piece_size(int c, size_t k) const { return piece_begin(c, k + 1) - piece_begin(c, k); }
  std::byte* at(size_t element) const { return base + element * elem; }

  // Upper bound on one piece's size, for the scratch buffer.
  size_t largest_piece() const { return (largest + pieces - 1) / pieces; }
};

void check_bounds(const Communicator& comm, const std::vector<size_t>& bounds) {
  invariant(bounds.size() == size_t(comm.size()) + 1 && std::is_sorted(bounds.begin(), bounds.end()),
          "ring: chunk bounds must be size()+1 non-decreasing offsets");
}

// dst += piece: n elements of type t in the memory of device d.
// The CPU keeps sum_into, whose bits the tests pin down; the GPU's residual-add kernel
// computes the same fp32 sum per element (bf16: rounded once to bf16, like sum_into).
void add_piece(Device d, std::byte* dst, const std::byte* piece, size_t n, DType t) {
  if (d == Device::CPU) return sum_into(dst, dst, piece, n, t);
  switch (t) {
    case DType::F32:
      return ops::residual_forward(d, reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(dst),
                                   reinterpret_cast<const float*>(piece), n);
    case DType::BF16:
      return ops::residual_forward(d, reinterpret_cast<bf16*>(dst), reinterpret_cast<const bf16*>(dst),
                                   reinterpret_cast<const bf16*>(piece), n);
    default:
      internal_error(std::string("ring_reduce_scatter: no GPU addition of ") + dtype_name(t));
  }
}

}  // namespace

std::vector<size_t> ring_chunk_bounds(size_t count, int parts) {
  std::vector<size_t> bounds(size_t(parts) + 1);
  for (int i = 0; i <= parts; ++i) bounds[i] = ring_chunk_begin(count, parts, i);
  return bounds;
}

void ring_reduce_scatter(Communicator& comm, Device d, void* buf, size_t count, DType t,
                         size_t max_piece_bytes) {
  ring_reduce_scatter_v(comm, d, buf, ring_chunk_bounds(count, comm.size()), t, max_piece_bytes);
}

void ring_all_gather(Communicator& comm, void* buf, size_t count, DType t,
                     size_t max_piece_bytes) {
  ring_all_gather_v(comm, buf, ring_chunk_bounds(count, comm.size()), t, max_piece_bytes);
}

void ring_reduce_scatter_v(Communicator& comm, Device d, void* buf, const std::vector<size_t>& bounds, DType t,
                           size_t max_piece_bytes) {
  check_bounds(comm, bounds);
  if (bounds.back() == bounds.front() || comm.size() == 1) return;
  const Ring ring(comm, buf, bounds, t, max_piece_bytes);
  // Communication scratch, beside the buffer: counted as `buffers` by the memory ledger.
  DeviceArray<std::byte> scratch(d, ring.largest_piece() * ring.elem);

  for (int s = 0; s < ring.n - 1; ++s) {
    const int send_chunk = ring.wrap(ring.rank - 1 - s);  // summed by us at step s-1
    const int recv_chunk = ring.wrap(ring.rank - 2 - s);  // the left neighbour's partial sum
    for (size_t k = 0; k < ring.pieces; ++k) {
      const size_t send_at = ring.piece_begin(send_chunk, k);
      const size_t recv_at = ring.piece_begin(recv_chunk, k);
      const size_t recv_n = ring.piece_size(recv_chunk, k);
      comm.sendrecv(ring.at(send_at), ring.piece_size(send_chunk, k), ring.next, scratch.data(),
                    recv_n, ring.prev, t);
      // Our contribution to this piece plus everything the ring has gathered so far.
      add_piece(d, ring.at(recv_at), scratch.data(), recv_n, t);
    }
  }
}

void ring_all_gather_v(Communicator& comm, void* buf, const std::vector<size_t>& bounds, DType t,
                       size_t max_piece_bytes) {
  check_bounds(comm, bounds);
  if (bounds.back() == bounds.front() || comm.size() == 1) return;
  const Ring ring(comm, buf, bounds, t, max_piece_bytes);

  for (int s = 0; s < ring.n - 1; ++s) {
    const int send_chunk = ring.wrap(ring.rank - s);      // ours at s = 0, then forwarded
    const int recv_chunk = ring.wrap(ring.rank - 1 - s);  // lands in its final place
    for (size_t k = 0; k < ring.pieces; ++k) {
      comm.sendrecv(ring.at(ring.piece_begin(send_chunk, k)), ring.piece_size(send_chunk, k),
                    ring.next, ring.at(ring.piece_begin(recv_chunk, k)),
                    ring.piece_size(recv_chunk, k), ring.prev, t);
    }
  }
}

namespace {

// One phase of the ring on rank `rank`: n-1 steps, each sending chunk (rank - send_shift - s)
// and receiving chunk (rank - send_shift - 1 - s) for s = 0 .. n-2, that is every chunk but
// (rank - send_shift + 1) sent and every chunk but (rank - send_shift) received.
CommTally ring_phase_traffic(const std::vector<size_t>& bounds, int rank, int send_shift, DType t,
                             size_t max_piece_bytes) {
  CommTally traffic;
  const int n = int(bounds.size()) - 1;
  const size_t count = bounds.back() - bounds.front();
  if (n == 1 || count == 0) return traffic;  // the phase returns at once
  const auto chunk = [&](int i) {
    const size_t c = size_t(((i % n) + n) % n);
    return bounds[c + 1] - bounds[c];
  };
  const size_t pieces = ring_pieces(bounds, dtype_size(t), max_piece_bytes);  // as the ring cuts them
  const size_t sent = count - chunk(rank - send_shift + 1), received = count - chunk(rank - send_shift);
  traffic.calls[size_t(CommOp::PointToPoint)] = int64_t(size_t(n - 1) * pieces);
  traffic.bytes[size_t(CommOp::PointToPoint)] = int64_t((sent + received) * dtype_size(t));
  return traffic;
}

}  // namespace

CommTally ring_reduce_scatter_traffic(const std::vector<size_t>& bounds, int rank, DType t, size_t max_piece_bytes) {
  return ring_phase_traffic(bounds, rank, /*send_shift=*/1, t, max_piece_bytes);  // sends r-1-s
}

CommTally ring_all_gather_traffic(const std::vector<size_t>& bounds, int rank, DType t, size_t max_piece_bytes) {
  return ring_phase_traffic(bounds, rank, /*send_shift=*/0, t, max_piece_bytes);  // sends r-s
}

CommTally ring_all_reduce_traffic(size_t count, int n, int rank, DType t, size_t max_piece_bytes) {
  const std::vector<size_t> bounds = ring_chunk_bounds(count, n);
  CommTally traffic = ring_reduce_scatter_traffic(bounds, rank, t, max_piece_bytes);
  traffic += ring_all_gather_traffic(bounds, rank, t, max_piece_bytes);
  return traffic;
}

void ring_all_reduce(Communicator& comm, Device d, void* buf, size_t count, DType t,
                     size_t max_piece_bytes) {
  // After the reduce-scatter rank r holds the finished sum of chunk r, exactly what the
  // all-gather expects on entry.
  ring_reduce_scatter(comm, d, buf, count, t, max_piece_bytes);
  ring_all_gather(comm, buf, count, t, max_piece_bytes);
}

}  // namespace gpt
