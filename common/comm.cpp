// The backend-independent part of the Communicator: which backend `comm=auto|mpi|nccl`
// selects (and why another cannot be had), the GPU each rank uses, the element-wise
// sum that the bf16 reductions share, and the small helpers of the error messages.
//
// The choice, in order:
//   comm=nccl  NCCL; an error naming the reason when the build has no NCCL (no CUDA
//              toolkit, no libnccl, or no MPI to bootstrap it) or device is not CUDA.
//   comm=mpi   MPI; an error when the build has no MPI. A process started without
//              mpirun runs as an MPI singleton (a world of size 1).
//   comm=auto  the local world of one process, which needs no MPI start-up at all, when
//              no launcher (mpirun, srun) started the process or the build has no MPI;
//              otherwise NCCL when the device is CUDA, NCCL is built and every rank of a
//              node has a GPU of its own; else MPI.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common/comm.h"
#include "common/comm_internal.h"
#include "kernels/cpu/bf16.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpt {

namespace comm_detail {

std::string format_ranks(const std::vector<int>& ranks) {
  // Runs of consecutive ranks become "a-b"; after 32 entries the rest is counted.
  std::string out;
  size_t entries = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (entries == 32) {
      out += ",... (" + std::to_string(ranks.size()) + " ranks)";
      break;
    }
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) {
      out += j == i + 1 ? ',' : '-';
      out += std::to_string(ranks[j]);
    }
    ++entries;
    i = j + 1;
  }
  return out;
}

std::string format_seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

std::chrono::steady_clock::time_point deadline_after(double timeout_s) {
  using clock = std::chrono::steady_clock;
  const clock::time_point now = clock::now();
  const std::chrono::duration<double> left = clock::time_point::max() - now;  // seconds to the clock's end
  if (!(timeout_s < left.count())) return clock::time_point::max();
  return now + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
}

bool on_gpu_memory(const void* p) {
#ifdef GPT_HAVE_CUDA
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // an unregistered host pointer on old runtimes: not an error
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
#else
  (void)p;
  return false;
#endif
}

void check_rank(int r, int size, const char* op, const char* what) {
  if (r < 0 || r >= size)
    fail(std::string(op) + ": " + what + " " + std::to_string(r) + " is not a rank of this group (size " +
         std::to_string(size) + ")");
}

void check_count(size_t count, const char* op) {
  if (count > size_t(std::numeric_limits<int>::max()))
    fail(std::string(op) + ": " + std::to_string(count) +
         " elements in one call is more than MPI's int count allows (2^31 - 1); split the buffer");
}

void check_tag(int tag, const char* op) {
  if (tag < 0 || tag > kMaxTag)
    fail(std::string(op) + ": tag " + std::to_string(tag) + " is outside [0, " + std::to_string(kMaxTag) + "]");
}

void check_summable(DType t, const char* op) {
  if (t == DType::Byte) fail(std::string(op) + ": bytes cannot be summed; reduce numbers (f32, f64, bf16)");
}

}  // namespace comm_detail

using namespace comm_detail;

namespace {

[[noreturn]] void no_nccl(const std::string& why) { fail("comm=nccl: " + why); }

// Why this build cannot offer NCCL (empty when it can).
std::string nccl_missing_reason() {
#if defined(GPT_HAVE_NCCL)
  return "";
#elif !defined(GPT_HAVE_CUDA)
  return "this build has no CUDA (configure with a CUDA toolkit and GPT_CUDA=AUTO or ON)";
#elif !defined(GPT_HAVE_MPI)
  return "NCCL exchanges its unique id over MPI and this build has no MPI (install libopenmpi-dev)";
#else
  return "libnccl was not found in the CUDA toolkit when this build was configured";
#endif
}

#if defined(GPT_HAVE_MPI) && defined(GPT_HAVE_CUDA)
// Every rank of a node takes GPU (local rank mod GPUs): one GPU per rank when there are
// enough, else several ranks share one (which only the MPI backend supports). Returns
// whether the GPUs are shared.
bool select_gpu(Communicator& mpi) {
  const int gpus = cuda_device_count();
  if (gpus == 0) fail("device=cuda: rank " + std::to_string(mpi.rank()) + " sees no CUDA GPU");
  int local = 0, local_size = 1;
  node_local_rank(mpi, &local, &local_size);
  const cudaError_t err = cudaSetDevice(local % gpus);
  if (err != cudaSuccess)
    fail("device=cuda: cudaSetDevice(" + std::to_string(local % gpus) + ") failed: " + cudaGetErrorString(err));
  return local_size > gpus;
}
#endif

}  // namespace

void agree_on_device(Communicator& world, Device device) {
  const char mine = device == Device::CUDA ? 1 : 0;
  std::vector<char> on_gpu(size_t(world.size()));
  world.all_gather(&mine, on_gpu.data(), 1, DType::Byte);
  std::vector<int> gpu_ranks, cpu_ranks;
  for (int r = 0; r < world.size(); ++r) (on_gpu[size_t(r)] ? gpu_ranks : cpu_ranks).push_back(r);
  if (gpu_ranks.empty() || cpu_ranks.empty()) return;
  fail("the ranks run on different devices: rank(s) " + comm_detail::format_ranks(gpu_ranks) + " on a GPU, rank(s) " +
       comm_detail::format_ranks(cpu_ranks) + " on the CPU (device=auto takes what each node has): every rank " +
       "must run on the same kind; set device=cpu, or device=cuda with a GPU on every node");
}

void check_comm_options(const CommOptions& options) {
  const std::string& b = options.backend;
  if (b != "auto" && b != "mpi" && b != "nccl") fail("comm: '" + b + "' is not a backend (auto, mpi or nccl)");
  if (!(options.timeout_s > 0)) fail("comm_timeout_s: must be positive, not " + format_seconds(options.timeout_s));
  if (b == "nccl") {  // first the device: on the CPU no build could use NCCL
    if (options.device != Device::CUDA) no_nccl(kNcclNeedsGpu);
    if (!nccl_missing_reason().empty()) no_nccl(nccl_missing_reason());
  }
}

std::unique_ptr<Communicator> make_world(int* argc, char*** argv, const CommOptions& options) {
  check_comm_options(options);
  const std::string& b = options.backend;
  const bool cuda = options.device == Device::CUDA;
#ifndef GPT_HAVE_MPI
  if (b == "mpi") fail("comm=mpi: this build has no MPI (install libopenmpi-dev and reconfigure with GPT_MPI=AUTO or ON)");
  // Without MPI, N processes started by mpirun would each train alone, as N unrelated
  // size-1 runs writing to one run directory: refuse rather than produce that.
  if (launcher_world_size() > 1)
    fail("this build has no MPI, but it was launched as one of " + std::to_string(launcher_world_size()) +
         " ranks (mpirun): rebuild with MPI (install libopenmpi-dev, GPT_MPI=AUTO or ON) or run one process");
  (void)argc;
  (void)argv;
  return make_local_world(options);
#else
  if (b == "auto" && !launched_by_mpi()) return make_local_world(options);

  std::unique_ptr<Communicator> world = make_mpi_world(argc, argv, options);
  double not_ready = options.ready ? 0 : 1;  // ranks that refused their command line
  world->all_reduce(&not_ready, 1, DType::F64);
  if (not_ready > 0) return world;           // only to say why the job stops
  agree_on_device(*world, options.device);  // before the collectives that differ by device
#ifdef GPT_HAVE_CUDA
  if (cuda) {
    // Whether GPUs are shared on any node, agreed by all ranks, so that with comm=auto
    // every rank picks the same backend.
    double shared_anywhere = select_gpu(*world) ? 1 : 0;
    world->all_reduce(&shared_anywhere, 1, DType::F64);
    const bool shared = shared_anywhere > 0;
#ifdef GPT_HAVE_NCCL
    if (b == "nccl" && shared)
      no_nccl("a node has more ranks than GPUs and NCCL needs a GPU per rank; use comm=mpi to share GPUs");
    if (b == "nccl" || (b == "auto" && !shared)) return make_nccl_comm(std::move(world), options);
#else
    (void)shared;
#endif
  }
#endif
  return world;
#endif
}

void sum_into(void* out, const void* a, const void* b, size_t count, DType t) {
  check_summable(t, "sum_into");
  // Element i is read from a and b before out[i] is written, so out may alias a or b.
  switch (t) {
    case DType::F32: {
      float* o = static_cast<float*>(out);
      const float* x = static_cast<const float*>(a);
      const float* y = static_cast<const float*>(b);
      for (size_t i = 0; i < count; ++i) o[i] = x[i] + y[i];
      return;
    }
    case DType::F64: {
      double* o = static_cast<double*>(out);
      const double* x = static_cast<const double*>(a);
      const double* y = static_cast<const double*>(b);
      for (size_t i = 0; i < count; ++i) o[i] = x[i] + y[i];
      return;
    }
    case DType::BF16: {
      // The sum of two bf16 values is exact in fp32 unless their exponents are far
      // apart; it is rounded once, to nearest even, back to bf16 (what a GPU's bf16
      // reduction does too), so a bf16 all-reduce loses at most half an ulp per add.
      uint16_t* o = static_cast<uint16_t*>(out);
      const uint16_t* x = static_cast<const uint16_t*>(a);
      const uint16_t* y = static_cast<const uint16_t*>(b);
      for (size_t i = 0; i < count; ++i) o[i] = cpu::bf16_bits(cpu::bf16_to_float(x[i]) + cpu::bf16_to_float(y[i]));
      return;
    }
    case DType::Byte:
      return;  // refused above
  }
}

}  // namespace gpt
