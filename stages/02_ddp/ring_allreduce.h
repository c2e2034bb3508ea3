// The ring all-reduce, written out over point-to-point messages.
//
// Data parallelism needs one collective: after backward, every rank replaces its
// gradient g_r by the sum over ranks, sum_r g_r. Here that all-reduce is built from
// Communicator::sendrecv alone, as a reduce-scatter followed by an all-gather, both
// passing chunks around a ring of N ranks (rank r sends to r+1 and receives from r-1,
// mod N). The backend's all-reduce (MPI_Allreduce, ncclAllReduce) computes the same
// sums; tests/ring checks that they agree.
//
// Chunks. The buffer of `count` elements is cut into N chunks; chunk i is
//     [ floor(i*count/N), floor((i+1)*count/N) )
// so chunk sizes differ by at most one element and any count works: with count < N
// some chunks are empty. count = 0 and N = 1 are no-ops. Rank r owns chunk r.
//
// Phase 1, reduce-scatter (N-1 steps). At step s = 0 .. N-2 rank r
//     sends    chunk (r-1-s) mod N  to   rank r+1,
//     receives chunk (r-2-s) mod N  from rank r-1, and adds it into its own copy.
// The chunk a rank sends at step s is the one it finished adding at step s-1, so a
// partial sum travels once around the ring, gaining one rank's contribution per hop.
// Chunk c starts at rank c+1 and, after N-1 hops, arrives complete at its owner c.
// (Textbook descriptions send chunk (r-s) and leave rank r with chunk r+1; shifting
// by one lets rank r own chunk r, the shard a ZeRO stage keeps.)
//
// Phase 2, all-gather (N-1 steps). At step s rank r sends chunk (r-s) mod N to r+1
// and stores chunk (r-1-s) mod N from r-1: the finished chunks make one lap around the
// ring, copied, not added, so every rank ends with the same bits.
//
// N = 3, chunks a b c (Ra = a0+a1+a2, ...; "." is a partial sum no longer needed):
//
//                      rank 0          rank 1          rank 2
//   start              a0  b0  c0      a1  b1  c1      a2  b2  c2
//   reduce-scatter     0 -c0-> 1       1 -a1-> 2       2 -b2-> 0
//     after step 0     a0  b0+b2  c0   a1  b1  c1+c0   a2+a1  b2  c2
//                      0 -b0+b2-> 1    1 -c1+c0-> 2    2 -a2+a1-> 0
//     after step 1     Ra  .   .       .   Rb  .       .   .   Rc
//   all-gather         0 -Ra-> 1       1 -Rb-> 2       2 -Rc-> 0
//     after step 0     Ra  .   Rc      Ra  Rb  .       .   Rb  Rc
//                      0 -Rc-> 1       1 -Ra-> 2       2 -Rb-> 0
//     after step 1     Ra  Rb  Rc      Ra  Rb  Rc      Ra  Rb  Rc
//
// Cost. Let the buffer be M bytes. In each of the 2(N-1) steps every rank sends one
// chunk of M/N bytes and receives one, all N links of the ring busy at once, so
//     bytes sent per rank = 2 (N-1) M / N  < 2M, whatever N,
//     time ~ 2(N-1) alpha + 2 (N-1)/N M / beta   (+ (N-1)/N M of additions)
// for a per-message latency alpha and link bandwidth beta. The bandwidth term is the
// least possible. Take one element: every rank must end with the sum of N values, one
// per rank, and a message carries one value (a partial sum). Until the first rank knows
// the whole sum, the messages must connect all N ranks to it: N-1 messages at least.
// At that moment the other N-1 ranks do not know it yet, so each must receive one more:
// N-1 more. So 2(N-1) messages per element in all (the one-way gossip bound), 2(N-1)M
// bytes for the buffer, and some rank sends at least 2(N-1)M/N of them: the ring's
// share, with the load spread evenly. Equivalently: in the reduce-scatter a rank ships
// out (N-1)/N of the data, in the all-gather it brings in the (N-1)/N it did not sum.
// So adding ranks leaves the bytes per rank nearly constant; what grows with N is the
// latency term 2(N-1) alpha, which is why libraries use trees or recursive halving for
// small messages and rings for large ones. The figure 2(N-1)/N M / time is the "bus
// bandwidth" bench_allreduce prints.
//
// Pieces. Each step's chunk is sent in pieces of at most `max_piece_bytes` (split by
// the same floor rule, so every rank agrees on the number of messages), received into
// one small scratch buffer and added while it is still in cache.
//
// Device. buf is in the memory of device d (host memory on CPU ranks, GPU memory on
// GPU ranks: the communicator takes either), and the scratch is allocated beside it.
// The additions are sum_into from common/comm.h on the CPU and the residual-add kernel
// on the GPU (the same fp32 sum per element); bf16 sums round to bf16 after every
// addition, as on the wire. The kernels go to the default stream, which the
// communicators' copies and NCCL's stream wait for, so an addition is done before its
// piece is sent on or the scratch is refilled. The all-gather only copies: no device.
#pragma once
#include <cstddef>
#include <vector>

#include "common/comm.h"
#include "common/comm_counter.h"
#include "common/device.h"

namespace gpt {

// Default size of one message of the ring (a chunk larger than this is sent in pieces).
// Fewer, larger messages pay the per-message latency less often; a piece still fits in
// the last-level cache for the addition. (64 MiB over 4 CPU ranks: pieces from 256 KiB
// to 16 MiB timed within the run-to-run noise, 4 MiB a little ahead.)
inline constexpr size_t kRingPieceBytes = size_t(4) << 20;

// First element of chunk i when `count` elements are cut into `parts` chunks:
// floor(i * count / parts). Chunk i is [ring_chunk_begin(i), ring_chunk_begin(i + 1)).
inline size_t ring_chunk_begin(size_t count, int parts, int i) {
  return size_t(i) * count / size_t(parts);
}

// In place: every rank's buf (in the memory of d) becomes the element-wise sum of all
// ranks' bufs.
void ring_all_reduce(Communicator& comm, Device d, void* buf, size_t count, DType t,
                     size_t max_piece_bytes = kRingPieceBytes);

// In place: afterwards chunk comm.rank() of buf holds the sum over ranks of that chunk;
// the other chunks hold partial sums and are to be treated as garbage.
void ring_reduce_scatter(Communicator& comm, Device d, void* buf, size_t count, DType t,
                         size_t max_piece_bytes = kRingPieceBytes);

// In place: on entry chunk comm.rank() of buf holds this rank's part; afterwards every
// chunk i holds rank i's part, on every rank.
void ring_all_gather(Communicator& comm, void* buf, size_t count, DType t,
                     size_t max_piece_bytes = kRingPieceBytes);

// The same two halves with chunks of any sizes: chunk i is [bounds[i], bounds[i+1])
// (size()+1 non-decreasing element offsets into buf; chunks may be empty). The ZeRO
// stages use them to reduce a bucket straight into each rank's shard of the model.
void ring_reduce_scatter_v(Communicator& comm, Device d, void* buf, const std::vector<size_t>& bounds,
                           DType t, size_t max_piece_bytes = kRingPieceBytes);
void ring_all_gather_v(Communicator& comm, void* buf, const std::vector<size_t>& bounds, DType t,
                       size_t max_piece_bytes = kRingPieceBytes);

// The floor-rule bounds: ring_chunk_begin(count, parts, i) for i = 0..parts.
std::vector<size_t> ring_chunk_bounds(size_t count, int parts);

// What the ring's calls cost rank `rank` of n = bounds.size() - 1, as a
// CountingCommunicator counts them (common/comm_counter.h): n-1 steps of `pieces`
// sendrecv calls per phase (every chunk in as many pieces as the largest needs), and the
// payload of each call, sent plus received. With c_i the size of chunk i, rank r
//     reduce-scatter   sends every chunk but r,    receives every chunk but r-1;
//     all-gather       sends every chunk but r+1,  receives every chunk but r;
// so one all-reduce of `count` elements sends 2 count - c_r - c_(r+1) and receives
// 2 count - c_(r-1) - c_r elements: 2(n-1)/n count each way when n divides count.
// Nothing at all when n = 1 or the chunks are empty. The stages print these beside the
// traffic they count.
CommTally ring_reduce_scatter_traffic(const std::vector<size_t>& bounds, int rank, DType t,
                                      size_t max_piece_bytes = kRingPieceBytes);
CommTally ring_all_gather_traffic(const std::vector<size_t>& bounds, int rank, DType t,
                                  size_t max_piece_bytes = kRingPieceBytes);
CommTally ring_all_reduce_traffic(size_t count, int n, int rank, DType t, size_t max_piece_bytes = kRingPieceBytes);

}  // namespace gpt
