// Rewards from verifier outputs: soft overlong punishment, overlong
// filtering, the filter metric; and where response tokens sit in packed
// sequences (loss mask, advantages, old log-probs).
#include "dapo/rl/rewards.h"

#include <gtest/gtest.h>

#include <vector>

#include "dapo/rl/response_tokens.h"

namespace dapo {
namespace {

using rl::ResponseReward;

reward::OverlongShaping shaping(int64_t max_len, int64_t buffer, double factor, bool filter) {
  return {max_len, buffer, factor, filter};
}

TEST(Rewards, SoftOverlongPunishmentAndFilter) {
  // L_max 100, L_cache 20: no penalty up to 80 tokens, then linear to -factor at 100.
  const std::vector<double> scores{1, -1, 1, 1};
  const std::vector<double> acc{1, 0, 1, 1};
  const std::vector<int64_t> lengths{80, 90, 100, 50};
  const std::vector<uint8_t> truncated{0, 0, 1, 0};
  const auto r = rl::shape_rewards(scores, acc, lengths, truncated, shaping(100, 20, 1.0, true));
  ASSERT_EQ(r.size(), 4u);
  EXPECT_DOUBLE_EQ(r[0].penalty, 0.0);
  EXPECT_DOUBLE_EQ(r[0].reward, 1.0);
  EXPECT_DOUBLE_EQ(r[1].penalty, -0.5);
  EXPECT_DOUBLE_EQ(r[1].reward, -1.5);
  EXPECT_DOUBLE_EQ(r[2].penalty, -1.0);
  EXPECT_DOUBLE_EQ(r[2].reward, 0.0);
  EXPECT_TRUE(r[0].in_loss);
  EXPECT_TRUE(r[1].in_loss);
  EXPECT_FALSE(r[2].in_loss);  // truncated and filtering on
  EXPECT_DOUBLE_EQ(r[3].reward, 1.0);
  EXPECT_EQ(r[1].score, -1.0);
  EXPECT_EQ(r[1].acc, 0.0);

  // Filtering off keeps the truncated response; no buffer, no penalty.
  const auto off = rl::shape_rewards(scores, acc, lengths, truncated, shaping(100, 0, 1.0, false));
  for (const ResponseReward& x : off) {
    EXPECT_TRUE(x.in_loss);
    EXPECT_EQ(x.penalty, 0.0);
    EXPECT_EQ(x.reward, x.score);
  }
  // The factor scales the penalty.
  const auto half = rl::shape_rewards(scores, acc, lengths, truncated, shaping(100, 20, 0.5, false));
  EXPECT_DOUBLE_EQ(half[2].penalty, -0.5);
}

TEST(Rewards, FilterMetricValues) {
  const ResponseReward r{-1.0, 0.0, -0.25, -1.25, true};
  EXPECT_EQ(rl::filter_metric_value(FilterMetric::acc, r), 0.0);
  EXPECT_EQ(rl::filter_metric_value(FilterMetric::score, r), -1.0);
  EXPECT_EQ(rl::filter_metric_value(FilterMetric::seq_reward, r), -1.25);
}

TEST(ResponseTokens, PositionsMaskAndValues) {
  // Prompt of 3, response of 4: targets at positions 2..5 are the response tokens.
  const rl::TokenRange p = rl::response_positions(3, 4);
  EXPECT_EQ(p.begin, 2);
  EXPECT_EQ(p.end, 6);
  std::vector<uint8_t> mask(7, 9);
  rl::fill_response_mask(3, 4, true, mask);
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 0}));
  rl::fill_response_mask(3, 4, false, mask);
  EXPECT_EQ(mask, std::vector<uint8_t>(7, 0));
  std::vector<float> v(7, 9.0f);
  rl::fill_response_values(3, 4, -0.5f, v);
  EXPECT_EQ(v, (std::vector<float>{0, 0, -0.5f, -0.5f, -0.5f, -0.5f, 0}));
  rl::scatter_response_values(3, std::vector<float>{1, 2, 3, 4}, v);
  EXPECT_EQ(v, (std::vector<float>{0, 0, 1, 2, 3, 4, 0}));
  // An empty response has no loss positions.
  std::vector<uint8_t> m1(1, 5);
  rl::fill_response_mask(1, 0, true, m1);
  EXPECT_EQ(m1[0], 0);
}

TEST(RewardsDeathTest, Misuse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<double> two{1, 1};
  const std::vector<int64_t> len{1};
  const std::vector<uint8_t> tr{0, 0};
  EXPECT_DEATH(rl::shape_rewards(two, two, len, tr, shaping(10, 0, 1, false)), "2 scores, 2 acc, 1 lengths");
  EXPECT_DEATH(rl::response_positions(0, 3), "at least one prompt token");
  EXPECT_DEATH(rl::response_positions(2, -1), "response length -1");
  std::vector<uint8_t> mask(4);
  EXPECT_DEATH(rl::fill_response_mask(2, 3, true, mask), "sequence array of 4 entries for prompt 2 \\+ response 3");
}

}  // namespace
}  // namespace dapo
