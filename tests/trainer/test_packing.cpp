// The packer: budgets respected, sequences whole and in order, targets,
// positions, masks and channels carried over, next-fit determinism, and
// the over-budget error.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "dapo/core/error.h"
#include "dapo/trainer/packing.h"

namespace dapo::trainer {
namespace {

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Packing, PlanIsNextFitInOrder) {
  const std::vector<int64_t> lengths{3, 4, 2, 5, 1, 6, 6};
  const auto plan = plan_micro_batches(lengths, 7);
  const std::vector<std::vector<int64_t>> want{{0, 1}, {2, 3}, {4, 5}, {6}};
  EXPECT_EQ(plan, want);
  // A sequence exactly at the budget fits alone.
  EXPECT_EQ(plan_micro_batches(std::vector<int64_t>{7, 7}, 7), (std::vector<std::vector<int64_t>>{{0}, {1}}));
  EXPECT_TRUE(plan_micro_batches(std::vector<int64_t>{}, 7).empty());
}

TEST(Packing, RandomSetsKeepBudgetWholeSequencesAndOrder) {
  std::mt19937 gen(11);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t budget = 5 + int64_t(gen() % 40);
    SequenceSet set(2);
    const int n = int(gen() % 20);
    for (int i = 0; i < n; ++i) {
      const size_t L = 1 + gen() % size_t(budget);
      std::vector<int32_t> tok(L);
      std::vector<uint8_t> mask(L);
      std::vector<float> a(L), b(L);
      for (size_t t = 0; t < L; ++t) {
        tok[t] = int32_t(gen() % 100);
        mask[t] = t + 1 < L ? uint8_t(gen() % 2) : 0;
        a[t] = float(i * 1000 + int(t));
        b[t] = -a[t];
      }
      set.add(tok, mask, {a, b});
    }
    const std::vector<MicroBatch> mbs = pack_micro_batches(set, budget);
    int64_t next = 0, total = 0;
    for (size_t m = 0; m < mbs.size(); ++m) {
      const MicroBatch& mb = mbs[m];
      ASSERT_LE(mb.num_tokens(), budget);
      ASSERT_GT(mb.num_sequences(), 0);
      // Next-fit: the following micro-batch's first sequence would not have fit.
      if (m + 1 < mbs.size()) ASSERT_GT(mb.num_tokens() + set.length(mbs[m + 1].sequences[0]), budget);
      for (int64_t b = 0; b < mb.num_sequences(); ++b) {
        const int64_t s = mb.sequences[size_t(b)];
        ASSERT_EQ(s, next++);  // whole sequences, in input order
        const int64_t begin = mb.cu_seqlens[size_t(b)], L = set.length(s);
        ASSERT_EQ(mb.cu_seqlens[size_t(b) + 1] - begin, L);
        for (int64_t t = 0; t < L; ++t) {
          const size_t at = size_t(begin + t), src = size_t(set.offsets[size_t(s)] + t);
          ASSERT_EQ(mb.tokens[at], set.tokens[src]);
          ASSERT_EQ(mb.positions[at], t);
          ASSERT_EQ(mb.targets[at], t + 1 < L ? set.tokens[src + 1] : set.tokens[src]);
          ASSERT_EQ(mb.mask[at], set.mask[src]);
          ASSERT_EQ(mb.values[0][at], set.values[0][src]);
          ASSERT_EQ(mb.values[1][at], set.values[1][src]);
        }
      }
      total += mb.num_tokens();
      const model::PackedBatch pb = mb.model_batch();
      EXPECT_EQ(pb.tokens.numel(), mb.num_tokens());
      EXPECT_EQ(pb.cu_seqlens.numel(), mb.num_sequences() + 1);
      EXPECT_EQ(pb.targets.ptr<int32_t>(), mb.targets.data());
    }
    EXPECT_EQ(next, set.size());
    EXPECT_EQ(total, set.total_tokens());
    // Deterministic: packing again gives the same micro-batches.
    const std::vector<MicroBatch> again = pack_micro_batches(set, budget);
    ASSERT_EQ(again.size(), mbs.size());
    for (size_t m = 0; m < mbs.size(); ++m) EXPECT_EQ(again[m].tokens, mbs[m].tokens);
  }
}

TEST(Packing, CountsAndLongestSequence) {
  SequenceSet set;
  set.add(std::vector<int32_t>{1, 2, 3}, std::vector<uint8_t>{0, 1, 0});
  set.add(std::vector<int32_t>{4, 5, 6, 7, 8}, std::vector<uint8_t>{0, 1, 1, 1, 0});
  const std::vector<MicroBatch> mbs = pack_micro_batches(set, 100);
  ASSERT_EQ(mbs.size(), 1u);
  EXPECT_EQ(mbs[0].mask_tokens(), 4);
  EXPECT_EQ(mbs[0].max_sequence_length(), 5);
  EXPECT_EQ(mbs[0].cu_seqlens, (std::vector<int32_t>{0, 3, 8}));
  EXPECT_EQ(mbs[0].positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 4}));
  EXPECT_EQ(mbs[0].targets, (std::vector<int32_t>{2, 3, 3, 5, 6, 7, 8, 8}));
}

TEST(Packing, SequenceOverTheBudgetIsAUserError) {
  SequenceSet set;
  set.add(std::vector<int32_t>{1, 2}, std::vector<uint8_t>{1, 0});
  set.add(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, std::vector<uint8_t>{1, 1, 1, 1, 1, 0});
  const std::string msg = user_error_of([&] { pack_micro_batches(set, 5); });
  EXPECT_NE(msg.find("a sequence of 6 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.max_token_len_per_gpu = 5"), std::string::npos) << msg;
}

TEST(PackingDeathTest, MaskedLastPositionAndChannelCountsAreChecked) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  SequenceSet set(1);
  const std::vector<int32_t> tok{1, 2};
  const std::vector<float> v{0, 0};
  EXPECT_DEATH(set.add(tok, std::vector<uint8_t>{0, 1}, {v}), "last position");
  EXPECT_DEATH(set.add(tok, std::vector<uint8_t>{1, 0}, {}), "channels");
}

}  // namespace
}  // namespace dapo::trainer
