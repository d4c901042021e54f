// The ZeRO-1 partition (optim/shard_layout.h): buckets from the buffer's
// end, every rank's parts aligned to 64 floats and equal but for the last
// rank's tail, the shards together covering the buffer exactly once, and
// the per-rank byte counts of the training state.
#include <gtest/gtest.h>

#include <algorithm>

#include "dapo/optim/shard_layout.h"
#include "model/model_test_util.h"

namespace dapo::optim {
namespace {

TEST(ShardLayout, BucketSpansFromTheEnd) {
  const std::vector<Span> s = bucket_spans(1000, 300);
  ASSERT_EQ(s.size(), size_t(4));
  EXPECT_EQ(s[0], (Span{700, 1000}));
  EXPECT_EQ(s[2], (Span{100, 400}));
  EXPECT_EQ(s[3], (Span{0, 100}));
  EXPECT_TRUE(bucket_spans(0, 5).empty());
}

TEST(ShardLayout, PartsCoverTheBufferOnceAlignedAndBalanced) {
  for (const int dp : {1, 2, 3, 4, 6, 8}) {
    for (const int64_t n : {int64_t(64), int64_t(64 * 7), int64_t(64 * 1001), int64_t(64 * 4096)}) {
      for (const size_t bytes : {size_t(1), size_t(4096), size_t(100000), size_t(64) << 20}) {
        SCOPED_TRACE(testing::Message() << "dp " << dp << " n " << n << " bucket bytes " << bytes);
        const ShardLayout layout(n, dp, dp - 1, bytes);
        EXPECT_EQ(layout.bucket_elements() % (kShardAlignElements * dp), 0);
        EXPECT_GE(layout.bucket_elements() * 4, int64_t(bytes));
        std::vector<int> owner(size_t(n), -1);
        int64_t total = 0, least = n, most = 0;
        for (int r = 0; r < dp; ++r) {
          int64_t at = 0;
          for (const model::ShardRange& s : layout.ranges(r)) {
            EXPECT_EQ(s.shard_offset, at);
            EXPECT_EQ(s.begin % kShardAlignElements, 0);
            at += s.end - s.begin;
            for (int64_t i = s.begin; i < s.end; ++i) {
              ASSERT_EQ(owner[size_t(i)], -1) << "element " << i << " held twice";
              owner[size_t(i)] = r;
            }
          }
          EXPECT_EQ(layout.shard_elements(r), at);
          total += at;
          least = std::min(least, at);
          most = std::max(most, at);
        }
        EXPECT_EQ(total, n);
        EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
        EXPECT_LT(most - least, kShardAlignElements * dp);  // at most the last rank's tail
        // Each bucket: equal parts, then the last rank's tail.
        for (const Bucket& b : layout.buckets()) {
          EXPECT_EQ(b.part % kShardAlignElements, 0);
          EXPECT_LT(b.tail(dp).size(), kShardAlignElements * dp);
          for (int r = 0; r < dp; ++r) {
            const Span p = layout.part(b, r);
            EXPECT_EQ(p.begin, b.span.begin + r * b.part);
            if (r + 1 < dp) EXPECT_EQ(p.size(), b.part);
          }
          EXPECT_EQ(layout.part(b, dp - 1).end, b.span.end);
        }
      }
    }
  }
}

TEST(ShardLayout, TrainStateBytes) {
  const model::Qwen2Config c = test::tiny_config(false, 2);
  const int64_t n = model::ParamStore::buffer_elements_of(c, 0, 2);
  EXPECT_EQ(n, model::ParamStore(c, 1, 2).buffer_elements());
  const TrainStateBytes cpu = train_state_bytes(c, 2, 1, Device::cpu, true);
  EXPECT_EQ(cpu.master, size_t(n) * 4);
  EXPECT_EQ(cpu.compute, size_t(0));
  EXPECT_EQ(cpu.moments, size_t(n) * 8);
  const TrainStateBytes cpu4 = train_state_bytes(c, 2, 4, Device::cpu, true, 4096);
  EXPECT_EQ(cpu4.master, size_t(n) * 4);  // the CPU master is the compute copy: whole
  EXPECT_EQ(cpu4.gradients, size_t(n) * 4);
  EXPECT_LT(cpu4.moments, size_t(n) * 8 / 4 + 8 * 64 * 4);
  const TrainStateBytes gpu4 = train_state_bytes(c, 2, 4, Device::cuda, true, 4096);
  EXPECT_EQ(gpu4.master * 2, gpu4.moments);
  EXPECT_EQ(gpu4.compute, size_t(n) * 2);
  const TrainStateBytes off = train_state_bytes(c, 2, 4, Device::cuda, false);
  EXPECT_EQ(off.master, size_t(n) * 4);
  EXPECT_EQ(off.moments, size_t(n) * 8);
  EXPECT_EQ(off.total(), off.master + off.compute + off.gradients + off.moments);
}

}  // namespace
}  // namespace dapo::optim
