// MPI start-up and shutdown for one process; see runtime.h.
#include "dapo/parallel/runtime.h"

#include "dapo/parallel/mpi_check.h"

namespace dapo::parallel {
namespace {
void abort_hook(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
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
