// Dynamic sampling and balancing across data-parallel ranks (mpirun -np 2
// and 4): the collective add_round gives every rank the counts, status and
// selection that one process computes from all candidates - for every tp
// the world allows (tp ranks duplicate their dp group's groups) and with
// ranks that hold nothing; "never enough groups" ends on every rank with
// the same message; the balance exchange delivers every selected group
// exactly once, intact, to its planned rank, also with tiny MPI messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "dapo/core/rng.h"
#include "dapo/parallel/grid.h"
#include "dapo/rl/balance.h"
#include "dapo/rl/dynamic_sampling.h"
#include "dapo/rl/group_data.h"
#include "dapo/trainer/generation_phase.h"
#include "mpi/mpi_test_util.h"

namespace dapo {
namespace {

using parallel::Comm;
using rl::DynamicSampler;
using rl::GroupCandidate;
using rl::GroupOutcome;
using rl::SamplingStatus;

// The outcome of the prompt at `position` in `round`: mixed with
// probability `mixed_permille` / 1000, else one of the uniform kinds.
GroupOutcome outcome_of(uint64_t round, uint64_t position, uint32_t mixed_permille) {
  const uint64_t h = mix64(stream_id({round, position}));
  if (h % 1000 < mixed_permille) return GroupOutcome::mixed;
  switch ((h >> 20) % 3) {
    case 0: return GroupOutcome::all_correct;
    case 1: return GroupOutcome::all_wrong;
    default: return GroupOutcome::uniform_other;
  }
}

int64_t tokens_of(int64_t round, int64_t position) {
  return 20 + int64_t(mix64(stream_id({uint64_t(round), uint64_t(position), 7})) % 500);
}

// Round `round`'s prompts 0..G-1 dealt to `ranks` ranks in uneven blocks
// (rank r gets a block that grows with r; rank 0 may get none).
std::vector<std::vector<GroupCandidate>> round_split(int64_t round, int64_t G, int ranks, uint32_t mixed_permille) {
  std::vector<std::vector<GroupCandidate>> out(static_cast<size_t>(ranks));
  int64_t weight_total = 0;
  for (int r = 0; r < ranks; ++r) weight_total += r + (round % 2);
  int64_t begin = 0;
  for (int r = 0; r < ranks; ++r) {
    const int64_t end = r + 1 == ranks ? G : begin + G * (r + (round % 2)) / std::max<int64_t>(1, weight_total);
    for (int64_t p = begin; p < end; ++p)
      out[size_t(r)].push_back(
          {p, 1000 * round + p, tokens_of(round, p), outcome_of(uint64_t(round), uint64_t(p), mixed_permille)});
    begin = end;
  }
  return out;
}

std::vector<int64_t> keys(const std::vector<rl::SelectedGroup>& sel) {
  std::vector<int64_t> k;
  for (const auto& g : sel) k.push_back(g.round * 100000 + g.position);
  return k;
}

rl::DynamicSamplingOptions options(int64_t batch, int64_t max_rounds) {
  rl::DynamicSamplingOptions o;
  o.train_batch_size = batch;
  o.max_num_gen_batches = max_rounds;
  o.on_short = ShortBatch::fail;
  return o;
}

// The dp barrier's idle time: the slowest rank's time less the mean, the
// same on every rank (rank r takes r + 1 seconds: the wait of rank r is
// D - (r + 1), their mean (D - 1) / 2); none alone.
TEST(DynamicSamplingDp, RoundIdleIsTheWaitForTheSlowestRank) {
  const Comm world = Comm::world();
  const int D = world.size(), r = world.rank();
  EXPECT_DOUBLE_EQ(trainer::dp_round_idle(world, double(r + 1)), double(D - 1) / 2.0);
  EXPECT_DOUBLE_EQ(trainer::dp_round_idle(world, 2.5), 0.0);
  const Comm self = world.split(r, 0);
  EXPECT_DOUBLE_EQ(trainer::dp_round_idle(self, double(r + 7)), 0.0);
}

TEST(DynamicSamplingDp, EveryRankAgreesWithOneProcessForEveryTp) {
  const Comm world = Comm::world();
  for (int tp : test::tp_choices(world.size())) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const parallel::Grid grid = parallel::make_grid(world, tp);
    DynamicSampler dist(options(24, 0)), alone(options(24, 0)), single(options(24, 0));
    int64_t round = 0;
    while (dist.status() == SamplingStatus::need_more) {
      const auto split = round_split(round, 37, grid.dp_size, 250);
      const auto& c = dist.add_round(grid.dp, split[size_t(grid.dp_rank)]);
      const auto& want = alone.add_gathered_round(split);
      EXPECT_EQ(c.groups, want.groups);
      EXPECT_EQ(c.kept, want.kept);
      EXPECT_EQ(c.all_correct, want.all_correct);
      EXPECT_EQ(c.all_wrong, want.all_wrong);
      EXPECT_EQ(c.uniform_other, want.uniform_other);
      single.add_gathered_round(round_split(round, 37, 1, 250));
      ASSERT_LT(++round, 50) << "no progress";
    }
    ASSERT_EQ(dist.status(), SamplingStatus::done);
    ASSERT_EQ(alone.status(), SamplingStatus::done);
    EXPECT_GT(dist.rounds(), 1);
    const auto sel = dist.selection(), want = alone.selection();
    ASSERT_EQ(sel.size(), 24u);
    for (size_t i = 0; i < sel.size(); ++i) {
      EXPECT_EQ(sel[i].round, want[i].round);
      EXPECT_EQ(sel[i].position, want[i].position);
      EXPECT_EQ(sel[i].uid, want[i].uid);
      EXPECT_EQ(sel[i].tokens, want[i].tokens);
      EXPECT_EQ(sel[i].rank, want[i].rank);
      EXPECT_EQ(sel[i].local_index, want[i].local_index);
    }
    // The same groups as with a single rank holding everything.
    EXPECT_EQ(keys(sel), keys(single.selection()));
    // And the same on every rank of the world.
    const std::vector<int64_t> k = keys(sel);
    const std::vector<int64_t> all = world.all_gather_i64(k);
    for (int r = 0; r < world.size(); ++r)
      EXPECT_EQ(std::vector<int64_t>(all.begin() + r * int64_t(k.size()), all.begin() + (r + 1) * int64_t(k.size())), k);
  }
}

TEST(DynamicSamplingDp, NeverEnoughGroupsEndsOnEveryRankWithTheSameMessage) {
  const Comm world = Comm::world();
  DynamicSampler dist(options(10, 3)), alone(options(10, 3));
  int64_t round = 0;
  while (dist.status() == SamplingStatus::need_more) {
    const auto split = round_split(round, 16, world.size(), 100);  // ~1.6 kept per round
    dist.add_round(world, split[size_t(world.rank())]);
    alone.add_gathered_round(split);
    ++round;
  }
  ASSERT_EQ(dist.status(), SamplingStatus::exhausted);
  EXPECT_EQ(dist.rounds(), 3);
  const std::string msg = dist.exhausted_message();
  EXPECT_EQ(msg, alone.exhausted_message());
  EXPECT_NE(msg.find("after 3 generation rounds (rollout.max_num_gen_batches = 3)"), std::string::npos) << msg;
  // Every rank holds the same text: compare lengths and a hash.
  uint64_t h = kStreamHashInit;
  for (char ch : msg) h = stream_combine(h, uint64_t(uint8_t(ch)));
  const auto hashes = world.all_gather_i64(int64_t(h));
  const auto lengths = world.all_gather_i64(int64_t(msg.size()));
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(hashes[size_t(r)], int64_t(h));
    EXPECT_EQ(lengths[size_t(r)], int64_t(msg.size()));
  }
}

TEST(DynamicSamplingDp, RoundsWhereNoRankHoldsAnything) {
  const Comm world = Comm::world();
  DynamicSampler s(options(3, 0));
  for (int r = 0; r < 3; ++r) {
    const auto& c = s.add_round(world, {});
    EXPECT_EQ(c.groups, 0);
    EXPECT_EQ(s.status(), SamplingStatus::need_more);
  }
  const auto split = round_split(3, 40, world.size(), 500);
  s.add_round(world, split[size_t(world.rank())]);
  ASSERT_EQ(s.status(), SamplingStatus::done);
  EXPECT_EQ(s.rounds(), 4);
  for (const auto& g : s.selection()) EXPECT_EQ(g.round, 3);
}

// The group a rank generated at (round, position), with content that
// varies in every field and size.
rl::GroupData make_group(int64_t round, int64_t position, int64_t uid) {
  rl::GroupData g;
  g.uid = uid;
  g.round = round;
  g.position = position;
  g.data_source = "src" + std::to_string(position % 3);
  g.ground_truth = std::to_string(round * 7 + position);
  const int64_t P = 1 + position % 5, n = 2 + (round + position) % 3;
  for (int64_t i = 0; i < P; ++i) g.prompt_ids.push_back(int32_t(100 * position + i));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t len = (position * 3 + r * 5 + round) % 9;
    for (int64_t t = 0; t < len; ++t) {
      g.response_ids.push_back(int32_t(t + 10 * r));
      g.old_logprobs.push_back(-0.01f * float(t + r + position));
    }
    g.response_offsets.push_back(int64_t(g.response_ids.size()));
    g.finish_reason.push_back(uint8_t(r % 2));
    g.score.push_back(r % 2 ? 1.0 : -1.0);
    g.acc.push_back(r % 2);
    g.reward.push_back(r % 2 ? 1.0 : -1.0 - 0.1 * double(len));
    g.in_loss.push_back(uint8_t(len != 8));
    g.advantage.push_back(0.25 * double(r) - 0.5);
    g.response_text.push_back(std::string(size_t(len), char('a' + r)));
    g.pred.push_back(std::to_string(r));
  }
  return g;
}

void check_exchange(const Comm& dp, int64_t mini_batch_groups) {
  DynamicSampler s(options(4 * mini_batch_groups, 0));
  std::vector<std::vector<rl::GroupData>> mine;  // per round: this rank's generated groups
  int64_t round = 0;
  while (s.status() == SamplingStatus::need_more) {
    const auto split = round_split(round, 29, dp.size(), 400);
    std::vector<rl::GroupData> groups;
    for (const GroupCandidate& c : split[size_t(dp.rank())]) groups.push_back(make_group(round, c.position, c.uid));
    mine.push_back(std::move(groups));
    s.add_round(dp, split[size_t(dp.rank())]);
    ++round;
  }
  ASSERT_EQ(s.status(), SamplingStatus::done);
  const auto sel = s.selection();
  const rl::BalancePlan plan = rl::plan_balance(rl::balance_items(sel), dp.size(), mini_batch_groups);
  std::vector<rl::GroupBlob> local;
  for (size_t i = 0; i < sel.size(); ++i)
    if (sel[i].rank == dp.rank())
      local.push_back({int64_t(i), rl::serialize_group(mine[size_t(sel[i].round)][size_t(sel[i].local_index)])});
  const std::vector<rl::GroupBlob> got = rl::exchange_groups(dp, plan, std::move(local));

  // Exactly the planned groups, intact.
  const std::vector<int64_t> want = plan.groups_of(dp.rank());
  ASSERT_EQ(got.size(), want.size());
  std::vector<int64_t> arrived(sel.size(), 0);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].index, want[i]);
    const rl::SelectedGroup& g = sel[size_t(got[i].index)];
    EXPECT_EQ(rl::deserialize_group(got[i].bytes), make_group(g.round, g.position, g.uid)) << "group " << got[i].index;
    arrived[size_t(got[i].index)] = 1;
  }
  // Every group arrives exactly once over all ranks.
  dp.all_reduce_i64(arrived, parallel::ReduceOp::sum);
  for (size_t i = 0; i < arrived.size(); ++i) EXPECT_EQ(arrived[i], 1) << "group " << i;
  // Balance: per mini-batch the spread is within the biggest group.
  for (int64_t m = 0; m < plan.num_mini_batches(); ++m) {
    int64_t biggest = 0, hi = 0, lo = INT64_MAX;
    for (int64_t i = m * mini_batch_groups; i < (m + 1) * mini_batch_groups; ++i)
      biggest = std::max(biggest, sel[size_t(i)].tokens);
    for (int r = 0; r < dp.size(); ++r) {
      hi = std::max(hi, plan.load[size_t(m * dp.size() + r)]);
      lo = std::min(lo, plan.load[size_t(m * dp.size() + r)]);
    }
    EXPECT_LE(hi - lo, biggest) << "mini-batch " << m;
  }
}

TEST(BalanceDp, EveryGroupArrivesOnceAndIntact) {
  const Comm world = Comm::world();
  check_exchange(world, 6);
  check_exchange(world, 1);
}

TEST(BalanceDp, TinyMessagesAndTpGroups) {
  const Comm world = Comm::world(/*max_chunk=*/7);
  for (int tp : test::tp_choices(world.size())) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const parallel::Grid grid = parallel::make_grid(world, tp);
    check_exchange(grid.dp, 5);
  }
}

}  // namespace
}  // namespace dapo
