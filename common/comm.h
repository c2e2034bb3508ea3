// The Communicator: every byte that crosses between ranks goes through this interface
// (DESIGN rule 6), so a stage reads the same whether it runs on MPI or NCCL.
//
// Collectives over the ranks of one group (a communicator), in the usual meanings
// (MPI standard ch. 6; NCCL's collectives are the same operations):
//   all_reduce      every rank ends with the elementwise sum of all ranks' buffers
//   reduce_scatter  the sum, but rank r keeps only chunk r (count elements) of it
//   all_gather      every rank contributes count elements; all end with the concatenation
//   broadcast       root's buffer is copied to every rank
//   send/recv       point to point; a `sendrecv` pairs one send and one receive so a
//                   ring step cannot deadlock
// Buffers are on the device the communicator was made for: CPU memory for MPI; for
// NCCL, GPU memory. The MPI backend also accepts GPU buffers by staging them through
// host memory (so several ranks can share one GPU).
//
// Failure: a peer that stops answering is not waited on forever; after `timeout_s`
// seconds an operation fails with an error naming the peer it was waiting for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/device.h"

namespace gpt {

enum class DType { F32, F64, BF16 };  // BF16: uint16_t storage of bfloat16 values

inline size_t dtype_size(DType t) { return t == DType::F64 ? 8 : t == DType::F32 ? 4 : 2; }
inline const char* dtype_name(DType t) { return t == DType::F64 ? "f64" : t == DType::F32 ? "f32" : "bf16"; }

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<double>() { return DType::F64; }

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "mpi", "nccl" or "local" (one process)

  virtual void all_reduce(void* buf, size_t count, DType t) = 0;
  // send holds size()*count elements; recv receives this rank's chunk of count.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType t) = 0;
  // send holds count elements; recv receives size()*count, rank r's at r*count.
  virtual void all_gather(const void* send, void* recv, size_t count, DType t) = 0;
  virtual void broadcast(void* buf, size_t count, DType t, int root) = 0;
  // Sends send_count elements to `dest` and receives recv_count from `source`, together.
  virtual void sendrecv(const void* send, size_t send_count, int dest, void* recv,
                        size_t recv_count, int source, DType t) = 0;
  virtual void barrier() = 0;

  // A sub-group: ranks with the same color, ordered by key (MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Ends every rank of the job (used after an unrecoverable error on one rank).
  virtual void abort(int code) = 0;
};

struct CommOptions {
  std::string backend = "auto";  // auto | mpi | nccl
  Device device = Device::CPU;
  double timeout_s = 60.0;       // a peer silent this long is reported lost
};

// The world communicator of this process. With MPI absent from the build, or a job
// not started by mpirun, the world is this process alone (size 1). Call once.
std::unique_ptr<Communicator> make_world(int* argc, char*** argv, const CommOptions& options);

// Element-wise sum of a and b into out (used by the hand-written ring of stage 02
// and the MPI backend's bf16 reduction).
void sum_into(void* out, const void* a, const void* b, size_t count, DType t);

}  // namespace gpt
