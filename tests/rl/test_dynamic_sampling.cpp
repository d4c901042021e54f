// Dynamic sampling without MPI: group classification, counts per round,
// accumulation over rounds, the deterministic selection (independent of
// how groups were spread over ranks), the "never enough groups" message,
// and dynamic sampling off. The collective add_round runs in tests/mpi.
#include "dapo/rl/dynamic_sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dapo {
namespace {

using rl::DynamicSampler;
using rl::GroupCandidate;
using rl::GroupOutcome;
using rl::SamplingStatus;

rl::DynamicSamplingOptions opts(int64_t batch, int64_t max_rounds, bool enabled = true,
                                ShortBatch on_short = ShortBatch::fail) {
  rl::DynamicSamplingOptions o;
  o.enabled = enabled;
  o.train_batch_size = batch;
  o.max_num_gen_batches = max_rounds;
  o.on_short = on_short;
  return o;
}

// position p: tokens 10 + p; outcomes cycle through `pattern`.
std::vector<GroupCandidate> round_of(int64_t first, int64_t n, const std::vector<GroupOutcome>& pattern) {
  std::vector<GroupCandidate> v;
  for (int64_t i = 0; i < n; ++i)
    v.push_back({first + i, 1000 + first + i, 10 + first + i, pattern[size_t(i) % pattern.size()]});
  return v;
}

// Deals candidates round-robin to `ranks` ranks (position order kept per rank).
std::vector<std::vector<GroupCandidate>> deal(const std::vector<GroupCandidate>& all, int ranks) {
  std::vector<std::vector<GroupCandidate>> out(static_cast<size_t>(ranks));
  for (size_t i = 0; i < all.size(); ++i) out[i % size_t(ranks)].push_back(all[i]);
  return out;
}

TEST(DynamicSampling, ClassifyGroups) {
  using V = std::vector<double>;
  EXPECT_EQ(rl::classify_group(V{1, 0, 1}, V{1, 0, 1}), GroupOutcome::mixed);
  EXPECT_EQ(rl::classify_group(V{1, 1, 1}, V{1, 1, 1}), GroupOutcome::all_correct);
  EXPECT_EQ(rl::classify_group(V{0, 0}, V{0, 0}), GroupOutcome::all_wrong);
  EXPECT_EQ(rl::classify_group(V{-1, -1}, V{0, 0}), GroupOutcome::all_wrong);  // score metric
  // seq_reward metric: equal shaped rewards, different correctness.
  EXPECT_EQ(rl::classify_group(V{-1, -1}, V{1, 0}), GroupOutcome::uniform_other);
  // Same acc but different shaped rewards: informative under seq_reward.
  EXPECT_EQ(rl::classify_group(V{1, 0.5}, V{1, 1}), GroupOutcome::mixed);
  EXPECT_EQ(rl::classify_group(V{1}, V{1}), GroupOutcome::all_correct);
  EXPECT_STREQ(rl::group_outcome_name(GroupOutcome::uniform_other), "uniform_other");
}

TEST(DynamicSampling, AccumulatesRoundsAndSelectsInRoundPositionOrder) {
  const std::vector<GroupOutcome> pat{GroupOutcome::all_correct, GroupOutcome::mixed, GroupOutcome::all_wrong,
                                      GroupOutcome::mixed};
  DynamicSampler s(opts(5, 3));
  // Round 0: 6 groups, positions 0..5, mixed at 1, 3, 5.
  const auto r0 = s.add_gathered_round(deal(round_of(0, 6, pat), 2));
  EXPECT_EQ(r0.groups, 6);
  EXPECT_EQ(r0.kept, 3);
  EXPECT_EQ(r0.all_correct, 2);
  EXPECT_EQ(r0.all_wrong, 1);
  EXPECT_EQ(r0.uniform_other, 0);
  EXPECT_EQ(s.status(), SamplingStatus::need_more);
  // Round 1: positions restart at 0; mixed at 1, 3, 5 again -> 6 kept > 5.
  s.add_gathered_round(deal(round_of(0, 6, pat), 3));
  EXPECT_EQ(s.status(), SamplingStatus::done);
  EXPECT_EQ(s.rounds(), 2);
  EXPECT_EQ(s.kept(), 6);
  const auto sel = s.selection();
  ASSERT_EQ(sel.size(), 5u);
  const int64_t want_round[] = {0, 0, 0, 1, 1};
  const int64_t want_pos[] = {1, 3, 5, 1, 3};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(sel[i].round, want_round[i]) << i;
    EXPECT_EQ(sel[i].position, want_pos[i]) << i;
    EXPECT_EQ(sel[i].uid, 1000 + want_pos[i]);
    EXPECT_EQ(sel[i].tokens, 10 + want_pos[i]);
  }
  // Where they live: round 0 dealt over 2 ranks, round 1 over 3.
  EXPECT_EQ(sel[0].rank, 1);  // position 1 -> rank 1, its first
  EXPECT_EQ(sel[0].local_index, 0);
  EXPECT_EQ(sel[2].rank, 1);  // position 5 -> rank 1, its third
  EXPECT_EQ(sel[2].local_index, 2);
  EXPECT_EQ(sel[3].rank, 1);  // round 1, position 1 -> rank 1 of 3, its first
  EXPECT_EQ(sel[4].rank, 0);  // position 3 -> rank 0, its second
  EXPECT_EQ(sel[4].local_index, 1);
  const auto t = s.totals();
  EXPECT_EQ(t.groups, 12);
  EXPECT_EQ(t.kept, 6);
  EXPECT_EQ(s.counts_line(),
            "rounds 2: [1] 6 groups (2 all correct, 1 all wrong, 0 other uniform, 3 kept); "
            "[2] 6 groups (2 all correct, 1 all wrong, 0 other uniform, 3 kept)");
}

TEST(DynamicSampling, SelectionDoesNotDependOnTheRankSplit) {
  const std::vector<GroupOutcome> pat{GroupOutcome::mixed, GroupOutcome::all_wrong, GroupOutcome::mixed,
                                      GroupOutcome::mixed, GroupOutcome::all_correct};
  std::vector<std::vector<int64_t>> picked;
  for (int ranks : {1, 2, 3, 4}) {
    DynamicSampler s(opts(7, 0));
    s.add_gathered_round(deal(round_of(0, 5, pat), ranks));
    s.add_gathered_round(deal(round_of(0, 5, pat), ranks));
    s.add_gathered_round(deal(round_of(0, 5, pat), ranks));
    ASSERT_EQ(s.status(), SamplingStatus::done);
    std::vector<int64_t> keys;
    for (const auto& g : s.selection()) keys.push_back(g.round * 100 + g.position);
    picked.push_back(keys);
  }
  for (size_t i = 1; i < picked.size(); ++i) EXPECT_EQ(picked[i], picked[0]);
  EXPECT_EQ(picked[0], (std::vector<int64_t>{0, 2, 3, 100, 102, 103, 200}));
}

TEST(DynamicSampling, ExhaustedAfterMaxRoundsWithCounts) {
  DynamicSampler s(opts(4, 2));
  s.add_gathered_round(deal(round_of(0, 4, {GroupOutcome::all_correct, GroupOutcome::mixed}), 2));
  EXPECT_EQ(s.status(), SamplingStatus::need_more);
  s.add_gathered_round(deal(round_of(0, 4, {GroupOutcome::all_wrong, GroupOutcome::uniform_other,
                                            GroupOutcome::all_wrong, GroupOutcome::all_wrong}),
                            2));
  ASSERT_EQ(s.status(), SamplingStatus::exhausted);
  EXPECT_EQ(s.exhausted_message(),
            "dynamic sampling: only 2 of train.train_batch_size = 4 groups had responses that differ in "
            "algorithm.filter_metric = acc after 2 generation rounds (rollout.max_num_gen_batches = 2); in total 8 "
            "groups: 2 all correct, 3 all wrong, 1 other uniform, 2 kept. Per round: [1] 4 groups (2 all correct, 0 "
            "all wrong, 0 other uniform, 2 kept); [2] 4 groups (0 all correct, 3 all wrong, 1 other uniform, 0 "
            "kept). Raise rollout.max_num_gen_batches (0: no limit) or rollout.gen_batch_size, or use prompts of a "
            "difficulty the model sometimes but not always solves (rollout.on_short_batch = train trains on the "
            "groups kept instead of stopping)");
}

// A model that solves most prompts must not end its run: after the last
// round the kept groups are trained on (train), or none are (skip).
TEST(DynamicSampling, ShortBatchTrainsOnTheGroupsKeptOrSkips) {
  for (const ShortBatch mode : {ShortBatch::train, ShortBatch::skip}) {
    DynamicSampler s(opts(4, 2, true, mode));
    s.add_gathered_round(deal(round_of(0, 4, {GroupOutcome::all_correct, GroupOutcome::mixed}), 2));
    EXPECT_EQ(s.status(), SamplingStatus::need_more);
    s.add_gathered_round(deal(round_of(0, 4, {GroupOutcome::all_correct, GroupOutcome::all_correct,
                                              GroupOutcome::mixed, GroupOutcome::all_correct}),
                              2));
    ASSERT_EQ(s.status(), SamplingStatus::short_batch) << to_string(mode);
    std::vector<int64_t> keys;
    for (const auto& g : s.selection()) keys.push_back(g.round * 100 + g.position);
    if (mode == ShortBatch::train) {
      EXPECT_EQ(keys, (std::vector<int64_t>{1, 3, 102}));
      EXPECT_EQ(s.short_batch_message(),
                "dynamic sampling: only 3 of train.train_batch_size = 4 groups had responses that differ in "
                "algorithm.filter_metric = acc after 2 generation rounds (rollout.max_num_gen_batches = 2); in total "
                "8 groups: 5 all correct, 0 all wrong, 0 other uniform, 3 kept. Per round: [1] 4 groups (2 all "
                "correct, 0 all wrong, 0 other uniform, 2 kept); [2] 4 groups (3 all correct, 0 all wrong, 0 other "
                "uniform, 1 kept). Training on the 3 groups kept (rollout.on_short_batch = train)");
    } else {
      EXPECT_TRUE(keys.empty());
      EXPECT_NE(s.short_batch_message().find(". No update this step (rollout.on_short_batch = skip)"),
                std::string::npos);
    }
  }
  // Nothing kept at all: train has nothing to train on either.
  DynamicSampler none(opts(4, 2, true, ShortBatch::train));
  none.add_gathered_round(deal(round_of(0, 4, {GroupOutcome::all_wrong}), 2));
  none.add_gathered_round(deal(round_of(0, 4, {GroupOutcome::all_correct}), 2));
  ASSERT_EQ(none.status(), SamplingStatus::short_batch);
  EXPECT_TRUE(none.selection().empty());
  EXPECT_NE(none.short_batch_message().find("only 0 of train.train_batch_size = 4"), std::string::npos);
  EXPECT_NE(none.short_batch_message().find("No update this step"), std::string::npos);
}

TEST(DynamicSampling, NoLimitKeepsGoingAndEmptyRanksAreFine) {
  DynamicSampler s(opts(3, 0));
  for (int r = 0; r < 20; ++r) {
    std::vector<std::vector<GroupCandidate>> per_rank(3);  // all empty but rank 2
    per_rank[2] = round_of(0, 2, {GroupOutcome::all_correct});
    s.add_gathered_round(per_rank);
    EXPECT_EQ(s.status(), SamplingStatus::need_more);
  }
  std::vector<std::vector<GroupCandidate>> per_rank(3);
  per_rank[1] = round_of(0, 3, {GroupOutcome::mixed});
  s.add_gathered_round(per_rank);
  EXPECT_EQ(s.status(), SamplingStatus::done);
  EXPECT_EQ(s.rounds(), 21);
  EXPECT_EQ(s.selection().front().round, 20);
  EXPECT_EQ(s.selection().front().rank, 1);
}

TEST(DynamicSampling, DisabledKeepsEveryGroupButStillCounts) {
  DynamicSampler s(opts(4, 1, false));
  const auto c = s.add_gathered_round(
      deal(round_of(0, 6, {GroupOutcome::all_correct, GroupOutcome::all_wrong, GroupOutcome::mixed}), 2));
  EXPECT_EQ(c.kept, 6);
  EXPECT_EQ(c.all_correct, 2);
  EXPECT_EQ(s.status(), SamplingStatus::done);
  const auto sel = s.selection();
  ASSERT_EQ(sel.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(sel[i].position, int64_t(i));
}

TEST(DynamicSampling, OptionsFromConfig) {
  Config c;
  c.algorithm.dynamic_sampling = false;
  c.algorithm.filter_metric = FilterMetric::seq_reward;
  c.train.train_batch_size = 64;
  c.rollout.max_num_gen_batches = 7;
  const auto o = rl::dynamic_sampling_options(c);
  EXPECT_FALSE(o.enabled);
  EXPECT_EQ(o.metric, FilterMetric::seq_reward);
  EXPECT_EQ(o.train_batch_size, 64);
  EXPECT_EQ(o.max_num_gen_batches, 7);
}

TEST(DynamicSamplingDeathTest, Misuse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  using V = std::vector<double>;
  EXPECT_DEATH(rl::classify_group(V{1, 0}, V{1}), "2 metric values, 1 acc values");
  EXPECT_DEATH(rl::classify_group(V{}, V{}), "0 metric values");
  EXPECT_DEATH(rl::classify_group(V{1, NAN}, V{1, 1}), "non-finite value at 1");
  EXPECT_DEATH(DynamicSampler(opts(0, 1)), "train_batch_size 0");
  DynamicSampler s(opts(1, 1));
  EXPECT_DEATH(s.selection(), "before train_batch_size groups were kept");
  EXPECT_DEATH(s.exhausted_message(), "while sampling is not exhausted");
  std::vector<std::vector<GroupCandidate>> dup(2, round_of(0, 1, {GroupOutcome::mixed}));
  EXPECT_DEATH(s.add_gathered_round(dup), "round 0: position 0 given twice \\(rank 1\\)");
  s.add_gathered_round(deal(round_of(0, 1, {GroupOutcome::mixed}), 1));
  EXPECT_DEATH(s.add_gathered_round({}), "add_round after the step's sampling ended");
}

}  // namespace
}  // namespace dapo
