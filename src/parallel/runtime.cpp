// MPI start-up and shutdown for one process; see runtime.h.
#include "dapo/parallel/runtime.h"

#include <sched.h>

#include <cstdio>
#include <thread>

#include "dapo/parallel/mpi_check.h"

namespace dapo::parallel {
namespace {
void abort_hook(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

// Open MPI's mpirun binds each rank to one core when it starts two or fewer
// (--bind-to core): the rank's CPU work (random initialisation, reward
// verification, tokenizing, OpenMP loops) then runs on that one core while
// the node's others idle. Said once per node, by its first rank, when the
// node has cores to spare.
void warn_if_bound_to_one_cpu(int rank, int local_rank, int local_size) {
  if (local_rank != 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) != 1) return;
  const unsigned cpus = std::thread::hardware_concurrency();
  if (cpus < 2u * unsigned(local_size)) return;
  std::fprintf(stderr,
               "dapo: warning: rank %d is bound to a single CPU of the %u on this node (%d ranks here): its CPU work "
               "runs on one core. Launch with `mpirun --bind-to none` (Open MPI binds each rank to one core when "
               "it starts two or fewer) or `srun --cpus-per-task=N`.\n",
               rank, cpus, local_size);
}

}  // namespace

Runtime::Runtime(int* argc, char*** argv) {
  int provided = 0;
  // FUNNELED: only the main thread calls MPI; OpenMP threads and the CUDA
  // runtime never do.
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) DAPO_FAIL("MPI_Init_thread failed: ", detail::mpi_error_string(rc));
  // Errors come back as codes so that DAPO_MPI_CHECK can report them with a location.
  DAPO_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  DAPO_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  DAPO_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  set_process_identity(rank_);
  set_abort_hook(&abort_hook);
  MPI_Comm local;
  DAPO_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  DAPO_MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  DAPO_MPI_CHECK(MPI_Comm_size(local, &local_size_));
  DAPO_MPI_CHECK(MPI_Comm_free(&local));
  warn_if_bound_to_one_cpu(rank_, local_rank_, local_size_);
}

Runtime::~Runtime() {
  set_abort_hook(nullptr);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void Runtime::abort_job(int exit_code) {
  abort_hook(exit_code);
  std::_Exit(exit_code);
}

}  // namespace dapo::parallel
