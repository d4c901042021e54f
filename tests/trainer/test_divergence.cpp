// check_divergence: a step whose every optimizer step was skipped for a
// non-finite gradient norm stops the run with "training diverged at step
// N" naming optim.lr; some skipped steps only warn; none: silence.
#include <gtest/gtest.h>

#include "dapo/trainer/dapo_trainer.h"
#include "io/io_test_util.h"

namespace dapo::trainer {
namespace {

UpdatePhaseResult update_with(int64_t steps, int64_t skipped) {
  UpdatePhaseResult u;
  u.optimizer_steps = steps;
  u.skipped_steps = skipped;
  return u;
}

TEST(Divergence, AllStepsSkippedStopsTheRunNamingTheLearningRate) {
  const Config c = load_config("", {"optim.lr=0.5"});
  EXPECT_EQ(test::error_of([&] { check_divergence(c, 7, update_with(4, 4), true); }),
            "training diverged at step 7: the loss or gradient norm was non-finite in all 4 optimizer steps, so the "
            "weights can no longer change; lower optim.lr (now 0.5, command line) and resume from the last "
            "checkpoint (nothing of this step is saved)");

  testing::internal::CaptureStderr();
  check_divergence(c, 8, update_with(4, 1), true);
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("step 8: 1 of 4 optimizer steps skipped (non-finite loss or gradient norm)"),
            std::string::npos)
      << warned;

  testing::internal::CaptureStderr();
  check_divergence(c, 9, update_with(4, 1), false);  // other ranks: no second warning
  check_divergence(c, 9, update_with(4, 0), true);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// A loss coefficient that is set is named beside the learning rate: it can
// overflow the loss on its own.
TEST(Divergence, SetLossCoefficientsAreNamedBesideTheLearningRate) {
  const Config c = load_config("", {"optim.lr=1e-6", "algorithm.entropy_coeff=500", "algorithm.kl_coef=0.1"});
  const std::string e = test::error_of([&] { check_divergence(c, 3, update_with(2, 2), true); });
  EXPECT_NE(e.find("lower optim.lr (now 1e-06, command line) or algorithm.entropy_coeff (now 500, command line) or "
                   "algorithm.kl_coef (now 0.1, command line) and resume"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace dapo::trainer
