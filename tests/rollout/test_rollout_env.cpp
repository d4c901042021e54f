// test_rollout runs without mpirun, but the model and the engine reach their
// tp group through a Comm, and a Comm needs MPI: this environment starts a
// one-rank MPI runtime (singleton start-up) around all tests of the
// program. Comms made by the tests are gone before its TearDown finalizes MPI.
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
