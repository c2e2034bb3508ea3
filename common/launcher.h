/// @file
/// What a process launcher (mpirun, srun, hydra) leaves in the environment of each rank
/// it starts: whether there is one, how many ranks it started and which one this is.
/// Read before MPI is initialised (to choose a backend) and by code that must act on
/// one rank only without a communicator (the --help text, printed once).
#pragma once

namespace gpt {

/// Whether a launcher started this process: Open MPI's mpirun, PMIx launchers (Open MPI
/// 4+, srun --mpi=pmix), PMI-1/2 launchers (MPICH's hydra, Intel MPI, srun --mpi=pmi2)
/// or MVAPICH, each of which leaves one of its variables. Without one, MPI would run as
/// a singleton of size 1.
bool launched_by_mpi();
/// The number of ranks the launcher says it started (1 when not launched by one).
int launcher_world_size();
/// This process's rank as the launcher numbered it; -1 when no launcher started it.
int launcher_rank();
/// The ranks the launcher started on this machine, this one among them (Open MPI's and
/// MPICH hydra's variables); 1 when not launched by one or when it does not say.
int launcher_local_size();

}  // namespace gpt
