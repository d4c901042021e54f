// The engine's decode-graph bookkeeping (src/rollout/decode_graphs.h): the
// batch and context buckets, padding a step to its bucket, and which graph
// a step replays (its own, or for a bucket's first steps a larger one).
#include <gtest/gtest.h>

#include "../src/rollout/decode_graphs.h"

namespace dapo::rollout {
namespace {

TEST(DecodeGraphs, Buckets) {
  EXPECT_EQ(batch_bucket(1, 128), 1);
  EXPECT_EQ(batch_bucket(3, 128), 4);
  EXPECT_EQ(batch_bucket(33, 128), 64);
  EXPECT_EQ(batch_bucket(65, 128), 96);
  EXPECT_EQ(batch_bucket(120, 100), 100);
  EXPECT_EQ(context_bucket(257, 768), 512);
  EXPECT_EQ(context_bucket(513, 768), 768);
  EXPECT_EQ(context_bucket(900, 768), 900);  // never below the context
}

TEST(DecodeGraphs, PaddingRowsReadThePadBlockAndWriteNothing) {
  PaddedDecode p;
  // 2 sequences with tables of 2 entries, padded to 4 rows of 3 entries.
  pad_decode(p, {11, 12}, {20, 5}, {40, 81}, {1, 2, 5, 6}, 2, {21, 6}, 4, 3, 99);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{11, 12, 0, 0}));
  EXPECT_EQ(p.slot_mapping, (std::vector<int32_t>{40, 81, -1, -1}));
  EXPECT_EQ(p.context_lens, (std::vector<int32_t>{21, 6, 1, 1}));
  EXPECT_EQ(p.block_table, (std::vector<int32_t>{1, 2, 99, 5, 6, 99, 99, 99, 99, 99, 99, 99}));
  EXPECT_EQ(p.cu_seqlens_q, (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

// A bucket without a graph replays the smallest larger one of its context
// bucket for its first kPadSteps steps, then gets its own; other context
// buckets and smaller graphs are never used.
TEST(DecodeGraphs, ABucketsFirstStepsReplayALargerGraph) {
  DecodeGraphs g;
  EXPECT_EQ(g.pick(128, 512).graph, nullptr);  // nothing captured: capture
  ops::CapturedGraph* g128 = &g.add(128, 512, ops::CapturedGraph());
  ops::CapturedGraph* g64 = &g.add(64, 512, ops::CapturedGraph());
  g.add(32, 512, ops::CapturedGraph());
  g.add(96, 1024, ops::CapturedGraph());
  EXPECT_EQ(g.pick(128, 512).graph, g128);
  for (int64_t i = 0; i < DecodeGraphs::kPadSteps; ++i) {
    const DecodeGraphs::Pick p = g.pick(40, 512);  // 64 is the smallest above 40 at 512
    EXPECT_EQ(p.graph, g64);
    EXPECT_EQ(p.rows, 64);
  }
  EXPECT_EQ(g.padded_steps(), DecodeGraphs::kPadSteps);
  const DecodeGraphs::Pick own = g.pick(40, 512);
  EXPECT_EQ(own.graph, nullptr);
  EXPECT_EQ(own.rows, 40);
  EXPECT_EQ(g.pick(100, 512).graph, g128);
  // No larger graph at these context buckets (1024 has only 96 rows).
  EXPECT_EQ(g.pick(100, 1024).graph, nullptr);
  EXPECT_EQ(g.pick(64, 768).graph, nullptr);
}

}  // namespace
}  // namespace dapo::rollout
