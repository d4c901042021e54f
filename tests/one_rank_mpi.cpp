// For test programs that run without mpirun (test_io, test_model,
// test_rollout, test_trainer, test_gpu) but reach Comms, which need MPI:
// this environment starts a one-rank MPI runtime (MPI singleton start-up)
// around all tests of the program. Comms and files the tests make are gone
// before its TearDown finalizes MPI. tests/CMakeLists.txt links it into the
// modules that need it.
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
