// test_trainer runs without mpirun, but the model and the optimizer reach
// their tp and dp groups through Comms, which need MPI: a one-rank MPI
// runtime (singleton start-up) lives around all tests of the program.
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
