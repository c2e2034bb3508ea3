/// @file
/// Private declarations shared by the communicator's source files (comm.cpp, which picks
/// a backend, and one file per backend). Nothing outside common/comm*.cpp includes this.
///
/// ```
///   comm_local.cpp  the world of one process (no MPI, or not launched by mpirun)
///   comm_mpi.cpp    MPI: non-blocking calls completed by a polling wait with a timeout
///   comm_nccl.cpp   NCCL on GPU buffers, bootstrapped over an MPI communicator
/// ```
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/launcher.h"

namespace gpt::comm_detail {

// --- comm.cpp: helpers every backend uses -------------------------------------------

/// "0-3", "0,2,4,6", "0-3,8-11": a compact list of ranks for error messages (long lists
/// are cut after a few dozen entries).
std::string format_ranks(const std::vector<int>& ranks);

/// 60 -> "60", 1.5 -> "1.5": seconds as a person would write them.
std::string format_seconds(double s);

/// The steady clock's time timeout_s from now; a timeout too long for the clock's
/// nanosecond count (about 292 years) saturates to the clock's end instead of wrapping
/// into the past.
std::chrono::steady_clock::time_point deadline_after(double timeout_s);

/// Fails unless 0 <= r < size, naming the operation and the argument.
void check_rank(int r, int size, const char* op, const char* what);

/// Fails when a count does not fit the int that MPI and the bf16 reduction take.
void check_count(size_t count, const char* op);

/// Fails unless 0 <= tag <= kMaxTag, naming the operation.
void check_tag(int tag, const char* op);

/// Fails for a type that cannot be summed (bytes), naming the operation.
void check_summable(DType t, const char* op);

/// Whether p points into GPU memory (device or managed); false for host memory, for
/// null and in builds without CUDA. The MPI backend stages such buffers through host
/// memory; the NCCL backend hands the others to MPI.
bool on_gpu_memory(const void* p);

// --- comm_local.cpp ----------------------------------------------------------------

/// A world of one rank: every collective is a copy (or nothing), split returns another.
std::unique_ptr<Communicator> make_local_world(const CommOptions& options);

// --- comm_mpi.cpp ------------------------------------------------------------------
#ifdef GPT_HAVE_MPI
/// MPI_COMM_WORLD (initialising MPI on the first call; finalised when the last
/// communicator made from it is destroyed).
std::unique_ptr<Communicator> make_mpi_world(int* argc, char*** argv, const CommOptions& options);

/// This rank's index among the ranks of the same node, and how many share the node
/// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED). `mpi` must be an MPI communicator.
void node_local_rank(Communicator& mpi, int* local_rank, int* local_size);

/// The MPI_COMM_WORLD rank of this process (for error messages of other backends).
int mpi_world_rank();
#endif

// --- comm_nccl.cpp -----------------------------------------------------------------
#ifdef GPT_HAVE_NCCL
/// An NCCL communicator over the same ranks as `mpi` (which it keeps for bootstrap,
/// split, barrier, abort, tagged point-to-point messages and host buffers). The CUDA device must already be selected.
std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> mpi, const CommOptions& options);
#endif

}  // namespace gpt::comm_detail
