// A fatal error on one rank must end the whole job with one line naming
// file:line, rank and host - never leave the other ranks waiting in a
// collective. Runs only as the `mpi_abort` CTest case (DAPO_TEST_ABORT=1),
// which checks the line and that mpirun returns within the test's timeout.
#include <gtest/gtest.h>

#include <cstdlib>

#include "dapo/core/error.h"
#include "dapo/parallel/comm.h"

namespace dapo {
namespace {

TEST(Abort, OneRankFailingEndsTheJob) {
  if (std::getenv("DAPO_TEST_ABORT") == nullptr) GTEST_SKIP() << "run by the mpi_abort test only";
  const parallel::Comm world = parallel::Comm::world();
  if (world.rank() == world.size() - 1) DAPO_FAIL("injected failure");
  world.barrier();  // the other ranks wait here until MPI_Abort ends them
  ADD_FAILURE() << "rank " << world.rank() << " survived a fatal error on another rank";
}

}  // namespace
}  // namespace dapo
