// GRPO advantages: verl's convention (unbiased std, +1e-6 on the std),
// Dr. GRPO without the std, groups of one, uniform groups, the grouping by
// offsets, and misuse.
#include "dapo/rl/advantages.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dapo {
namespace {

using rl::grpo_advantages;
using rl::grpo_group_advantages;

TEST(Advantages, KnownValuesWithUnbiasedStd) {
  // Rewards 1, -1, -1, 1: mean 0, torch.std (n - 1) = sqrt(4 / 3).
  const std::vector<double> r{1, -1, -1, 1};
  std::vector<double> a(4);
  grpo_group_advantages(r, true, a);
  const double want = 1.0 / (std::sqrt(4.0 / 3.0) + 1e-6);
  EXPECT_NEAR(a[0], want, 1e-15);
  EXPECT_NEAR(a[1], -want, 1e-15);
  // Not the biased (population) std, which would give 1 / (1 + 1e-6).
  EXPECT_GT(std::fabs(a[0] - 1.0 / (1.0 + 1e-6)), 0.1);
}

TEST(Advantages, DapoRewardsWithOverlongPenalty) {
  // One correct answer, two wrong, one wrong with a -0.5 overlong penalty.
  const std::vector<double> r{1.0, -1.0, -1.0, -1.5};
  std::vector<double> a(4);
  grpo_group_advantages(r, true, a);
  const double mean = (1.0 - 1.0 - 1.0 - 1.5) / 4;
  double ss = 0;
  for (double x : r) ss += (x - mean) * (x - mean);
  const double sd = std::sqrt(ss / 3);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(a[i], (r[i] - mean) / (sd + 1e-6), 1e-14) << i;
  double sum = 0;
  for (double x : a) sum += x;
  EXPECT_NEAR(sum, 0.0, 1e-12);
}

TEST(Advantages, WithoutStdIsCentredReward) {
  const std::vector<double> r{2, 0, 1, 5};
  std::vector<double> a(4);
  grpo_group_advantages(r, false, a);
  EXPECT_DOUBLE_EQ(a[0], 0.0);
  EXPECT_DOUBLE_EQ(a[1], -2.0);
  EXPECT_DOUBLE_EQ(a[2], -1.0);
  EXPECT_DOUBLE_EQ(a[3], 3.0);
}

TEST(Advantages, UniformGroupAndGroupOfOneGiveZero) {
  std::vector<double> a(3, 7.0);
  grpo_group_advantages(std::vector<double>{1, 1, 1}, true, a);
  for (double x : a) EXPECT_EQ(x, 0.0);
  std::vector<double> one{42.0};
  grpo_group_advantages(one, true, one);  // in place
  EXPECT_EQ(one[0], 0.0);
  std::vector<double> one_nostd{-3.0}, out(1);
  grpo_group_advantages(one_nostd, false, out);
  EXPECT_EQ(out[0], 0.0);
}

TEST(Advantages, GroupsByOffsetsIncludingEmptyAndInPlace) {
  std::vector<double> r{1, -1, 3, 3, 3, 0, 2};
  const std::vector<int64_t> offsets{0, 2, 2, 5, 7};
  std::vector<double> want(7);
  grpo_group_advantages(std::span<const double>(r).subspan(0, 2), true, std::span<double>(want).subspan(0, 2));
  grpo_group_advantages(std::span<const double>(r).subspan(2, 3), true, std::span<double>(want).subspan(2, 3));
  grpo_group_advantages(std::span<const double>(r).subspan(5, 2), true, std::span<double>(want).subspan(5, 2));
  grpo_advantages(r, offsets, true, r);
  EXPECT_EQ(r, want);
  EXPECT_NEAR(r[0], 1.0 / (std::sqrt(2.0) + 1e-6), 1e-15);
  EXPECT_EQ(r[2], 0.0);
}

TEST(AdvantagesDeathTest, Misuse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<double> a(2);
  EXPECT_DEATH(grpo_group_advantages(std::vector<double>{1, 2, 3}, true, a), "3 rewards, 2 advantages");
  EXPECT_DEATH(grpo_group_advantages(std::vector<double>{1, NAN}, true, a), "non-finite reward");
  std::vector<double> r{1, 2};
  EXPECT_DEATH(grpo_advantages(r, std::vector<int64_t>{0, 1}, true, a), "group offsets must run from 0 to 2");
  EXPECT_DEATH(grpo_advantages(r, std::vector<int64_t>{0, 2, 1, 2}, true, a), "group offsets decrease at group 1");
}

}  // namespace
}  // namespace dapo
