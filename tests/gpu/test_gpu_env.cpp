// test_gpu runs without mpirun, but the model reaches its tp group only
// through a Comm, and a Comm needs MPI. This environment starts a one-rank
// MPI runtime (MPI singleton start-up) around all tests of the program.
// Comms made by the tests are destroyed before its TearDown finalizes MPI.
#include <gtest/gtest.h>

#include <memory>

#include "dapo/parallel/runtime.h"

namespace {

class MpiEnvironment : public testing::Environment {
 public:
  void SetUp() override { runtime_ = std::make_unique<dapo::parallel::Runtime>(nullptr, nullptr); }
  void TearDown() override { runtime_.reset(); }

 private:
  std::unique_ptr<dapo::parallel::Runtime> runtime_;
};

[[maybe_unused]] testing::Environment* const kMpi = testing::AddGlobalTestEnvironment(new MpiEnvironment);

}  // namespace
