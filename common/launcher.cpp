// The launchers' environment variables; see launcher.h.
#include "common/launcher.h"

#include <algorithm>
#include <cstdlib>

namespace gpt {

namespace {
// Each launcher's variable for the rank and for the size of the job. PMIx sets no size
// variable that every version keeps; PMI_SIZE is set by PMI-1/2 launchers.
constexpr const char* kRankVariables[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK"};
constexpr const char* kSizeVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
// The ranks on this machine: Open MPI's mpirun, and MPICH's hydra (also Intel MPI's).
constexpr const char* kLocalSizeVariables[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
}  // namespace

bool launched_by_mpi() {
  for (const char* name : kRankVariables)
    if (std::getenv(name) != nullptr) return true;
  for (const char* name : kSizeVariables)
    if (std::getenv(name) != nullptr) return true;
  return false;
}

int launcher_world_size() {
  for (const char* name : kSizeVariables)
    if (const char* v = std::getenv(name)) return std::max(1, std::atoi(v));
  return 1;
}

int launcher_local_size() {
  for (const char* name : kLocalSizeVariables)
    if (const char* v = std::getenv(name)) return std::max(1, std::atoi(v));
  return 1;
}

int launcher_rank() {
  for (const char* name : kRankVariables)
    if (const char* v = std::getenv(name)) return std::max(0, std::atoi(v));
  return -1;
}

}  // namespace gpt
