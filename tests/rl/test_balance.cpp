// Balance plans without MPI: every group placed once, per mini-batch; the
// spread of tokens within one group's size on random inputs; longest-first
// placement and its tie rules; staying put when already balanced. The
// exchange itself runs in tests/mpi/test_rl_dp.cpp.
#include "dapo/rl/balance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace dapo {
namespace {

using rl::BalanceItem;

TEST(Balance, LongestFirstOnTheLeastLoadedRank) {
  // One mini-batch of 5 groups over 2 ranks, all held by rank 0.
  const std::vector<BalanceItem> items{{5, 0}, {9, 0}, {4, 0}, {7, 0}, {3, 0}};
  const auto plan = rl::plan_balance(items, 2, 5);
  // Order 9, 7, 5, 4, 3: 9 -> r0 (holder), 7 -> r1, 5 -> r1 (12), 4 -> r0 (13), 3 -> r1 (15).
  EXPECT_EQ(plan.dest, (std::vector<int>{1, 0, 0, 1, 1}));
  EXPECT_EQ(plan.load, (std::vector<int64_t>{13, 15}));
  EXPECT_EQ(plan.moves(), 3);
  EXPECT_EQ(plan.num_mini_batches(), 1);
  EXPECT_EQ(plan.groups_of(0), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(plan.groups_of(1), (std::vector<int64_t>{0, 3, 4}));
}

TEST(Balance, EqualGroupsStayWithTheirHolder) {
  // Already balanced: 2 groups per rank of equal size, nothing moves.
  const std::vector<BalanceItem> items{{10, 0}, {10, 1}, {10, 2}, {10, 0}, {10, 1}, {10, 2}};
  const auto plan = rl::plan_balance(items, 3, 6);
  EXPECT_EQ(plan.moves(), 0);
  EXPECT_EQ(plan.load, (std::vector<int64_t>{20, 20, 20}));
}

TEST(Balance, EachMiniBatchIsBalancedOnItsOwn) {
  const std::vector<BalanceItem> items{{100, 0}, {1, 0}, {1, 1}, {1, 1}, {50, 1}, {50, 1}};
  const auto plan = rl::plan_balance(items, 2, 3);
  ASSERT_EQ(plan.num_mini_batches(), 2);
  EXPECT_EQ(plan.mini_batch, (std::vector<int64_t>{0, 0, 0, 1, 1, 1}));
  // Mini-batch 0: 100 on its holder r0, the two 1s on r1.
  EXPECT_EQ(plan.load[0], 100);
  EXPECT_EQ(plan.load[1], 2);
  // Mini-batch 1: 50 (holder r1), 50 -> r0, 1 -> r1.
  EXPECT_EQ(plan.load[2], 50);
  EXPECT_EQ(plan.load[3], 51);
  EXPECT_EQ(plan.groups_of(1, 0), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(plan.groups_of(1, 1), (std::vector<int64_t>{3, 4}));
}

TEST(Balance, RandomInputsStayWithinOneGroupAndPlaceEveryGroupOnce) {
  std::mt19937 gen(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int dp = 1 + int(gen() % 8);
    const int64_t mb = 1 + int64_t(gen() % 24);
    const int64_t n = mb * (1 + int64_t(gen() % 4));
    std::vector<BalanceItem> items(static_cast<size_t>(n));
    const int64_t spread = 1 + int64_t(gen() % 3000);
    for (auto& it : items) it = {int64_t(gen() % uint32_t(spread)), int(gen() % uint32_t(dp))};
    const auto plan = rl::plan_balance(items, dp, mb);
    ASSERT_EQ(plan.num_groups(), n);
    std::vector<int> count(static_cast<size_t>(n), 0);
    for (int r = 0; r < dp; ++r)
      for (int64_t i : plan.groups_of(r)) ++count[size_t(i)];
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(count[size_t(i)], 1) << "trial " << trial << " group " << i;
    for (int64_t m = 0; m < plan.num_mini_batches(); ++m) {
      int64_t biggest = 0, total = 0;
      for (int64_t i = m * mb; i < (m + 1) * mb; ++i) {
        biggest = std::max(biggest, items[size_t(i)].tokens);
        total += items[size_t(i)].tokens;
      }
      const auto first = plan.load.begin() + m * dp;
      const int64_t hi = *std::max_element(first, first + dp), lo = *std::min_element(first, first + dp);
      ASSERT_LE(hi - lo, biggest) << "trial " << trial << " mini-batch " << m;
      int64_t sum = 0;
      for (int r = 0; r < dp; ++r) sum += first[r];
      ASSERT_EQ(sum, total);
      // The recorded loads are those of the destinations.
      std::vector<int64_t> recount(static_cast<size_t>(dp), 0);
      for (int64_t i = m * mb; i < (m + 1) * mb; ++i) recount[size_t(plan.dest[size_t(i)])] += items[size_t(i)].tokens;
      ASSERT_TRUE(std::equal(recount.begin(), recount.end(), first));
    }
  }
}

TEST(Balance, ItemsOfASelection) {
  std::vector<rl::SelectedGroup> sel(2);
  sel[0].tokens = 30;
  sel[0].rank = 1;
  sel[1].tokens = 7;
  sel[1].rank = 0;
  const auto items = rl::balance_items(sel);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].tokens, 30);
  EXPECT_EQ(items[0].holder, 1);
  EXPECT_EQ(items[1].holder, 0);
}

// A short batch (rollout.on_short_batch = train) ends in a partial
// mini-batch; no groups at all make an empty plan.
TEST(Balance, PartialLastMiniBatchAndEmptySelection) {
  const std::vector<BalanceItem> three{{1, 0}, {2, 0}, {3, 0}};
  const rl::BalancePlan plan = rl::plan_balance(three, 2, 2);
  EXPECT_EQ(plan.num_mini_batches(), 2);
  EXPECT_EQ(plan.mini_batch, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(plan.dest, (std::vector<int>{1, 0, 0}));
  EXPECT_EQ(plan.load, (std::vector<int64_t>{2, 1, 3, 0}));
  const rl::BalancePlan none = rl::plan_balance(std::vector<BalanceItem>{}, 2, 2);
  EXPECT_EQ(none.num_mini_batches(), 0);
  EXPECT_TRUE(none.load.empty());
}

TEST(BalanceDeathTest, Misuse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<BalanceItem> three{{1, 0}, {2, 0}, {3, 0}};
  EXPECT_DEATH(rl::plan_balance(three, 2, 0), "mini-batches of 0 groups");
  EXPECT_DEATH(rl::plan_balance(three, 0, 3), "dp size 0");
  EXPECT_DEATH(rl::plan_balance(std::vector<BalanceItem>{{1, 2}}, 2, 1), "group 0 held by rank 2 of 2");
  EXPECT_DEATH(rl::plan_balance(std::vector<BalanceItem>{{-1, 0}}, 2, 1), "group 0: -1 tokens");
}

}  // namespace
}  // namespace dapo
