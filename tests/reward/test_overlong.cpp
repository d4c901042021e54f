// Soft overlong punishment at its boundary points, and overlong filtering.
#include "dapo/reward/overlong.h"

#include <gtest/gtest.h>

namespace dapo::reward {
namespace {

TEST(Overlong, PenaltyAtTheBoundaries) {
  // L_max = 20480, L_cache = 4096 (the DAPO recipe): expected = 16384.
  EXPECT_DOUBLE_EQ(overlong_penalty(0, 20480, 4096, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(16383, 20480, 4096, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(16384, 20480, 4096, 1.0), 0.0);    // exactly L_max - L_cache
  EXPECT_DOUBLE_EQ(overlong_penalty(16385, 20480, 4096, 1.0), -1.0 / 4096);
  EXPECT_DOUBLE_EQ(overlong_penalty(18432, 20480, 4096, 1.0), -0.5);   // half-way into the buffer
  EXPECT_DOUBLE_EQ(overlong_penalty(20480, 20480, 4096, 1.0), -1.0);   // at L_max: -factor
  EXPECT_DOUBLE_EQ(overlong_penalty(20480, 20480, 4096, 0.5), -0.5);   // factor scales it
  EXPECT_DOUBLE_EQ(overlong_penalty(18432, 20480, 4096, 2.0), -1.0);
  // The formula is linear past L_max too (a caller that lets len exceed L_max sees it go on).
  EXPECT_DOUBLE_EQ(overlong_penalty(24576, 20480, 4096, 1.0), -2.0);
}

TEST(Overlong, NoBufferNoPenalty) {
  EXPECT_DOUBLE_EQ(overlong_penalty(20480, 20480, 0, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(0, 20480, 0, 1.0), 0.0);
  // A buffer as long as L_max punishes from the first token on.
  EXPECT_DOUBLE_EQ(overlong_penalty(0, 100, 100, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(50, 100, 100, 1.0), -0.5);
  // Factor 0 switches the punishment off as well.
  EXPECT_DOUBLE_EQ(overlong_penalty(100, 100, 100, 0.0), 0.0);
}

TEST(Overlong, ShapeRewardAndFilter) {
  OverlongShaping s;
  s.max_response_length = 1000;
  s.buffer_len = 200;
  s.penalty_factor = 1.0;
  s.filter = false;
  ShapedReward r = shape_reward(1.0, 900, false, s);
  EXPECT_DOUBLE_EQ(r.penalty, -0.5);
  EXPECT_DOUBLE_EQ(r.reward, 0.5);
  EXPECT_TRUE(r.in_loss);
  r = shape_reward(-1.0, 1000, true, s);  // truncated but filtering is off
  EXPECT_DOUBLE_EQ(r.reward, -2.0);
  EXPECT_TRUE(r.in_loss);
  s.filter = true;
  r = shape_reward(-1.0, 1000, true, s);
  EXPECT_FALSE(r.in_loss);
  EXPECT_DOUBLE_EQ(r.reward, -2.0);  // the penalty is a separate switch
  r = shape_reward(1.0, 1000, false, s);  // ended with EOS exactly at L_max: kept
  EXPECT_TRUE(r.in_loss);
  s.buffer_len = 0;
  r = shape_reward(1.0, 1000, true, s);
  EXPECT_DOUBLE_EQ(r.reward, 1.0);
  EXPECT_FALSE(r.in_loss);
}

TEST(Overlong, FromConfiguration) {
  const Config c = load_config("", {"--algorithm.overlong_buffer_len=512", "--algorithm.overlong_penalty_factor=0.5",
                                    "--algorithm.overlong_filter=true", "--rollout.max_response_length=2048"});
  const OverlongShaping s = overlong_shaping(c);
  EXPECT_EQ(s.max_response_length, 2048);
  EXPECT_EQ(s.buffer_len, 512);
  EXPECT_DOUBLE_EQ(s.penalty_factor, 0.5);
  EXPECT_TRUE(s.filter);
  EXPECT_DOUBLE_EQ(shape_reward(1.0, 2048, false, s).penalty, -0.5);
}

TEST(OverlongDeathTest, BadArgumentsAreBugs) {
  EXPECT_DEATH(overlong_penalty(10, 100, 200, 1.0), "overlong_buffer_len");
  EXPECT_DEATH(overlong_penalty(-1, 100, 10, 1.0), "check failed");
}

}  // namespace
}  // namespace dapo::reward
