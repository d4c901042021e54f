// The run's planned length: steps, or passes over the data turned into a
// bound on the steps (run_length.h).
#include "dapo/trainer/run_length.h"

#include <gtest/gtest.h>

#include "dapo/core/error.h"

namespace dapo::trainer {
namespace {

TEST(RunLength, StepsWhenGiven) {
  const Config c = load_config("", {"--train.total_steps=250", "--train.total_epochs=7"});
  const RunLength r = plan_run_length(c, 17917);
  EXPECT_FALSE(r.by_epochs);
  EXPECT_EQ(r.steps, 250);
  EXPECT_EQ(describe(r, c, 17917), "250 (train.total_steps)");
  EXPECT_FALSE(run_finished(r, 249, 3));  // passes do not end a run of steps
  EXPECT_TRUE(run_finished(r, 250, 0));
}

// The paper's run: 100 passes over the deduplicated DAPO-Math-17k in rounds
// of 1,536 prompts (verl's one pass over its 1.79M rows).
TEST(RunLength, PassesBoundTheSteps) {
  const Config c = load_config("", {"--train.total_epochs=100"});
  const RunLength r = plan_run_length(c, 17917);
  EXPECT_TRUE(r.by_epochs);
  EXPECT_EQ(r.rounds, (100 * 17917 + 1535) / 1536);
  EXPECT_EQ(r.steps, 1167);
  EXPECT_EQ(describe(r, c, 17917),
            "at most 1167 (train.total_epochs = 100 passes over 17917 prompts: 1167 generation rounds of "
            "rollout.gen_batch_size = 1536; dynamic sampling may take several rounds a step)");
  EXPECT_FALSE(run_finished(r, 400, 99));
  EXPECT_TRUE(run_finished(r, 400, 100));  // the passes are used up first, as with dynamic sampling
  EXPECT_TRUE(run_finished(r, 1167, 99));
  const Config one = load_config("", {});
  EXPECT_EQ(plan_run_length(one, 3000).steps, 2);
  EXPECT_EQ(describe(plan_run_length(one, 3000), one, 3000).substr(0, 45), "at most 2 (train.total_epochs = 1 pass over 3");
}

TEST(RunLength, AbsurdPassesAreRefusedByName) {
  const Config c = load_config("", {"--train.total_epochs=4611686018427387904"});
  try {
    plan_run_length(c, 17917);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("command line: train.total_epochs = 4611686018427387904 passes"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dapo::trainer
