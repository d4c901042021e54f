// BlockManager: allocation and reference counts, table growth, sharing by
// fork, copy-on-write of shared blocks, out-of-blocks reported without any
// change, and every block free again once every table is freed.
#include "dapo/rollout/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "dapo/core/error.h"

namespace dapo::rollout {
namespace {

TEST(BlockManager, GrowsTablesAndFreesThem) {
  BlockManager m(6, 4);
  EXPECT_EQ(m.num_free(), 6);
  EXPECT_EQ(m.blocks_for(0), 0);
  EXPECT_EQ(m.blocks_for(4), 1);
  EXPECT_EQ(m.blocks_for(5), 2);
  BlockTable a;
  std::vector<BlockCopy> copies;
  EXPECT_EQ(m.blocks_needed(a, 0, 9), 3);
  ASSERT_TRUE(m.prepare_write(a, 0, 9, copies));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(a, (BlockTable{0, 1, 2}));  // lowest ids first
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(m.num_free(), 3);
  // Positions 9..11 fit the last block: nothing to allocate.
  EXPECT_EQ(m.blocks_needed(a, 9, 12), 0);
  ASSERT_TRUE(m.prepare_write(a, 9, 12, copies));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(m.blocks_needed(a, 12, 13), 1);
  for (int32_t b : a) EXPECT_EQ(m.ref_count(b), 1);
  m.free(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(m.num_free(), 6);
  EXPECT_EQ(m.peak_used(), 3);
}

TEST(BlockManager, OutOfBlocksChangesNothing) {
  BlockManager m(3, 2);
  BlockTable a, b;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.prepare_write(a, 0, 4, copies));
  EXPECT_FALSE(m.prepare_write(b, 0, 3, copies));  // needs 2, 1 free
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(m.num_free(), 1);
  EXPECT_EQ(m.writable_positions(b, 0, 3), 2);
  EXPECT_EQ(m.writable_positions(a, 4, 10), 2);
  ASSERT_TRUE(m.prepare_write(b, 0, 2, copies));
  EXPECT_EQ(m.num_free(), 0);
  EXPECT_EQ(m.writable_positions(b, 2, 5), 0);
  EXPECT_EQ(m.writable_positions(a, 3, 5), 1);  // position 3 is in a's last block already
  EXPECT_EQ(m.blocks_needed(a, 3, 4), 0);
}

TEST(BlockManager, ForkSharesAndCopyOnWriteSplits) {
  BlockManager m(8, 4);
  BlockTable prompt;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.prepare_write(prompt, 0, 6, copies));  // blocks 0 (full) and 1 (2 of 4 used)
  BlockTable s0 = m.fork(prompt), s1 = m.fork(prompt), s2 = m.fork(prompt);
  m.free(prompt);
  EXPECT_EQ(m.ref_count(s0[0]), 3);
  EXPECT_EQ(m.ref_count(s0[1]), 3);
  EXPECT_EQ(m.num_free(), 6);
  // The first two samples writing position 6 copy the shared partial block.
  EXPECT_EQ(m.blocks_needed(s0, 6, 7), 1);
  ASSERT_TRUE(m.prepare_write(s0, 6, 7, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 1);
  EXPECT_EQ(copies[0].dst, s0[1]);
  EXPECT_NE(s0[1], 1);
  EXPECT_EQ(s0[0], 0);  // the full block stays shared
  ASSERT_TRUE(m.prepare_write(s1, 6, 7, copies));
  EXPECT_EQ(copies.size(), 2u);
  // The last holder writes in place.
  EXPECT_EQ(m.ref_count(1), 1);
  EXPECT_EQ(m.blocks_needed(s2, 6, 7), 0);
  ASSERT_TRUE(m.prepare_write(s2, 6, 7, copies));
  EXPECT_EQ(copies.size(), 2u);
  EXPECT_EQ(s2[1], 1);
  EXPECT_EQ(m.ref_count(0), 3);
  // A write spanning a shared block and new ones counts both.
  BlockTable s3 = m.fork(s2);
  EXPECT_EQ(m.blocks_needed(s3, 6, 13), 1 + 2);
  std::set<int32_t> distinct{s0[1], s1[1], s2[1]};
  EXPECT_EQ(distinct.size(), 3u);
  for (BlockTable* t : {&s0, &s1, &s2, &s3}) m.free(*t);
  EXPECT_EQ(m.num_free(), 8);
}

TEST(BlockManager, ForkOfAFullBlockBoundaryNeedsNoCopy) {
  BlockManager m(4, 4);
  BlockTable prompt;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.prepare_write(prompt, 0, 8, copies));
  BlockTable s = m.fork(prompt);
  EXPECT_EQ(m.blocks_needed(s, 8, 9), 1);  // a new block, not a copy
  ASSERT_TRUE(m.prepare_write(s, 8, 9, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(s[0], prompt[0]);
  EXPECT_EQ(s[1], prompt[1]);
}

TEST(BlockManagerDeathTest, MisuseIsFatal) {
  auto die = [](auto&& f) {
    set_abort_hook(nullptr);
    f();
  };
  EXPECT_DEATH(die([] { BlockManager m(0, 4); }), "BlockManager of 0 blocks");
  EXPECT_DEATH(die([] {
                 BlockManager m(2, 4);
                 BlockTable t;
                 m.blocks_needed(t, 5, 6);
               }),
               "does not cover the 5 positions");
  EXPECT_DEATH(die([] {
                 BlockManager m(2, 4);
                 m.ref_count(2);
               }),
               "block 2 outside");
  EXPECT_DEATH(die([] {
                 BlockManager m(2, 4);
                 BlockTable t{1};
                 m.free(t);
               }),
               "release of free block 1");
}

}  // namespace
}  // namespace dapo::rollout

namespace dapo::rollout {
namespace {

TEST(CopyGroups, SplitWhereOrderMatters) {
  EXPECT_TRUE(copy_groups(std::vector<BlockCopy>{}).empty());
  // Independent copies, one source read twice: one group.
  EXPECT_EQ(copy_groups(std::vector<BlockCopy>{{1, 2}, {1, 3}, {4, 5}}), (std::vector<size_t>{3}));
  // Block 2 is read, then written (a preempted sequence's block reused).
  EXPECT_EQ(copy_groups(std::vector<BlockCopy>{{2, 7}, {3, 2}}), (std::vector<size_t>{1, 2}));
  // Block 7 is written, then read.
  EXPECT_EQ(copy_groups(std::vector<BlockCopy>{{2, 7}, {7, 4}, {5, 6}}), (std::vector<size_t>{1, 3}));
  // Block 7 written twice.
  EXPECT_EQ(copy_groups(std::vector<BlockCopy>{{2, 7}, {3, 7}}), (std::vector<size_t>{1, 2}));
}

}  // namespace
}  // namespace dapo::rollout
